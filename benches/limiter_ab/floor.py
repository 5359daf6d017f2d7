"""Measurement only: an EVALSHA with one key and one argument doing nothing."""
SCRIPT = "return 1"


def encode(ops):
    return [b"1", b"{key:0}", b"x"]
