-- The answer's id (`response_id`, migration 0010) indexed by hash instead
-- of by B-tree. Those ids are the upstream's (`chatcmpl-<random>`), so a
-- B-tree took each new row's entry on a random leaf page: at a million
-- rows it cost the spend writer 6 to 9 µs of Postgres CPU a row, the most
-- of any index of the log, where the hash index costs about 3 and leaves
-- rows without an id (failed attempts, embeddings) out altogether
-- (benches/hand-measured.md, "The spend log's Postgres CPU per row").
-- The index serves one lookup, `/spend/logs?request_id=<answer id>` (and
-- the console's Logs page by request id), an equality a hash index
-- answers as well. The gateway's own index: LiteLLM has no such column.
-- A plain CREATE INDEX holds off spend-log inserts while it builds (under
-- a minute at 10 million rows on a busy 2-core machine); the spend writer
-- keeps its rows queued meanwhile.
DROP INDEX IF EXISTS gateway_spendlogs_response_id_idx;
CREATE INDEX IF NOT EXISTS gateway_spendlogs_response_id_hash_idx
    ON "LiteLLM_SpendLogs" USING hash (response_id);
