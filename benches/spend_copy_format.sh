#!/usr/bin/env bash
# Postgres's CPU per spend row, COPY text against COPY binary: the same
# ROWS rows (like the full pipeline's: UUID request ids, KEYS keys,
# `chatcmpl-<random>` answer ids, NULL user and team, a 100-byte
# `metadata`) copied into "LiteLLM_SpendLogs" with the gateway's
# migrations (every index) in batches of 200 rows, each its own
# transaction (the writer's), into an emptied table; the backend's CPU read
# from /proc/<pid>/schedstat. Formats alternate, ROUNDS times each. The
# batches are written once by Postgres itself (`COPY … TO` in each format:
# the wire forms the gateway's encoders write).
#   benches/spend_copy_format.sh ADMIN_URL DBNAME [ROWS] [ROUNDS] [KEYS]
# Creates DBNAME (dropped at the end) and needs the gateway's migrations
# applied by the gateway binary in GATEWAY_MIGRATE (a command that takes the
# database URL), else by psql in migrate.rs's order.
set -euo pipefail
admin=$1
db=$2
rows=${3:-20000}
rounds=${4:-2}
keys=${5:-1}
batch=200
url=${admin%/*}/$db
dir=$(mktemp -d)
trap 'rm -rf "$dir"; psql -q "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
repo=$(cd "$(dirname "$0")/.." && pwd)
cols='request_id, call_id, attempt, call_type, api_key, spend, total_tokens, prompt_tokens, completion_tokens, "startTime", "completionStartTime", "endTime", model, model_id, model_group, custom_llm_provider, api_base, region, "user", team_id, status, status_code, error_class, error_message, litellm_call_id, request_duration_ms, metadata, end_user, response_id, cache_hit, cache_key, proxy_server_request, response'

psql -q "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
grep -o 'migrations/[0-9a-z_]*\.sql' "$repo/gateway/src/store/postgres/migrate.rs" | while read -r f; do
    psql -q -v ON_ERROR_STOP=1 "$url" -f "$repo/$f" >/dev/null
done

psql -q -v ON_ERROR_STOP=1 "$url" <<SQL
CREATE TABLE src AS
SELECT n, gen_random_uuid()::text AS request_id, 1 AS attempt, 'acompletion' AS call_type,
    encode(sha256(('key' || (n % $keys))::bytea), 'hex') AS api_key, 0.000125::float8 AS spend,
    30 AS total_tokens, 10 AS prompt_tokens, 20 AS completion_tokens,
    (now() AT TIME ZONE 'UTC')::timestamp(3) AS "startTime",
    (now() AT TIME ZONE 'UTC' + interval '120 ms')::timestamp(3) AS "completionStartTime",
    (now() AT TIME ZONE 'UTC' + interval '800 ms')::timestamp(3) AS "endTime",
    'gpt-4o-mini' AS model, 'dep-1' AS model_id, 'gpt-4o-mini' AS model_group,
    'openai' AS custom_llm_provider, 'http://127.0.0.1:9999/v1' AS api_base, NULL::text AS region,
    NULL::text AS "user", NULL::text AS team_id, 'success' AS status, 200 AS status_code,
    NULL::text AS error_class, NULL::text AS error_message, 800 AS request_duration_ms,
    jsonb_build_object('attempt', 1, 'status', 'success', 'user_api_key',
        encode(sha256(('key' || (n % $keys))::bytea), 'hex')) AS metadata,
    NULL::text AS end_user, 'chatcmpl-' || md5(random()::text) AS response_id,
    'False' AS cache_hit, '' AS cache_key, '{}'::jsonb AS proxy_server_request,
    '{}'::jsonb AS response
FROM generate_series(0, $rows - 1) AS n;
SQL
select="SELECT request_id, request_id AS call_id, attempt, call_type, api_key, spend, total_tokens, prompt_tokens, completion_tokens, \"startTime\", \"completionStartTime\", \"endTime\", model, model_id, model_group, custom_llm_provider, api_base, region, \"user\", team_id, status, status_code, error_class, error_message, request_id AS litellm_call_id, request_duration_ms, metadata, end_user, response_id, cache_hit, cache_key, proxy_server_request, response FROM src"
batches=$((rows / batch))
{
    for ((b = 0; b < batches; b++)); do
        where="WHERE n >= $((b * batch)) AND n < $(((b + 1) * batch)) ORDER BY n"
        echo "\\copy ($select $where) TO '$dir/text-$b' WITH (FORMAT text)"
        echo "\\copy ($select $where) TO '$dir/binary-$b' WITH (FORMAT binary)"
    done
} | psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null
echo "text bytes: $(cat "$dir"/text-* | wc -c), binary bytes: $(cat "$dir"/binary-* | wc -c)"

# One run: the table emptied, then every batch copied in FORMAT $1 by one
# backend; prints its CPU per row in µs.
run() {
    local format=$1
    psql -q "$url" -c 'TRUNCATE "LiteLLM_SpendLogs"' -c 'CHECKPOINT' >/dev/null
    {
        echo 'SELECT pg_backend_pid() AS pid \gset'
        echo '\setenv BACKEND :pid'
        echo "\\! cut -d' ' -f1 /proc/\$BACKEND/schedstat > $dir/start"
        for ((b = 0; b < batches; b++)); do
            echo "\\copy \"LiteLLM_SpendLogs\" ($cols) FROM '$dir/$format-$b' WITH (FORMAT $format)"
        done
        echo "\\! cut -d' ' -f1 /proc/\$BACKEND/schedstat > $dir/end"
    } | psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null
    awk -v s="$(cat "$dir/start")" -v e="$(cat "$dir/end")" -v n="$rows" \
        'BEGIN { printf "%.2f", (e - s) / n / 1000 }'
}

echo "| round | text (µs/row) | binary (µs/row) | binary / text |"
echo "| --- | --- | --- | --- |"
for ((r = 1; r <= rounds; r++)); do
    text=$(run text)
    binary=$(run binary)
    echo "| $r | $text | $binary | $(awk -v a="$text" -v b="$binary" 'BEGIN { printf "%.2f", b / a }') |"
done
