-- What the lake knows that makes a stale job a certain gap, for sql/stale_jobs.sql, and when a
-- gap GitHub showed unchanged is asked about again (backoff_due, sql/jobless_runs.sql too).
-- completed_runs: the run attempts heard completing (a webhook, or a repair's `rest` record): a job
-- of such an attempt that is not completed had its completion lost.
-- shown_jobs: the job states GitHub has shown a repair (or `torchci backfill`), from their `rest`
-- records in view `deliveries` (`rest-workflow_job-<id>-<attempt>-<state>`): a job the lake has in
-- a state GitHub never showed may have moved on since it was last heard of.
-- backoff_due: whether a pass asks again about what GitHub showed unchanged, `age` seconds (to the
-- pass's tick) after it was last heard of: at the first pass past the limit, then at the pass whose
-- `every_s` seconds hold the moment the age reaches the limit times a power of `growth`.

-- step: backoff_due
CREATE OR REPLACE TEMP MACRO backoff_due(age, every_s, limit_s, growth) AS
    CASE WHEN age - every_s < limit_s THEN true
         ELSE floor(ln(age / limit_s) / ln(growth)) > floor(ln((age - every_s) / limit_s) / ln(growth))
    END

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
