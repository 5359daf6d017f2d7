"""Times the console's Logs calls by page token (/gateway/logs) and the Keys
and Limits lists against benches/console/seed.sql's data:
python3 time_pages.py [CALLS_PER_ROW] [NAME_FILTER]; GATEWAY_URL, GATEWAY_MASTER_KEY;
KEY_BASE (default 100): the first of the keys "a different key each call" asks
about (give each run keys no run before read, so their rows are not cached).
Deep pages start at a page token made from a seeded row (what the page
before it hands out), so no call walks the pages before it."""
import datetime
import hashlib
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("GATEWAY_URL", "http://127.0.0.1:4000")
H = {"Authorization": "Bearer " + os.environ.get("GATEWAY_MASTER_KEY", "sk-1234")}
ROWS = 10_000_000


def get(path):
    with urllib.request.urlopen(urllib.request.Request(BASE + path, headers=H), timeout=30) as r:
        return json.load(r)


def token_at(i):
    """The page token just older than seeded row `i` (its newer rows are pages before)."""
    rid = "req-" + str(i).zfill(9)
    row = get(f"/spend/logs?request_id={rid}")[0]
    at = datetime.datetime.fromisoformat(row["startTime"].replace("Z", "+00:00"))
    nanos = (at - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1) * 1000
    return urllib.parse.quote(f"{nanos}:{rid}")


today = datetime.datetime.utcnow().date().isoformat()
key7 = hashlib.md5(b"key-7").hexdigest()
req = "req-" + str(9_999_000).zfill(9)
deep_today = token_at(ROWS - 100_000)  # 100,000 rows into the newest (about page 1,000 of today)
deep = token_at(ROWS - 1_000_000)  # a million rows in (page 10,000)
last = token_at(101)  # the oldest 100 rows are the page after it
L = "/gateway/logs?page_size=100"
calls = [
    ("Logs: today, first page", f"{L}&start_date={today}"),
    ("Logs: today, 100,000 rows in (page 1,001)", f"{L}&start_date={today}&page_token={deep_today}"),
    ("Logs: no date, first page (all 10M rows)", L),
    ("Logs: no date, 1,000,000 rows in (page 10,001)", f"{L}&page_token={deep}"),
    ("Logs: no date, the last page (oldest rows)", f"{L}&page_token={last}"),
    ("Logs: a key, today", f"{L}&api_key={key7}&start_date={today}"),
    ("Logs: a key, no date (its 10,000 rows)", f"{L}&api_key={key7}"),
    ("Logs: a key, no date, 1,000,000 rows in", f"{L}&api_key={key7}&page_token={deep}"),
    ("Logs: a user (0.1 %), today", f"{L}&user_id=user-42&start_date={today}"),
    ("Logs: a team (1 %), today", f"{L}&team_id=team-7&start_date={today}"),
    ("Logs: a model group (10 %), today", f"{L}&model=group-3&start_date={today}"),
    ("Logs: status failure (2 %), today", f"{L}&status=failure&start_date={today}"),
    ("Logs: a request id", f"{L}&request_id={req}"),
    ("Logs: a team (1 %), no date", f"{L}&team_id=team-7"),
    ("Logs: a user (0.1 %), no date", f"{L}&user_id=user-42"),
    ("Logs: a team (1 %), 1,000,000 rows in", f"{L}&team_id=team-7&page_token={deep}"),
    ("Logs: a team with no rows, today", f"{L}&team_id=team-none&start_date={today}"),
    ("Logs: a model with no rows, today", f"{L}&model=none&start_date={today}"),
    ("Logs: a team with no rows, no date", f"{L}&team_id=team-none"),
    ("Logs: a user with no rows, no date", f"{L}&user_id=user-none"),
    ("Logs: a different key each call, no date", f"{L}&api_key={{key}}"),
    ("Logs: a different key each call, today", f"{L}&api_key={{key}}&start_date={today}"),
    ("Logs: a key with no rows, no date", f"{L}&api_key={hashlib.md5(b'none').hexdigest()}"),
    ("Keys: page 1 of 4,000", "/key/list?return_full_object=true&size=25&page=1"),
    ("Keys: page 4,000 (last)", "/key/list?return_full_object=true&size=25&page=4000"),
    ("Keys: alias search", "/key/list?return_full_object=true&size=25&page=1&key_alias=bench-77777"),
    ("Limits: keys with limits (none of 100,000)", "/key/list?return_full_object=true&has_limits=true&size=25"),
]
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
fresh_key = iter(range(int(os.environ.get("KEY_BASE", "100")), 10**9))
only = sys.argv[2] if len(sys.argv) > 2 else None
print("| call | status | rows | partial (searched back to) | median | p95 |")
print("| --- | --- | --- | --- | --- | --- |")
for name, path in calls:
    if only and only not in name:
        continue
    times, rows, status, partial = [], None, None, ""
    for _ in range(n):
        t = time.perf_counter()
        try:
            body = get(path.replace("{key}", hashlib.md5(f"key-{next(fresh_key) % 1000}".encode()).hexdigest()))
            status = 200
        except urllib.error.HTTPError as e:
            body = None
            status = e.code
        times.append((time.perf_counter() - t) * 1000)
        if body is not None:
            if "keys" in body:
                rows = len(body["keys"])
            else:
                rows = len(body["data"])
                partial = f"yes ({body['searched_to'][:19]})" if body["partial"] else "no"
    times.sort()
    p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
    print(f"| {name} | {status} | {rows} | {partial} | {statistics.median(times):.1f} ms | {p95:.1f} ms |", flush=True)
