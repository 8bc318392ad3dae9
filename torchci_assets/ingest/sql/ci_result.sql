-- ci_result and ci_callback_minutes from a day's callbacks: this run's, staged in a local file
-- ({{files}}), and the earlier increments' (view earlier_stage, the partition's _stage*.pq files);
-- see ci_results.py. Uses the macros of callback_macros.sql.
-- Parameters: $as_of_ms, $lost_after_ms, $success_conclusions.

-- step: staged
CREATE OR REPLACE TEMP VIEW new_stage AS SELECT * FROM read_parquet([{{files}}])

-- step: no_earlier
-- a rebuild, or the day's first increment: no callbacks staged earlier
CREATE OR REPLACE TEMP VIEW earlier_stage AS SELECT * FROM new_stage LIMIT 0

-- step: stage
-- every callback of the day, a view: the reduction reads the staged files where they lie rather
-- than a copy of the day (DuckDB's sorts and windows hold their input in memory, past its limit
-- they fail). archive_path and archive_line are the archive order, the reduction's last
-- tie-break: one read of the whole day's order, whatever increment read each callback.
-- {{columns}} are the staging columns (the lake's view of earlier_stage adds its day).
CREATE OR REPLACE TEMP VIEW stage AS
WITH callbacks AS (
    SELECT {{columns}} FROM new_stage
    UNION ALL
    SELECT {{columns}} FROM earlier_stage
)
SELECT *, coalesce(received_at, completed_at, started_at) AS callback_at,
       callback_state_rank(status) AS state_rank,
       regexp_replace(location, ':[0-9]+$', '') AS archive_path,
       CAST(regexp_extract(location, ':([0-9]+)$', 1) AS BIGINT) AS archive_line
FROM callbacks

-- step: jobs
-- one row per job (delivery, repo, run, attempt, job name): its furthest, then latest callback;
-- {{columns}} are ci_result's columns but the two computed here
WITH ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name
            ORDER BY state_rank DESC, callback_at DESC NULLS LAST, archive_path DESC, archive_line DESC) AS rn,
        count(*) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS n_callbacks,
        -- fields a later callback leaves out are taken from the job's earlier ones
        min(started_at) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS any_started_at,
        max(queue_s) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS any_queue_s,
        max(head_sha) OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name) AS any_head_sha
    FROM stage
), winners AS (
    SELECT * REPLACE (merged_started_at(any_started_at, execution_s, completed_at) AS started_at,
                      coalesce(queue_s, any_queue_s) AS queue_s,
                      coalesce(head_sha, any_head_sha) AS head_sha)
    FROM ranked WHERE rn = 1
)
SELECT {{columns}},
       n_callbacks AS callbacks,
       failure_kind(status, conclusion, started_at, completed_at, callback_at, passed, failed, skipped,
                    $as_of_ms, $lost_after_ms, $success_conclusions) AS failure_kind
FROM winners ORDER BY repo, delivery_id, run_id, run_attempt, job_name

-- step: minutes
SELECT repo, date_trunc('minute', callback_at) AS minute, count(*) AS callbacks
FROM stage WHERE callback_at IS NOT NULL GROUP BY ALL ORDER BY repo, minute
