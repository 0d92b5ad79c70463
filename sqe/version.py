"""The version of sqe-spark, the one place it is written (the wheel's metadata reads it)."""

__version__ = "0.2.0"
