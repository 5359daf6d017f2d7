#!/usr/bin/env python3
"""Issue 36's performance figures, measured by hand beside nginx.

Starts `loadgen mock`, a release gateway (one worker) and nginx (one
worker, `loadgen overhead`'s reverse-proxy configuration: keep-alive to the
upstream, no request or response buffering), the gateway and nginx pinned
to CPU 0 and the load side to CPU 1, then measures:

1. pass-through against the master key path: the gateway's CPU a request
   for `loadgen run` at a fixed rate on `/v1/chat/completions` (master key,
   an `openai/` deployment) and on `/openai/v1/chat/completions` (the
   pass-through route, the same mock behind it), rounds interleaved A B B A;
2. a 25 MB audio upload (`/v1/audio/transcriptions`, a multipart form with
   a `whisper-1` model field and a 25 MB `file` part), sent over one
   kept-alive connection to the gateway and to nginx in turn: the CPU each
   spends a relayed upload (gateway: the whole process; nginx: master and
   worker, from /proc); the same for a 25 MB `/v1/files` upload (a
   `purpose` field, then the file; the mock keeps each file);
3. the memory a 25 MB upload costs: the gateway's (and nginx's worker's)
   peak resident set, reset through /proc/PID/clear_refs, over C uploads
   in flight at once, against its resident set before them;
4. realtime frames: a WebSocket session to `/v1/realtime` (an upstream
   in this script, Python `websockets`, on CPU 1) relayed by the gateway
   and by nginx (`Upgrade` passed on): K client events of 1 KiB, then a
   response of M `response.audio.delta` events of 8 KiB and its
   `response.done`; the CPU each proxy spends a frame over the session.
   Needs `websockets` (`pip install websockets`); skipped without it.

Prints one JSON object. Usage (from the workspace root, after
`cargo build --release -p gateway -p loadgen`):

    python3 benches/surface/relay.py [--rate 2000] [--duration 5]
        [--rounds 4] [--uploads 12] [--size-mb 25] [--concurrent 4]
        [--frames 20000] [--skip passthrough,upload,files,memory,realtime]
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

MASTER_KEY = "sk-1234"
MOCK_KEY = "sk-mock-upstream"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what):
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited during start-up ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port}")


def cpu_seconds(pid):
    """Time on a CPU of every thread of a process (schedstat, ns), so a
    few uploads are measured finer than the clock tick of /proc/PID/stat."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass  # a thread that just ended
    return total / 1e9


def children(pid):
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out.extend(int(p) for p in f.read().split())
    return out


def nginx_cpu(master):
    return cpu_seconds(master) + sum(cpu_seconds(c) for c in children(master))


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing")


def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


NGINX_CONF = """worker_processes 1;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    keepalive_requests 1000000;
    upstream mock {{ server 127.0.0.1:{mock}; keepalive 1024; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} reuseport;
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
        location /v1/realtime {{
            proxy_pass http://127.0.0.1:{ws};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""

CONFIG = """model_list:
  - model_name: gpt-4o
    litellm_params: {{model: openai/gpt-4o, api_base: "http://127.0.0.1:{mock}/v1", api_key: {key}}}
  - model_name: whisper-1
    litellm_params: {{model: openai/whisper-1, api_base: "http://127.0.0.1:{mock}/v1", api_key: {key}}}
  - model_name: gpt-rt
    litellm_params: {{model: openai/gpt-realtime, api_base: "http://127.0.0.1:{ws}/v1", api_key: {key}, input_cost_per_token: 1.0e-6, output_cost_per_token: 2.0e-6}}
general_settings:
  master_key: {master}
  max_request_size_mb: 64
