"""The package version, one place (the sweep store keys its points on it)."""

__version__ = "0.1.0"
