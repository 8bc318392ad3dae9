-- Tests whose mean time over clean passes on main exceeds $slow_seconds (view s over the
-- window's test_daily_stats), PyTorch's way (test-infra's slow_tests query, the last it published
-- from): one mean over every configuration, by test id (name and the classname's last part, as
-- PyTorch's "test_x (__main__.TestY)"), leaving out jobs whose name matches $excluded_jobs (ASAN:
-- several times slower, and not where slow tests are run). Not the slowest configuration: a
-- test slow in one configuration only would then be skipped by every other.
-- build_env and test_config say where the test is slowest, for whoever looks into it.
WITH per_config AS (
    SELECT regexp_extract(classname, '[^.]*$') AS classname, name, build_env, test_config,
           sum(pass_time) AS pass_time, sum(clean_passes) AS clean_passes
    FROM s
    WHERE branch_class = 'main' AND clean_passes > 0
      AND NOT (coalesce(build_env, '') LIKE $excluded_jobs OR coalesce(test_config, '') LIKE $excluded_jobs)
    GROUP BY ALL
)
SELECT classname, name, sum(pass_time) / sum(clean_passes) AS seconds, sum(clean_passes)::BIGINT AS clean_passes,
       arg_max(build_env, (pass_time / clean_passes, build_env, test_config)) AS build_env,
       arg_max(test_config, (pass_time / clean_passes, build_env, test_config)) AS test_config
FROM per_config
GROUP BY classname, name HAVING seconds > $slow_seconds
ORDER BY seconds DESC, classname, name
