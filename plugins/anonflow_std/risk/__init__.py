"""Disclosure-risk measures: metrics of category ``risk``."""
