"""limiter.lua with a run path: consecutive operations on the same counters
change a copy read once, each counter written once at the end of the run."""
import os

from current import encode  # noqa: F401  (same arguments as the shipped script)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = open(os.path.join(HERE, "hot_run.lua")).read()
