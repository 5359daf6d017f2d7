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

# One file of `batches` INSERTs of 1,000 rows each, ids prefixed by $1: new
# traffic (now, 1,000 keys, 1,000 users, 100 teams), as seed.sql's.
write_batches() {
    : >"$sql"
    for ((b = 0; b < batches; b++)); do
        cat >>"$sql" <<SQL
INSERT INTO "LiteLLM_SpendLogs" (request_id, call_id, attempt, call_type, api_key, spend,
    total_tokens, prompt_tokens, completion_tokens, "startTime", "endTime", model, model_id,
    model_group, custom_llm_provider, api_base, "user", team_id, status, status_code)
SELECT '$1-$b-' || i, '$1-$b-' || i, 1, 'acompletion', md5('key-' || (i % 1000)::text),
    0.0003, 22, 18, 4, clock_timestamp()::timestamp, clock_timestamp()::timestamp,
    'gpt-' || (i % 10), 'dep-' || (i % 10), 'group-' || (i % 10), 'openai',
    'http://upstream/v1', 'user-' || ((i * 7919) % 1000), 'team-' || ((i * 31) % 100),
    'success', 200
FROM generate_series(1, 1000) AS i;
SQL
    done
}

# Inserts the batches; prints µs per row.
timed_insert() {
    write_batches "$1"
    local t0 t1
    t0=$(date +%s%N)
    psql -q -v ON_ERROR_STOP=1 "$url" -f "$sql" >/dev/null
    t1=$(date +%s%N)
    awk -v ns=$((t1 - t0)) -v n="$rows" 'BEGIN { printf "%.1f", ns / 1000 / n }'
}

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
