-- Per build_env, test_config, file and class (NULL: the whole file), the mean time of a successful
-- main-branch run over the window (view daily over test_time_daily), leaving out PyTorch's
-- "default" averages ($default), which are computed, not read.
SELECT build_env, test_config, file, classname, sum(time) / sum(runs) AS time, sum(runs)::BIGINT AS runs
FROM daily WHERE runs > 0 AND build_env <> $default
GROUP BY ALL ORDER BY build_env, test_config, file, classname NULLS FIRST
