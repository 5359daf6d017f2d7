#!/usr/bin/env python3
"""A/B of limiter scripts on a private redis-server: Redis's CPU a request.

Drives the same work the gateway's per-core link sends in `redis` mode
(each call: the previous request's settlement, then this request's
admission of rpm, tpm and parallel on one key, as FINISH_HOLD pairs them),
pipelined `--pipeline` calls at a time, and reads Redis's CPU
(`used_cpu_user` + `used_cpu_sys` of `INFO cpu`) around `--requests`
requests per variant. Variants run interleaved (A, B, A, B, ...) so load
on the machine falls on both alike.

  python3 benches/limiter_ab/ab.py [--requests N] [--keys K] [--rounds R]
      [--per-call M] [--lag L] [--settlements-first] variant ...

`--lag L` settles request i-L (not i-1) with request i's admission: the
gateway settles a request only after its answer, so a call never carries
the settlement of an admission in the same call; at c=32, about 32
requests later.

`--settlements-first` puts a call's settlements ahead of all its
admissions (as the gateway's link sends them: settlements wait for an
admission to ride with, and the queue keeps arrival order) rather than
each before its own request's admission.

A variant is a module name in this directory exposing SCRIPT (the Lua
text) and encode(ops) -> list of bytes args (after EVALSHA sha), where ops
is a list of ('a'|'f', key_index, request_id, admitted_tick, held) tuples
(`held`: for a settlement, the slots its set held when its slot was taken,
as its admission's reply said; None for an admission).
"""
import argparse
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.s.recv(1 << 20)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("bad reply %r" % line)

    def call(self, *args):
        self.s.sendall(resp(list(args)))
        return self.read()

    def pipeline(self, commands):
        self.s.sendall(b"".join(resp(c) for c in commands))
        return [self.read_safe() for _ in commands]

    def read_safe(self):
        try:
            return self.read()
        except RuntimeError as e:
            return e


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_redis():
    """A redis-server of our own on a port the kernel gave: (process, port).
    Another process may take the port between the kernel's answer and the
    server's bind; then the server exits, or the one answering is not ours
    (its process id says so), and another port is tried."""
    for _ in range(20):
        port = free_port()
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                                 "--appendonly", "no", "--dir", tempfile.gettempdir()],
                                stdout=subprocess.DEVNULL)
        deadline = time.time() + 10
        while proc.poll() is None and time.time() < deadline:
            try:
                conn = Conn(port)
            except OSError:
                time.sleep(0.05)
                continue
            info = conn.call("INFO", "server")
            conn.s.close()
            if b"process_id:%d\r\n" % proc.pid in info:
                return proc, port
            break
        proc.kill()
        proc.wait()
    sys.exit("no redis-server of our own would start")


def cpu(conn):
    info = conn.call("INFO", "cpu").decode()
    f = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
    return float(f["used_cpu_user"]) + float(f["used_cpu_sys"])


def run(conn, mod, sha, requests, keys, per_call, pipeline, seq, lag=1,
        settlements_first=False, age=0):
    """Sends `requests` requests, `per_call` a call; Redis CPU µs/request.
    Settlements name the bucket `age` seconds before now as their
    admission's (requests that took that long)."""
    # Each request: the previous request's settlement, then its admission;
    # `per_call` requests' operations go in one call (its settlements
    # first when `settlements_first`).
    tick = int(time.time())
    rid = lambda i: "r%d-%d" % (seq, i)
    # The slots request i's set held when it took its slot (its admission's
    # `used`), which its settlement names: the earlier requests on its key
    # not settled yet.
    held = lambda i: sum(1 for j in range(max(0, i - lag + 1), i) if j % keys == i % keys)
    per_request = [
        ([("f", (i - lag) % keys, rid(i - lag), tick - age, held(i - lag))] if i >= lag else [])
        + [("a", i % keys, rid(i), tick, None)]
        for i in range(requests)
    ]
    grouped = [sum(per_request[j:j + per_call], []) for j in range(0, requests, per_call)]
    if settlements_first:
        grouped = [[o for o in ops if o[0] == "f"] + [o for o in ops if o[0] == "a"]
                   for ops in grouped]
    before = cpu(conn)
    for j in range(0, len(grouped), pipeline):
        cmds = [[b"EVALSHA", sha] + mod.encode(ops) for ops in grouped[j:j + pipeline]]
        for r in conn.pipeline(cmds):
            if isinstance(r, Exception):
                raise r
    after = cpu(conn)
    return (after - before) * 1e6 / requests


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--keys", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--per-call", type=int, default=1)
    p.add_argument("--pipeline", type=int, default=50)
    p.add_argument("--lag", type=int, default=1)
    p.add_argument("--settlements-first", action="store_true")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("variants", nargs="+")
    a = p.parse_args()
    proc = None
    port = a.port
    if not port:
        proc, port = private_redis()
    try:
        conn = Conn(port)
        mods = [(v, importlib.import_module(v)) for v in a.variants]
        shas = {v: conn.call("SCRIPT", "LOAD", m.SCRIPT) for v, m in mods}
        results = {v: [] for v, _ in mods}
        for r in range(a.rounds):
            for v, m in mods:
                conn.call("FLUSHALL")
                conn.call("CONFIG", "RESETSTAT")
                us = run(conn, m, shas[v], a.requests, a.keys, a.per_call, a.pipeline, r, a.lag,
                          a.settlements_first)
                results[v].append(us)
        for v, _ in mods:
            print("%-20s %s µs/request" % (v, ", ".join("%.1f" % x for x in results[v])))
    finally:
        if proc:
            proc.kill()


if __name__ == "__main__":
    main()
