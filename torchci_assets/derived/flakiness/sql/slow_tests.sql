-- Tests whose mean time over clean passes on main exceeds $slow_seconds, per configuration,
-- slowest first (view s over the window's test_daily_stats).
SELECT classname, name, build_env, test_config, sum(pass_time) / sum(clean_passes) AS seconds,
       sum(clean_passes)::BIGINT AS clean_passes
FROM s WHERE branch_class = 'main' AND clean_passes > 0
GROUP BY ALL HAVING seconds > $slow_seconds
ORDER BY seconds DESC, build_env, test_config, classname, name
