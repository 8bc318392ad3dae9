-- How the HUD judges a downstream job (downstream.py): every page and table that shows one (the backend
-- pages, pr_jobs, ci_metrics_daily) uses these, so a job is never timed out on one and running on another.

-- step: downstream_timed_out
-- A job that never completed is shown as the relay's sweeper reports it (cleanup_handler.py): timed out
-- once zombie_timeout_s (the config's zombie_timeout_seconds) passed since its first callback reached the
-- receiver, as of as_of_ms. A `completed` callback that arrives later wins: the job has its real result.
CREATE OR REPLACE TEMP MACRO downstream_timed_out(status, first_callback_at, as_of_ms, zombie_timeout_s) AS
    coalesce(status <> 'completed' AND epoch_ms(first_callback_at) + zombie_timeout_s * 1000 <= as_of_ms, false)

-- step: downstream_kind
-- The job's failure kind: a timed-out job is an infrastructure failure, one still running is pending
-- (whatever the ingest judged when it wrote the row, at its own instant), a completed one keeps the kind
-- the ingest gave it (ingest/ci_results.py).
CREATE OR REPLACE TEMP MACRO downstream_kind(status, failure_kind, timed_out) AS
    CASE WHEN timed_out THEN 'infrastructure'
         WHEN coalesce(status, '') <> 'completed' THEN 'pending'
         ELSE failure_kind END
