# Sourced by the console's index-cost benches: inserts new spend-log
# traffic in the spend writer's batches and times it. Needs `url`, `rows`,
# `batches` (rows / 1000) and `sql` (a scratch file) set by the caller.

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
