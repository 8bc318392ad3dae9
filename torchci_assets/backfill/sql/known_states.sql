-- What the lake knows that makes a stale job a certain gap, for sql/stale_jobs.sql.
-- completed_runs: the run attempts heard completing (a webhook, or a repair's `rest` record): a job
-- of such an attempt that is not completed had its completion lost.
-- shown_jobs: the job states GitHub has shown a repair (or `torchci backfill`), from their `rest`
-- records in view `deliveries` (`rest-workflow_job-<id>-<attempt>-<state>`): a job the lake has in
-- a state GitHub never showed may have moved on since it was last heard of.

-- step: completed_runs
CREATE OR REPLACE TEMP TABLE completed_runs AS
SELECT DISTINCT id AS run_id, run_attempt FROM workflow_run WHERE status = 'completed'

-- step: no_runs
-- (no workflow_run in the window: no attempt was heard completing)
CREATE OR REPLACE TEMP TABLE completed_runs (run_id BIGINT, run_attempt BIGINT)

-- step: shown_jobs
CREATE OR REPLACE TEMP TABLE shown_jobs AS
SELECT DISTINCT TRY_CAST(string_split(delivery_id, '-')[3] AS BIGINT) AS id,
                TRY_CAST(string_split(delivery_id, '-')[4] AS BIGINT) AS run_attempt,
                string_split(delivery_id, '-')[5] AS status
FROM deliveries
WHERE event = 'workflow_job' AND delivery_id LIKE 'rest-workflow_job-%'

-- step: none_shown
-- (no webhook_events in the window: GitHub has shown no job)
CREATE OR REPLACE TEMP TABLE shown_jobs (id BIGINT, run_attempt BIGINT, status VARCHAR)
