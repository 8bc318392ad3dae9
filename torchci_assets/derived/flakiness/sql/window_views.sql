-- The window's aggregates as flaky_tests.sql reads them (views w_stats, w_outcomes, w_jobs over
-- the files registered as w_stats_files, w_outcomes_files, w_jobs_files). A job whose webhooks
-- never came has no platform: its rows are evidence all the same, on the platform 'unknown'
-- (as ci_metrics_daily names it), so every list of platforms holds names only.

-- step: w_stats
CREATE OR REPLACE TEMP VIEW w_stats AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM w_stats_files

-- step: w_outcomes
CREATE OR REPLACE TEMP VIEW w_outcomes AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM w_outcomes_files

-- step: w_jobs
CREATE OR REPLACE TEMP VIEW w_jobs AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM w_jobs_files
