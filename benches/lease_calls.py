#!/usr/bin/env python3
"""Redis operations a request costs in the limiter's lease (or redis) mode,
by counter kind, counted rather than timed: a release gateway with a private
`redis-server` on a port the kernel gave and `loadgen mock` as upstream,
KEYS virtual keys (rpm, tpm, parallel limits and a budget none of them
reaches, as `loadgen overhead --variant full-pipeline-lease` makes them),
used in turn by THREADS closed-loop clients for SECONDS after a warm-up,
while `MONITOR` counts every script call and each key it names (one
operation of a batched script names its counter's key once; a budget
slice names its hash and its holds set, counted once).

  python3 benches/lease_calls.py --gateway BIN --loadgen BIN
      [--keys N] [--seconds S] [--warmup S] [--threads N] [--mode lease|redis]
      [--config-extra YAML]

Prints the requests served and, per request, the script calls and the
operations on rpm (`requests`), tpm (`tokens`), parallel and budget
counters. The per-key rate (requests/s / KEYS) is what decides how often a
lease is renewed, so compare runs at the same rate.
"""
import argparse
import collections
import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time

MASTER_KEY = "sk-bench"
LIMITS = {"rpm_limit": 1_000_000_000, "tpm_limit": 1_000_000_000_000,
          "max_parallel_requests": 1_000_000, "max_budget": 1_000_000}
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi there"}],
        "max_tokens": 16}
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(conn, path, body, key):
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Authorization": "Bearer " + key,
                          "Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def kind_of(key):
    """The counter kind a script key names, None for a budget's holds."""
    if key.startswith("{budget:"):
        return None if key.endswith(":holds") else "budget"
    return key.rsplit(":", 1)[-1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gateway", default="target/release/gateway")
    p.add_argument("--loadgen", default="target/release/loadgen")
    p.add_argument("--keys", type=int, default=3000)
    p.add_argument("--seconds", type=float, default=40)
    p.add_argument("--warmup", type=float, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mode", default="lease", choices=["lease", "redis"])
    p.add_argument("--config-extra", default="")
    a = p.parse_args()
    scratch = tempfile.mkdtemp(prefix="lease-calls-")
    procs = []
    try:
        redis_port, mock_port, gateway_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL))
        mock = subprocess.Popen([a.loadgen, "mock", "--port", str(mock_port), "--workers", "1"],
                                stdout=subprocess.PIPE, text=True)
        procs.append(mock)
        mock.stdout.readline()
        config = os.path.join(scratch, "config.yaml")
        with open(config, "w") as f:
            f.write(f"""model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: "http://127.0.0.1:{mock_port}/v1"
      api_key: sk-mock
general_settings:
  master_key: {MASTER_KEY}
{a.config_extra}
""")
        env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{redis_port}",
                   GATEWAY_RATE_LIMIT_MODE=a.mode, RUST_LOG="warn")
        log = open(os.path.join(scratch, "gateway.log"), "w")
        procs.append(subprocess.Popen(
            [a.gateway, "--config", config, "--port", str(gateway_port), "--workers", "1"],
            env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.time() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=5)
                conn.request("GET", "/health/liveliness")
                conn.getresponse().read()
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("the gateway did not start; see " + log.name)
                time.sleep(0.1)
        keys = []
        for _ in range(a.keys):
            status, body = post(conn, "/key/generate", dict(LIMITS, models=["gpt-4o"]), MASTER_KEY)
            if status != 200:
                raise SystemExit(f"/key/generate: {status} {body[:200]!r}")
            keys.append(json.loads(body)["key"])

        counting = threading.Event()
        calls = [0]
        ops = collections.Counter()
        monitor = subprocess.Popen(["redis-cli", "-p", str(redis_port), "monitor"],
                                   stdout=subprocess.PIPE, text=True)
        procs.append(monitor)

        def read_monitor():
            for line in monitor.stdout:
                if not counting.is_set() or '"EVALSHA"' not in line.upper():
                    continue
                words = QUOTED.findall(line)
                calls[0] += 1
                for key in words[3:3 + int(words[2])]:
                    kind = kind_of(key)
                    if kind:
                        ops[kind] += 1

        threading.Thread(target=read_monitor, daemon=True).start()
        stop = threading.Event()
        served = [0] * a.threads
        failed = [0]
        turn = iter(range(1 << 62))
        lock = threading.Lock()

        def client(i):
            c = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=10)
            while not stop.is_set():
                with lock:
                    key = keys[next(turn) % len(keys)]
                status, _ = post(c, "/v1/chat/completions", BODY, key)
                if status == 200:
                    served[i] += 1
                else:
                    failed[0] += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.threads)]
        for t in threads:
            t.start()
        time.sleep(a.warmup)
        counting.set()
        before, started = sum(served), time.time()
        time.sleep(a.seconds)
        counting.clear()
        requests, elapsed = sum(served) - before, time.time() - started
        stop.set()
        for t in threads:
            t.join()
        per = lambda n: n / max(requests, 1)
        print(f"{a.mode} mode, {a.keys} keys: {requests} requests in {elapsed:.0f} s "
              f"({requests / elapsed:.0f}/s, {requests / elapsed / a.keys:.2f} a key a second), "
              f"{failed[0]} not 200; per request: {per(calls[0]):.3f} script calls, operations "
              + ", ".join(f"{k} {per(v):.3f}" for k, v in sorted(ops.items())))
    finally:
        for proc in procs:
            proc.kill()


if __name__ == "__main__":
    main()
