#!/usr/bin/env python3
"""The gateway's instructions a request (callgrind), as `loadgen overhead`
configures it: the release gateway under `valgrind --tool=callgrind
--instr-atstart=no` (`GATEWAY_IO_DRIVER=legacy`, `--workers 1`), the
release `loadgen mock` as upstream, one keep-alive client sending chat
completions of about 1 KB (`loadgen`'s filler prose). Instrumentation goes
on after the warm-up requests and 2 s, off 2 s after the measured ones;
the whole process is counted (core, control thread, writers).

  python3 benches/gateway_cg.py --gateway BIN --loadgen BIN --out DIR
      [--variant master|lease] [--database-url URL] [--warmup N] [--requests N]

`master`: the master key, no Redis, no database. `lease` (as
`full-pipeline-lease`): a private `redis-server` on a port the kernel gave,
a fresh Postgres database made from `--database-url` (dropped after),
`GATEWAY_RATE_LIMIT_MODE=lease`, three deployments and a fallback group,
a key with rpm, tpm, parallel limits and `max_budget`. Prints the
instructions a request; the profile is left in DIR for
`callgrind_annotate --inclusive=yes`.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse

MASTER_KEY = "sk-loadgen-bench"
MODEL = "gpt-4o"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{what} did not listen on {port}")


def deployment(upstream, group, ident):
    return (
        f"  - model_name: {group}\n    litellm_params:\n      model: openai/{MODEL}\n"
        f"      api_base: \"http://{upstream}/v1\"\n      api_key: sk-mock\n"
        f"    model_info:\n      id: {ident}\n"
    )


def config(upstream, lease):
    yaml = "model_list:\n"
    if lease:
        for i in range(3):
            yaml += deployment(upstream, MODEL, f"{MODEL}-{i}")
        yaml += deployment(upstream, "fallback", "fallback-0")
        yaml += (
            "router_settings:\n  routing_strategy: simple-shuffle\n  num_retries: 2\n"
            f"  fallbacks: [{{\"{MODEL}\": [\"fallback\"]}}]\n"
        )
    else:
        yaml += deployment(upstream, MODEL, f"{MODEL}-0")
    return yaml + f"general_settings:\n  master_key: {MASTER_KEY}\n"


def chat_body(size=1024, max_tokens=16):
    def render(content):
        return json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": content}],
             "max_tokens": max_tokens, "stream": False},
            separators=(",", ":")).encode()
    words = "the quick brown fox jumps over the lazy dog while the gateway routes "
    n = max(0, size - len(render("")))
    return render((words * (n // len(words) + 1))[:n])


def psql(url, sql):
    subprocess.run(["psql", url, "-q", "-c", sql], check=True,
                   stdout=subprocess.DEVNULL)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gateway", required=True)
    p.add_argument("--loadgen", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--variant", choices=["master", "lease"], default="lease")
    p.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--db-prefix", default="gwcg")
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--requests", type=int, default=2000)
    a = p.parse_args()
    lease = a.variant == "lease"
    os.makedirs(a.out, exist_ok=True)
    procs, db = [], None
    try:
        mock_port = free_port()
        mock = subprocess.Popen(
            [a.loadgen, "mock", "--host", "127.0.0.1", "--port", str(mock_port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(mock)
        wait_port(mock_port, mock, "loadgen mock")
        env = dict(os.environ, GATEWAY_IO_DRIVER="legacy")
        if lease:
            redis_port = free_port()
            redis = subprocess.Popen(
                ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(redis)
            wait_port(redis_port, redis, "redis-server")
            db = f"{a.db_prefix}_{os.getpid()}"
            psql(a.database_url, f"CREATE DATABASE {db}")
            url = urllib.parse.urlsplit(a.database_url)._replace(path="/" + db).geturl()
            env.update(REDIS_URL=f"redis://127.0.0.1:{redis_port}", DATABASE_URL=url,
                       GATEWAY_RATE_LIMIT_MODE="lease")
        cfg = os.path.join(a.out, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config(f"127.0.0.1:{mock_port}", lease))
        port = free_port()
        out = os.path.join(a.out, "callgrind.out")
        log = open(os.path.join(a.out, "gateway.log"), "w")
        gw = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out,
             a.gateway, "--config", cfg, "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"],
            env=env, stdout=log, stderr=log)
        procs.append(gw)
        wait_port(port, gw, "gateway", 600)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        key = MASTER_KEY
        if lease:
            ask = {"models": [MODEL], "rpm_limit": 1000000000, "tpm_limit": 1000000000000,
                   "max_parallel_requests": 1000000, "max_budget": 1000000}
            conn.request("POST", "/key/generate", json.dumps(ask),
                         {"Authorization": f"Bearer {MASTER_KEY}",
                          "Content-Type": "application/json"})
            answer = conn.getresponse()
            key = json.loads(answer.read())["key"]
        body = chat_body()
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

        def send(n):
            for _ in range(n):
                conn.request("POST", "/v1/chat/completions", body, headers)
                answer = conn.getresponse()
                answer.read()
                if answer.status != 200:
                    sys.exit(f"status {answer.status}")

        send(a.warmup)
        time.sleep(2)
        subprocess.run(["callgrind_control", "-i", "on", str(gw.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        send(a.requests)
        time.sleep(2)
        subprocess.run(["callgrind_control", "-i", "off", str(gw.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        conn.close()
        gw.terminate()
        gw.wait(timeout=120)
        log.close()
        total = 0
        for line in open(os.path.join(a.out, "gateway.log")):
            if "Collected :" in line:
                total = int(line.split(":")[-1].replace(",", ""))
        print(f"{a.variant} {a.gateway}: {total / a.requests:,.0f} instructions a request "
              f"({a.requests} requests, profile {out})")
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if db:
            psql(a.database_url, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