"""


# The field before a transcription's file, and before a `/v1/files` upload's.
MODEL_FIELD = ("model", "whisper-1")
FILE_FIELD = ("purpose", "user_data")


def form(size, first=MODEL_FIELD):
    boundary = "benchboundary7MA4YWxkTrZu0gW"
    head = (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"{first[0]}\"\r\n\r\n{first[1]}\r\n"
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    # Random bytes: a boundary of 28 characters after `--` does not occur
    # in them by chance.
    return f"multipart/form-data; boundary={boundary}", head + os.urandom(size) + tail


def upload(conn, path, key, content_type, body):
    conn.request("POST", path, body=body, headers={
        "Authorization": f"Bearer {key}",
        "Content-Type": content_type,
    })
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        sys.exit(f"upload to {path}: {resp.status} {data[:300]!r}")


USAGE = {"total_tokens": 20, "input_tokens": 10, "output_tokens": 10,
         "input_token_details": {"text_tokens": 10, "audio_tokens": 0, "cached_tokens": 0},
         "output_token_details": {"text_tokens": 10, "audio_tokens": 0}}


def realtime_upstream(port, deltas):
    """A realtime API upstream on `port`: session.created, then for each
    response.create `deltas` audio deltas of 8 KiB and a response.done."""
    from websockets.sync.server import serve

    delta = json.dumps({"type": "response.audio.delta", "delta": "A" * 8150})
    done = json.dumps({"type": "response.done", "response": {"usage": USAGE}})

    def handler(ws):
        ws.send(json.dumps({"type": "session.created", "session": {"model": "gpt-realtime"}}))
        for message in ws:
            if json.loads(message).get("type") == "response.create":
                for _ in range(deltas):
                    ws.send(delta)
                ws.send(done)

    server = serve(handler, "127.0.0.1", port, max_size=None, compression=None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def realtime_session(port, key, events, cpu):
    """One session through the proxy on `port`: `events` client events of
    1 KiB, one response; the proxy's CPU (seconds) and the frames relayed."""
    from websockets.sync.client import connect

    ws = connect(f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-rt",
                 additional_headers={"Authorization": f"Bearer {key}"},
                 max_size=None, compression=None, open_timeout=20)
    assert json.loads(ws.recv())["type"] == "session.created"
    event = json.dumps({"type": "input_audio_buffer.append", "audio": "B" * 980})
    before = cpu()
    for _ in range(events):
        ws.send(event)
    ws.send(json.dumps({"type": "response.create"}))
    frames = events + 1
    while True:
        frames += 1
        if json.loads(ws.recv(timeout=60))["type"] == "response.done":
            break
    spent = cpu() - before
    ws.close()
    return spent, frames


