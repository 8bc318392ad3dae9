-- The downstream jobs of the backend pages, from the view backend_ci (ci_result's rows of the window).

-- step: judged
-- One row per job (delivery, repo, run, attempt, job name): its furthest, then latest callback. A job
-- that never completed is shown as the relay's sweeper reports it to the HUD: completed, `timed_out`,
-- by downstream_timed_out (ingest's callback_macros.sql, as pr_jobs, ci_metrics_daily and backend_health
-- judge it) as of $as_of_ms. A `completed` callback that arrives later wins: the job then has its real conclusion.
CREATE OR REPLACE TEMP TABLE backend_judged AS
WITH rows AS (
    SELECT lower(repo) AS repo, level, event_type, delivery_id, head_sha, workflow_name, job_name, run_id,
           run_attempt, status, conclusion, queue_s, execution_s, started_at, callback_at, failure_kind, failed, day,
           callback_state_rank(status) AS state_rank
    FROM backend_ci
    WHERE level IN ('L2', 'L3', 'L4')
),
merged AS (
    SELECT *,
           row_number() OVER (PARTITION BY repo, delivery_id, run_id, run_attempt, job_name
                              ORDER BY state_rank DESC, callback_at DESC NULLS LAST, day DESC) AS rn,
           min(callback_at) OVER (PARTITION BY repo, delivery_id, run_id, run_attempt, job_name)
               AS first_callback_at,
           min(started_at) OVER (PARTITION BY repo, delivery_id, run_id, run_attempt, job_name) AS any_started_at,
           max(queue_s) OVER (PARTITION BY repo, delivery_id, run_id, run_attempt, job_name) AS any_queue_s
    FROM rows
),
timed AS (
    SELECT *, downstream_timed_out(status, first_callback_at, any_started_at, $as_of_ms, $zombie_timeout_s)
               AS timed_out
    FROM merged WHERE rn = 1
)
SELECT repo, level, event_type, head_sha, workflow_name, job_name, run_id, run_attempt,
       CASE WHEN timed_out THEN 'completed' ELSE status END AS status,
       CASE WHEN timed_out THEN 'timed_out' ELSE conclusion END AS conclusion,
       coalesce(queue_s, any_queue_s) AS queue_s,
       CASE WHEN timed_out THEN CAST($zombie_timeout_s AS DOUBLE) ELSE execution_s END AS execution_s,
       callback_at,
       downstream_kind(status, failure_kind, timed_out) AS failure_kind, failed,
       timed_out, day
FROM timed

-- step: latest
-- The latest attempt of each downstream job on each upstream head (L2 and above: L1 cannot report),
-- with how many attempts it had. Self-reports ($self_report_events) are not about a head we dispatched.
SELECT * EXCLUDE (rn) FROM (
    SELECT repo, level, event_type, head_sha, workflow_name, job_name, run_id, run_attempt,
           status, conclusion, queue_s, execution_s, callback_at, failure_kind, failed, timed_out,
           count(DISTINCT run_attempt) OVER (PARTITION BY repo, head_sha, workflow_name, job_name) AS attempts,
           row_number() OVER (PARTITION BY repo, head_sha, workflow_name, job_name
                              ORDER BY run_attempt DESC, callback_at DESC NULLS LAST, day DESC) AS rn
    FROM backend_judged
    WHERE head_sha IS NOT NULL AND NOT list_contains($self_report_events, coalesce(event_type, ''))
)
WHERE rn = 1
ORDER BY repo, head_sha, workflow_name, job_name
