"""The version of loadtune, written in every results row."""

__version__ = "0.1.0"
