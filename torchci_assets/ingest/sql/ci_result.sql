-- ci_result and ci_callback_minutes from a day's callbacks (stage_arrow); see ci_results.py.
-- Uses the macros of callback_macros.sql. Parameters: $as_of_ms, $lost_after_ms, $success_conclusions.

-- step: stage
CREATE TEMP TABLE stage AS
SELECT *, coalesce(received_at, completed_at, started_at) AS callback_at,
       callback_state_rank(status) AS state_rank
FROM stage_arrow

-- step: jobs
-- one row per job (delivery, repo, run, attempt, job name): its furthest, then latest callback;
-- {{columns}} are ci_result's columns but the two computed here
WITH ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY delivery_id, repo, run_id, run_attempt, job_name
            ORDER BY state_rank DESC, callback_at DESC NULLS LAST, seq DESC) AS rn,
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
