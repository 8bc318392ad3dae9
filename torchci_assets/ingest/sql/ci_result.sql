-- ci_result and ci_callback_minutes from a day's callbacks: this run's, staged in a local file
-- ({{files}}), and the earlier increments' (view earlier_stage, the partition's _stage*.pq files);
-- see ci_results.py. Uses the macros of callback_macros.sql.
-- Parameters: $as_of_ms, $lost_after_ms, $success_conclusions.

-- step: staged
CREATE OR REPLACE TEMP VIEW new_stage AS SELECT * FROM read_parquet([{{files}}])

-- step: callbacks
-- every callback of the day: this run's and the earlier increments' (view earlier_stage).
-- {{columns}} are the staging columns (the lake's view of earlier_stage adds its day).
CREATE OR REPLACE TEMP VIEW callbacks AS
SELECT {{columns}} FROM new_stage
UNION ALL
SELECT {{columns}} FROM earlier_stage

-- step: callbacks_without_earlier
-- a rebuild, or the day's first increment: no callbacks staged earlier, so no second read of
-- the staged files for every reference to the view below (DuckDB binds a file list again each time)
CREATE OR REPLACE TEMP VIEW callbacks AS SELECT {{columns}} FROM new_stage

-- step: stage
-- every callback of the day, a view: the reduction reads the staged files where they lie rather
-- than a copy of the day (DuckDB's sorts and windows hold their input in memory, past its limit
-- they fail). archive_path and archive_line are the archive order, the reduction's last
-- tie-break: one read of the whole day's order, whatever increment read each callback.
CREATE OR REPLACE TEMP VIEW stage AS
SELECT *, coalesce(received_at, completed_at, started_at) AS callback_at,
       callback_state_rank(status) AS state_rank,
       regexp_replace(location, ':[0-9]+$', '') AS archive_path,
       CAST(regexp_extract(location, ':([0-9]+)$', 1) AS BIGINT) AS archive_line
FROM callbacks

-- step: files
-- the day's archive files in archive order: a callback's place in that order as two numbers, so
-- that choosing a job's callback compares no text
CREATE OR REPLACE TEMP TABLE stage_files AS
SELECT archive_path, row_number() OVER (ORDER BY archive_path NULLS FIRST) AS file_rank
FROM (SELECT DISTINCT archive_path FROM stage)

-- step: keyed
-- every callback with its precedence among its job's callbacks, in fixed-width columns: the
-- furthest state, then the latest callback (an undated one last), then the last in archive order
-- (file_rank, archive_line: also where the callback lies, one callback each)
CREATE OR REPLACE TEMP VIEW keyed AS
SELECT s.*,
       {'state_rank': s.state_rank, 'dated': s.callback_at IS NOT NULL,
        'callback_ms': coalesce(epoch_ms(s.callback_at), 0), 'file_rank': f.file_rank,
        'archive_line': coalesce(s.archive_line, -1)} AS precedence
FROM stage s JOIN stage_files f ON s.archive_path IS NOT DISTINCT FROM f.archive_path

-- step: jobs
-- one row per job (delivery, repo, run, attempt, job name): its furthest, then latest callback.
-- A job's five key columns may hold 4,096 characters each, and grouping by them would hold every
-- job's texts at once (DuckDB spills long strings poorly): jobs are grouped by a fixed-width digest
-- of their key instead (SHA-256 of the key as JSON, which keeps every field apart and names a
-- NULL), the callback kept is chosen by `precedence`, then only the rows of the callbacks kept are
-- read back in full, by where they lie. The rows come out unordered (ci_results.py sorts them).
-- {{columns}} are ci_result's columns but the two computed here.
WITH digested AS (
    SELECT *, sha256(to_json({'repo': repo, 'delivery_id': delivery_id, 'run_id': run_id,
                              'run_attempt': run_attempt, 'job_name': job_name})) AS digest
    FROM keyed
), jobs AS (
    SELECT * EXCLUDE (digest), CAST('0x' || left(digest, 32) AS UHUGEINT) AS job_hi,
           CAST('0x' || right(digest, 32) AS UHUGEINT) AS job_lo
    FROM digested
), winners AS MATERIALIZED (
    SELECT job_hi, job_lo, max(precedence) AS precedence, count(*) AS n_callbacks,
           -- fields a later callback leaves out are taken from the job's earlier ones
           min(started_at) AS any_started_at, max(queue_s) AS any_queue_s,
           arg_max(head_sha IS NULL, precedence) AND count(head_sha) > 0 AS wants_head_sha
    FROM jobs GROUP BY job_hi, job_lo
), head_shas AS (
    -- the greatest head sha of each job whose kept callback has none but another callback has
    SELECT w.precedence, max(j.head_sha) AS any_head_sha
    FROM jobs j JOIN winners w ON j.job_hi = w.job_hi AND j.job_lo = w.job_lo AND w.wants_head_sha
    GROUP BY w.precedence
), kept AS (
    SELECT k.* REPLACE (merged_started_at(w.any_started_at, k.execution_s, k.completed_at) AS started_at,
                        coalesce(k.queue_s, w.any_queue_s) AS queue_s,
                        coalesce(k.head_sha, h.any_head_sha) AS head_sha),
           w.n_callbacks
    FROM keyed k
    JOIN winners w ON k.precedence.file_rank = w.precedence.file_rank
                  AND k.precedence.archive_line = w.precedence.archive_line
    LEFT JOIN head_shas h ON h.precedence = w.precedence
)
SELECT {{columns}},
       n_callbacks AS callbacks,
       failure_kind(status, conclusion, started_at, completed_at, callback_at, passed, failed, skipped,
                    $as_of_ms, $lost_after_ms, $success_conclusions) AS failure_kind
FROM kept

-- step: minutes
SELECT repo, date_trunc('minute', callback_at) AS minute, count(*) AS callbacks
FROM stage WHERE callback_at IS NOT NULL GROUP BY ALL ORDER BY repo, minute
