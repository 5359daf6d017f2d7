"""Measurement only: one key, one argument, TIME and nothing else."""
SCRIPT = "local t = redis.call('TIME') return 1"


def encode(ops):
    return [b"1", b"{key:0}", b"x"]
