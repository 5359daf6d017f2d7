#!/usr/bin/env bash
# What LiteLLM's (api_key, "startTime") index of the spend log costs the
# spend writer against the gateway's former index on api_key alone: ROWS
# rows inserted in statements of 1,000 (the writer's batches) with each of
# the two in place (the other dropped), ROUNDS times alternately, on a
# database seeded by seed.sql (10M rows). Each swap builds an index over
# the whole table (about 45 s at 10M rows), and the round's first insert
# follows a build, so odd rounds insert with the old index first and even
# rounds with the new one first. Prints µs per row.
#   benches/console/key_index_cost.sh DATABASE_URL [ROWS] [ROUNDS]
set -euo pipefail
url=$1
rows=${2:-50000}
rounds=${3:-2}
batches=$((rows / 1000))
sql=$(mktemp)
trap 'rm -f "$sql"' EXIT

# write_batches and timed_insert: new traffic inserted in the writer's batches.
source "$(dirname "$0")/timed_insert.sh"

old='CREATE INDEX IF NOT EXISTS gateway_spendlogs_api_key_idx ON "LiteLLM_SpendLogs" (api_key)'
new='CREATE INDEX IF NOT EXISTS "LiteLLM_SpendLogs_api_key_startTime_idx" ON "LiteLLM_SpendLogs" (api_key, "startTime")'
echo "| round | (api_key) (µs/row) | (api_key, \"startTime\") (µs/row) | difference |"
echo "| --- | --- | --- | --- |"
with_old() {
    psql -q "$url" -c "SET maintenance_work_mem = '256MB'" -c "$old" \
        -c 'DROP INDEX IF EXISTS "LiteLLM_SpendLogs_api_key_startTime_idx"'
    before=$(timed_insert "kx$1-a")
}
with_new() {
    psql -q "$url" -c "SET maintenance_work_mem = '256MB'" -c "$new" \
        -c 'DROP INDEX IF EXISTS gateway_spendlogs_api_key_idx'
    after=$(timed_insert "kx$1-b")
}
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
        with_old "$r$$"
        with_new "$r$$"
    else
        with_new "$r$$"
        with_old "$r$$"
    fi
    echo "| $r | $before | $after | $(awk -v a="$before" -v b="$after" 'BEGIN { printf "%+.1f", b - a }') |"
done
# Leave the database as migration 0031 does.
psql -q "$url" -c "$new" -c 'DROP INDEX IF EXISTS gateway_spendlogs_api_key_idx'
