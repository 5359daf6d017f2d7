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

# One file of `batches` INSERTs of 1,000 rows each, ids prefixed by $1.
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
