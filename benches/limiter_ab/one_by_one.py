"""limiter.lua before the run path (every operation re-reads and re-writes
its counters with its own redis.calls): the baseline of the hot_run A/B and
the reference diff.py compares against."""
import os

from shipped import encode  # noqa: F401  (the unpacked protocol)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = open(os.path.join(HERE, "one_by_one.lua")).read()
