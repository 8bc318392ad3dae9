-- The window's test_daily_stats as flaky_tests.sql reads them: summed per test and platform
-- (w_test_stats) and per configuration (w_config_reruns). Sums, minima and maxima add up, so the
-- days before the window's last (past_tests, past_configs) and the last day (day_tests,
-- day_configs) are summed apart, each with test_sums and config_sums over the view stats, then
-- together (window_stats.py says why). A job whose webhooks never came has no platform: its rows
-- count on the platform 'unknown', as ci_metrics_daily names it, so every list of platforms
-- holds names only.

-- step: stats
CREATE OR REPLACE TEMP VIEW stats AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM stats_files

-- step: test_sums
SELECT file, classname, name, platform,
       sum(runs - skipped)::BIGINT AS runs, sum(failed + errors)::BIGINT AS failures,
       sum(rerun_passed)::BIGINT AS rerun_passes, sum(rerun_failed)::BIGINT AS rerun_failures,
       sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen
FROM stats GROUP BY ALL

-- step: config_sums
SELECT build_env, test_config, sum(rerun_count)::BIGINT AS rerun_count FROM stats GROUP BY ALL

-- step: w_test_stats
CREATE OR REPLACE TEMP TABLE w_test_stats AS
SELECT file, classname, name, platform,
       sum(runs)::BIGINT AS runs, sum(failures)::BIGINT AS failures,
       sum(rerun_passes)::BIGINT AS rerun_passes, sum(rerun_failures)::BIGINT AS rerun_failures,
       sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen
FROM (FROM past_tests UNION ALL BY NAME FROM day_tests) GROUP BY ALL

-- step: w_config_reruns
CREATE OR REPLACE TEMP TABLE w_config_reruns AS
SELECT build_env, test_config, sum(rerun_count)::BIGINT AS rerun_count
FROM (FROM past_configs UNION ALL BY NAME FROM day_configs) GROUP BY ALL
