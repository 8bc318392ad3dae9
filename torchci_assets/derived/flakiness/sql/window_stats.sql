-- The window's test_daily_stats as flaky_tests.sql reads them: summed per test and platform
-- (w_test_stats) and per configuration (w_config_reruns), from the view stats over the days it
-- covers (test_sums, config_sums). When it covers the whole window, that is all (whole_*); when a
-- refresh kept the sums of the days before the window's last (views past_tests and past_configs,
-- see window_stats.py), stats covers the last day, and since sums, minima and maxima add up, the
-- two are added (added_*). Runs, failures and rerun passes on main are also counted apart
-- (main_runs, main_failures, main_rerun_passes): only main-branch flakiness disables a test
-- (flaky_tests.sql), and its DISABLED issue reports main's evidence. A job whose webhooks never came has no
-- platform: its rows count on the platform 'unknown', as ci_metrics_daily names it, so every list
-- of platforms holds names only.

-- step: stats
CREATE OR REPLACE TEMP VIEW stats AS
SELECT * REPLACE (coalesce(platform, 'unknown') AS platform) FROM stats_files

-- step: test_sums
CREATE OR REPLACE TEMP VIEW test_sums AS
SELECT file, classname, name, platform,
       sum(runs - skipped)::BIGINT AS runs, sum(failed + errors)::BIGINT AS failures,
       sum(rerun_passed)::BIGINT AS rerun_passes, sum(rerun_failed)::BIGINT AS rerun_failures,
       coalesce(sum(rerun_passed) FILTER (WHERE branch_class = 'main'), 0)::BIGINT AS main_rerun_passes,
       coalesce(sum(runs - skipped) FILTER (WHERE branch_class = 'main'), 0)::BIGINT AS main_runs,
       coalesce(sum(failed + errors) FILTER (WHERE branch_class = 'main'), 0)::BIGINT AS main_failures,
       sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen
FROM stats GROUP BY ALL

-- step: config_sums
CREATE OR REPLACE TEMP VIEW config_sums AS
SELECT build_env, test_config, sum(rerun_count)::BIGINT AS rerun_count FROM stats GROUP BY ALL

-- step: kept_tests
FROM test_sums

-- step: kept_configs
FROM config_sums

-- step: whole_tests
CREATE OR REPLACE TEMP TABLE w_test_stats AS FROM test_sums

-- step: whole_configs
CREATE OR REPLACE TEMP TABLE w_config_reruns AS FROM config_sums

-- step: added_tests
CREATE OR REPLACE TEMP TABLE w_test_stats AS
SELECT file, classname, name, platform,
       sum(runs)::BIGINT AS runs, sum(failures)::BIGINT AS failures,
       sum(rerun_passes)::BIGINT AS rerun_passes, sum(rerun_failures)::BIGINT AS rerun_failures,
       sum(main_rerun_passes)::BIGINT AS main_rerun_passes,
       sum(main_runs)::BIGINT AS main_runs, sum(main_failures)::BIGINT AS main_failures,
       sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen
FROM (FROM past_tests UNION ALL BY NAME FROM test_sums) GROUP BY ALL

-- step: added_configs
CREATE OR REPLACE TEMP TABLE w_config_reruns AS
SELECT build_env, test_config, sum(rerun_count)::BIGINT AS rerun_count
FROM (FROM past_configs UNION ALL BY NAME FROM config_sums) GROUP BY ALL
