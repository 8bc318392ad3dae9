-- The window's per-commit outcomes and jobs as flaky_tests.sql reads them (views w_outcomes and
-- w_jobs over the files registered as w_outcomes_files and w_jobs_files; its daily stats come
-- from window_stats.sql). A job whose webhooks never came has no platform: its rows are evidence
-- all the same, on the platform 'unknown' (as ci_metrics_daily names it), so every list of
-- platforms holds names only.

-- step: w_outcomes
CREATE OR REPLACE TEMP VIEW w_outcomes AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM w_outcomes_files

-- step: w_jobs
CREATE OR REPLACE TEMP VIEW w_jobs AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM w_jobs_files
