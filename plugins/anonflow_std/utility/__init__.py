"""Utility (information-loss) metrics: metrics of category ``utility``."""
