"""anonflow: privacy-preserving publication of tabular microdata."""

__version__ = "0.1.0"
