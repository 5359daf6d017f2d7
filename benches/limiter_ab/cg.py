#!/usr/bin/env python3
"""Redis's instructions a request for a limiter variant (callgrind): the
same work as ab.py, on a `redis-server` under `valgrind --tool=callgrind`
with instrumentation on only around the measured requests (after a warm-up of
the same work), whole server (the socket reads and writes, dispatch, Lua).

  python3 benches/limiter_ab/cg.py [--requests N] [--keys K] [--per-call M]
      [--lag L] [--settlements-first] [--age S] [--full-windows] variant ...

`--age S`: settlements name the bucket S seconds old (requests that took S
seconds, as LLM calls do), so a reservation's refund goes to an older
bucket. `--full-windows`: the rpm and tpm counters start with all 61
buckets (a key busy for a minute), as a long-running Redis holds them.
"""
import argparse
import glob
import importlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ab import Conn, free_port, run  # noqa: E402


def fill_windows(conn, mod, keys):
    """Gives each key's rpm and tpm counters a full window: 60 past buckets,
    each holding more tokens than the run refunds."""
    now = int(time.time())
    for k in range(keys):
        rpm, tpm = mod.keys_of(k)[:2]
        for key, units in ((rpm, 5), (tpm, 500_000)):
            args = ["HSET", key, "-1", str(60 * units), "-2", str(now - 60), "-3", str(now)]
            for b in range(now - 60, now):
                args += [str(b), str(units)]
            conn.call(*args)
            conn.call("EXPIRE", key, "600")


def measure(mod, requests, keys, per_call, lag, settlements_first, age, full_windows):
    port = free_port()
    out_dir = tempfile.mkdtemp(prefix="cg-")
    out = os.path.join(out_dir, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no",
         "--callgrind-out-file=" + out,
         "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            conn = Conn(port)
            conn.call("PING")
            break
        except OSError:
            time.sleep(0.1)
    sha = conn.call("SCRIPT", "LOAD", mod.SCRIPT)
    if full_windows:
        fill_windows(conn, mod, keys)
    run(conn, mod, sha, requests, keys, per_call, 50, 0, lag, settlements_first, age)
    subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                   stdout=subprocess.DEVNULL)
    run(conn, mod, sha, requests, keys, per_call, 50, 1, lag, settlements_first, age)
    subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True,
                   stdout=subprocess.DEVNULL)
    conn.s.sendall(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
    proc.wait()
    total = 0
    for f in glob.glob(out + "*"):
        for line in open(f):
            if line.startswith("summary:") or line.startswith("totals:"):
                total = max(total, int(line.split()[1]))
    return total / requests


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--keys", type=int, default=1)
    p.add_argument("--per-call", type=int, default=1)
    p.add_argument("--lag", type=int, default=1)
    p.add_argument("--settlements-first", action="store_true")
    p.add_argument("--age", type=int, default=0)
    p.add_argument("--full-windows", action="store_true")
    p.add_argument("variants", nargs="+")
    a = p.parse_args()
    for v in a.variants:
        ir = measure(importlib.import_module(v), a.requests, a.keys, a.per_call, a.lag,
                     a.settlements_first, a.age, a.full_windows)
        print("%-20s %s instructions/request" % (v, format(int(ir), ",")))


if __name__ == "__main__":
    main()