def loadgen_run(loadgen, port, path, rate, duration, out):
    subprocess.run(
        ["taskset", "-c", "1", loadgen, "run", "--url", f"http://127.0.0.1:{port}{path}",
         "--key", MASTER_KEY, "--rate", str(rate), "--duration", f"{duration}s",
         "--connections", "32", "--json", out],
        check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["result"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", default="target/release/gateway")
    ap.add_argument("--loadgen", default="target/release/loadgen")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--uploads", type=int, default=12)
    ap.add_argument("--size-mb", type=float, default=25)
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--skip", default="", help="comma list: passthrough,upload,files,memory,realtime")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    tmp = tempfile.mkdtemp(prefix="surface-bench-")
    mock_port, gw_port, nginx_port, ws_port = free_port(), free_port(), free_port(), free_port()
    procs = []
    try:
        mock = subprocess.Popen(
            ["taskset", "-c", "1", a.loadgen, "mock", "--port", str(mock_port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/mock.log", "w"))
        procs.append(mock)
        wait_listening(mock_port, mock, "mock")
        with open(f"{tmp}/config.yaml", "w") as f:
            f.write(CONFIG.format(mock=mock_port, ws=ws_port, key=MOCK_KEY, master=MASTER_KEY))
        env = dict(os.environ, OPENAI_API_BASE=f"http://127.0.0.1:{mock_port}",
                   OPENAI_API_KEY=MOCK_KEY, RUST_LOG="warn")
        gw = subprocess.Popen(
            ["taskset", "-c", "0", a.gateway, "--config", f"{tmp}/config.yaml", "--host",
             "127.0.0.1", "--port", str(gw_port), "--workers", "1"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/gateway.log", "w"))
        procs.append(gw)
        wait_listening(gw_port, gw, "gateway")
        with open(f"{tmp}/nginx.conf", "w") as f:
            f.write(NGINX_CONF.format(dir=tmp, mock=mock_port, ws=ws_port, port=nginx_port))
        nginx = subprocess.Popen(
            ["taskset", "-c", "0", "/usr/sbin/nginx", "-c", f"{tmp}/nginx.conf", "-p", tmp],
            stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/nginx.log", "w"))
        procs.append(nginx)
        wait_listening(nginx_port, nginx, "nginx")
        report = {"load_average_before": os.getloadavg()}

        if "passthrough" not in skip:
            paths = {"master-key": "/v1/chat/completions",
                     "pass-through": "/openai/v1/chat/completions"}
            for name, path in paths.items():  # warm-up
                loadgen_run(a.loadgen, gw_port, path, a.rate, 1, f"{tmp}/warm.json")
            rounds = []
            for r in range(a.rounds):
                order = list(paths) if r % 2 == 0 else list(reversed(paths))
                row = {}
                for name in order:
                    before = cpu_seconds(gw.pid)
                    s = loadgen_run(a.loadgen, gw_port, paths[name], a.rate, a.duration,
                                    f"{tmp}/{name}.json")
                    cpu = cpu_seconds(gw.pid) - before
                    if s["ok"] != s["completed"] or s["failed"]:
                        sys.exit(f"{name}: not every request answered 2xx: {s['status']} {s['failures']}")
                    row[name] = round(cpu * 1e6 / max(s["completed"], 1), 1)
                row["ratio"] = round(row["pass-through"] / row["master-key"], 3)
                rounds.append(row)
            report["passthrough_us_per_request"] = rounds

        content_type, body = form(int(a.size_mb * 1024 * 1024))
        uploads = [("upload", "upload_cpu_ms_per_upload", "/v1/audio/transcriptions",
                    content_type, body)]
        if "files" not in skip:
            file_type, file_body = form(int(a.size_mb * 1024 * 1024), first=FILE_FIELD)
            uploads.append(("files", "files_upload_cpu_ms_per_upload", "/v1/files",
                            file_type, file_body))
        for part, label, path, ctype, payload in uploads:
            if part in skip:
                continue
            targets = {"gateway": (gw_port, MASTER_KEY, lambda: cpu_seconds(gw.pid)),
                       "nginx": (nginx_port, MOCK_KEY, lambda: nginx_cpu(nginx.pid))}
            conns = {n: http.client.HTTPConnection("127.0.0.1", p, timeout=60)
                     for n, (p, _, _) in targets.items()}
            for name, (port, key, _) in targets.items():  # warm-up
                upload(conns[name], path, key, ctype, payload)
            rounds = []
            per_round = max(a.uploads // a.rounds, 1)
            for r in range(a.rounds):
                order = list(targets) if r % 2 == 0 else list(reversed(targets))
                row = {}
                for name in order:
                    port, key, cpu = targets[name]
                    before = cpu()
                    for _ in range(per_round):
                        upload(conns[name], path, key, ctype, payload)
                    row[name] = round((cpu() - before) * 1e3 / per_round, 2)
                row["ratio"] = round(row["gateway"] / row["nginx"], 3)
                rounds.append(row)
            report[label] = rounds

        if "memory" not in skip:
            mem = {}
            for name, port, key, pid in [("gateway", gw_port, MASTER_KEY, gw.pid),
                                         ("nginx", nginx_port, MOCK_KEY, children(nginx.pid)[0])]:
                time.sleep(0.5)
                rss_before = status_kb(pid, "VmRSS")
                reset_peak(pid)
                threads = []
                for _ in range(a.concurrent):
                    def go(port=port, key=key):
                        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                        upload(c, "/v1/audio/transcriptions", key, content_type, body)
                        c.close()
                    t = threading.Thread(target=go)
                    t.start()
                    threads.append(t)
                for t in threads:
                    t.join()
                peak = status_kb(pid, "VmHWM")
                mem[name] = {"rss_before_kb": rss_before, "peak_kb": peak,
                             "per_upload_kb": round((peak - rss_before) / a.concurrent)}
            mem["upload_kb"] = len(body) // 1024
            mem["in_flight"] = a.concurrent
            report["upload_memory"] = mem
        if "realtime" not in skip:
            try:
                import websockets  # noqa: F401
            except ImportError:
                skip.add("realtime")
                report["realtime"] = "skipped: pip install websockets"
        if "realtime" not in skip:
            # Half the frames each way: client events, then audio deltas.
            half = a.frames // 2
            realtime_upstream(ws_port, half)
            targets = {"gateway": (gw_port, MASTER_KEY, lambda: cpu_seconds(gw.pid)),
                       "nginx": (nginx_port, MOCK_KEY, lambda: nginx_cpu(nginx.pid))}
            for name, (port, key, cpu) in targets.items():  # warm-up
                realtime_session(port, key, 100, cpu)
            rounds = []
            for r in range(a.rounds):
                order = list(targets) if r % 2 == 0 else list(reversed(targets))
                row = {}
                for name in order:
                    port, key, cpu = targets[name]
                    spent, frames = realtime_session(port, key, half, cpu)
                    row[name] = round(spent * 1e6 / frames, 2)
                row["added"] = round(row["gateway"] - row["nginx"], 2)
                rounds.append(row)
            report["realtime_us_per_frame"] = rounds
        report["load_average_after"] = os.getloadavg()
        print(json.dumps(report, indent=1))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
