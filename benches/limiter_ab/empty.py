"""Measurement only: the current arguments to a script that does nothing."""
from current import encode  # noqa: F401
SCRIPT = "return 1"
