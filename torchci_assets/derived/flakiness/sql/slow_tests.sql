-- Tests whose mean time over clean passes on main exceeds $slow_seconds (view s over the
-- window's test_daily_stats), PyTorch's way: pytorch/pytorch's tools/testing/update_slow_tests.py
-- (test-infra's slow_tests query before it) takes one mean over every configuration, by test id
-- (name and the classname's last part, as PyTorch's "test_x (__main__.TestY)"), of the jobs of the
-- latest viable/strict commits, leaving out
--   - the workflow named `periodic` (`w.name != 'periodic'`): test_daily_stats counts its clean
--     passes apart (periodic_clean_passes, periodic_pass_time), subtracted here. Only that
--     workflow: `slow`, `inductor-periodic` and the rest count;
--   - jobs whose name matches $excluded_jobs (`j.name NOT LIKE '%asan%'`: ASAN is several times
--     slower, and not where slow tests are run), here over build_env and test_config.
-- Not the slowest configuration: a test slow in one configuration only would then be skipped by
-- every other. build_env and test_config say where the test is slowest, for whoever looks into it.
-- A window partition written before the periodic counters existed reads them as NULL: nothing
-- subtracted, as then.

-- step: measured
-- whether the window measured anything the list counts: a clean pass on main outside periodic
SELECT count(*) FROM s
WHERE branch_class = 'main' AND clean_passes - coalesce(periodic_clean_passes, 0) > 0

-- step: slow_tests
WITH counted AS (
    SELECT regexp_extract(classname, '[^.]*$') AS classname, name, build_env, test_config,
           pass_time - coalesce(periodic_pass_time, 0) AS pass_time,
           clean_passes - coalesce(periodic_clean_passes, 0) AS clean_passes
    FROM s
    WHERE branch_class = 'main'
      AND NOT (coalesce(build_env, '') LIKE $excluded_jobs OR coalesce(test_config, '') LIKE $excluded_jobs)
),
per_config AS (
    SELECT classname, name, build_env, test_config, seconds_sum(pass_time) AS pass_time,
           sum(clean_passes) AS clean_passes
    FROM counted WHERE clean_passes > 0
    GROUP BY ALL
)
SELECT classname, name, seconds_sum(pass_time) / sum(clean_passes) AS seconds,
       sum(clean_passes)::BIGINT AS clean_passes,
       arg_max(build_env, (pass_time / clean_passes, build_env, test_config)) AS build_env,
       arg_max(test_config, (pass_time / clean_passes, build_env, test_config)) AS test_config
FROM per_config
GROUP BY classname, name HAVING seconds > $slow_seconds
ORDER BY seconds DESC, classname, name
