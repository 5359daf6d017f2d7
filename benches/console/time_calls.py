"""Times the console's Logs and Keys calls against benches/console/seed.sql's data:
python3 time_calls.py [CALLS_PER_ROW] [NAME_FILTER]; GATEWAY_URL, GATEWAY_MASTER_KEY."""
import datetime
import hashlib
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request
BASE = os.environ.get("GATEWAY_URL", "http://127.0.0.1:4000")
H = {"Authorization": "Bearer " + os.environ.get("GATEWAY_MASTER_KEY", "sk-1234")}
today = datetime.datetime.utcnow().date().isoformat()
key7 = hashlib.md5(b"key-7").hexdigest()
req = "req-" + str(9_999_000).zfill(9)  # a row of the seeding day
calls = [
    ("Logs: today, page 1 (the page's first call)", f"/spend/logs?start_date={today}&page=1&page_size=100"),
    ("Logs: today, page 1,000", f"/spend/logs?start_date={today}&page=1000&page_size=100"),
    ("Logs: today, page 1,300 (near today's last)", f"/spend/logs?start_date={today}&page=1300&page_size=100"),
    ("Logs: no date, page 1 (all 10M rows)", "/spend/logs?page=1&page_size=100"),
    ("Logs: no date, page 10,000 (1M rows in)", "/spend/logs?page=10000&page_size=100"),
    ("Logs: key, today", f"/spend/logs?api_key={key7}&start_date={today}&page=1&page_size=100"),
    ("Logs: key, no date (10,000 rows)", f"/spend/logs?api_key={key7}&page=1&page_size=100"),
    ("Logs: user, today", f"/spend/logs?user_id=user-42&start_date={today}&page=1&page_size=100"),
    ("Logs: team, today", f"/spend/logs?team_id=team-7&start_date={today}&page=1&page_size=100"),
    ("Logs: model, today", f"/spend/logs?model=group-3&start_date={today}&page=1&page_size=100"),
    ("Logs: status failure, today", f"/spend/logs?status=failure&start_date={today}&page=1&page_size=100"),
    ("Logs: request id, today", f"/spend/logs?request_id={req}&start_date={today}&page=1&page_size=100"),
    ("Logs: team, no date", "/spend/logs?team_id=team-7&page=1&page_size=100"),
    ("Logs: user, no date", "/spend/logs?user_id=user-42&page=1&page_size=100"),
    ("Logs: no such team, today", f"/spend/logs?team_id=team-none&start_date={today}&page=1&page_size=100"),
    ("Logs: no such model, today", f"/spend/logs?model=none&start_date={today}&page=1&page_size=100"),
    ("Logs: no such team, no date", "/spend/logs?team_id=team-none&page=1&page_size=100"),
    ("Logs: no such user, no date", "/spend/logs?user_id=user-none&page=1&page_size=100"),
    ("Keys: page 1 of 4,000", "/key/list?return_full_object=true&size=25&page=1"),
    ("Keys: page 4,000", "/key/list?return_full_object=true&size=25&page=4000"),
    ("Keys: alias search", "/key/list?return_full_object=true&size=25&page=1&key_alias=bench-77777"),
]
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
only = sys.argv[2] if len(sys.argv) > 2 else None
for name, path in calls:
    if only and only not in name:
        continue
    times, rows, status = [], None, None
    for _ in range(n):
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(urllib.request.Request(BASE + path, headers=H), timeout=30) as r:
                body = json.load(r); status = r.status
        except urllib.error.HTTPError as e:
            body = None; status = e.code
        times.append((time.perf_counter() - t) * 1000)
        if body is not None:
            rows = len(body) if isinstance(body, list) else len(body.get("keys", []))
    times.sort()
    p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
    print(f"| {name} | {status} | {rows} | {statistics.median(times):.1f} ms | {p95:.1f} ms |", flush=True)
