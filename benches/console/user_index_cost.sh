#!/usr/bin/env bash
# What LiteLLM's ("user", "startTime") index of the spend log (migration
# 0032) costs the spend writer: ROWS rows inserted in statements of 1,000
# (the writer's batches) without it and with it, ROUNDS times; odd rounds
# insert without it first, even rounds with it first (each build is over
# the whole table, so neither side always follows a fresh build), on a
# database seeded by seed.sql (10M rows). Prints µs per row. Leaves the
# index in place, as the migration does.
#   benches/console/user_index_cost.sh DATABASE_URL [ROWS] [ROUNDS]
set -euo pipefail
url=$1
rows=${2:-50000}
rounds=${3:-2}
batches=$((rows / 1000))
sql=$(mktemp)
trap 'rm -f "$sql"' EXIT

# write_batches and timed_insert: new traffic inserted in the writer's batches.
source "$(dirname "$0")/timed_insert.sh"

index='CREATE INDEX IF NOT EXISTS "LiteLLM_SpendLogs_user_startTime_idx" ON "LiteLLM_SpendLogs" ("user", "startTime")'
without_index() {
    psql -q "$url" -c 'DROP INDEX IF EXISTS "LiteLLM_SpendLogs_user_startTime_idx"'
    without=$(timed_insert "ux$1-a")
}
with_index() {
    psql -q "$url" -c "SET maintenance_work_mem = '256MB'" -c "$index"
    with=$(timed_insert "ux$1-b")
}
echo "| round | without (µs/row) | with (\"user\", \"startTime\") (µs/row) | difference |"
echo "| --- | --- | --- | --- |"
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
        without_index "$r$$"
        with_index "$r$$"
    else
        with_index "$r$$"
        without_index "$r$$"
    fi
    echo "| $r | $without | $with | $(awk -v a="$without" -v b="$with" 'BEGIN { printf "%+.1f", b - a }') |"
done
psql -q "$url" -c "SET maintenance_work_mem = '256MB'" -c "$index"
