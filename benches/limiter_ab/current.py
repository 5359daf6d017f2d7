"""The gateway's limiter.lua as it ships (the packed protocol: see
packed.py): one key per counter."""
from packed import SCRIPT, encode, keys_of  # noqa: F401
