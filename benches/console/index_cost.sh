#!/usr/bin/env bash
# What the indexes a user or team filter of the console's Logs could read
# through, ("user", "startTime") and (team_id, "startTime"), cost the spend
# writer: ROWS rows inserted into LiteLLM_SpendLogs in statements of 1,000
# (the writer's batches), without the two indexes and with them, ROUNDS
# times alternately, on a database seeded by seed.sql (10M rows). Prints
# each run's µs per row and the difference. The rows are new traffic: now,
# 1,000 users, 100 teams, as seed.sql's.
#   benches/console/index_cost.sh DATABASE_URL [ROWS] [ROUNDS]
set -euo pipefail
url=$1
rows=${2:-100000}
rounds=${3:-3}
batches=$((rows / 1000))
sql=$(mktemp)
trap 'rm -f "$sql"' EXIT

# write_batches and timed_insert: new traffic inserted in the writer's batches.
source "$(dirname "$0")/timed_insert.sh"

psql -q "$url" -c 'DROP INDEX IF EXISTS bench_spendlogs_user_time, bench_spendlogs_team_time'
echo "| round | without (µs/row) | with both indexes (µs/row) | difference |"
echo "| --- | --- | --- | --- |"
for ((r = 1; r <= rounds; r++)); do
    without=$(timed_insert "ix$r-a")
    psql -q "$url" -c 'CREATE INDEX bench_spendlogs_user_time ON "LiteLLM_SpendLogs" ("user", "startTime")' \
        -c 'CREATE INDEX bench_spendlogs_team_time ON "LiteLLM_SpendLogs" (team_id, "startTime")'
    with=$(timed_insert "ix$r-b")
    psql -q "$url" -c 'DROP INDEX bench_spendlogs_user_time, bench_spendlogs_team_time'
    echo "| $r | $without | $with | $(awk -v a="$without" -v b="$with" 'BEGIN { printf "%+.1f", b - a }') |"
done
