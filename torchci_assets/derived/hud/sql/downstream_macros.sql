-- How the HUD judges a downstream job (downstream.py): every page and table that shows one (the backend
-- pages, pr_jobs, ci_metrics_daily) uses these, and downstream_timed_out (ingest/sql/callback_macros.sql,
-- as backend_health does), so a job is never timed out on one and running on another.

-- step: downstream_kind
-- The job's failure kind: a timed-out job is an infrastructure failure, one still running is pending
-- (whatever the ingest judged when it wrote the row, at its own instant), a completed one keeps the kind
-- the ingest gave it (ingest/ci_results.py).
CREATE OR REPLACE TEMP MACRO downstream_kind(status, failure_kind, timed_out) AS
    CASE WHEN timed_out THEN 'infrastructure'
         WHEN coalesce(status, '') <> 'completed' THEN 'pending'
         ELSE failure_kind END
