-- Per build_env, test_config, file and class (NULL: the whole file), the mean time of a successful
-- main-branch run over the window (view daily over test_time_daily), leaving out PyTorch's
-- "default" averages ($default), which are computed, not read.
-- Runs summed on their day (runs > 0; all of an older partition's rows) are added to the runs
-- whose shards landed on different days (workflow_id set), joined here across the window the
-- way test_time_daily.sql joins a day's: each shard at its latest clean attempt, a run counted
-- once all its shards are in the window and every shard that ran the file has such an attempt.
WITH split AS (
    SELECT * FROM daily WHERE workflow_id IS NOT NULL AND build_env <> $default
),
complete AS (
    SELECT workflow_id, build_env, test_config
    FROM split GROUP BY ALL
    HAVING count(DISTINCT shard) = max(num_shards) AND min(shard) = 1 AND max(shard) = max(num_shards)
),
chosen AS (
    SELECT workflow_id, build_env, test_config, shard, max(attempt) FILTER (WHERE clean) AS attempt
    FROM split JOIN complete USING (workflow_id, build_env, test_config) GROUP BY ALL
),
joined AS (
    SELECT build_env, test_config, file, classname, count(*) AS runs, sum(time) AS time
    FROM (SELECT build_env, test_config, file, classname, workflow_id,
                 sum(time) FILTER (WHERE split.attempt = chosen.attempt) AS time,
                 bool_and(chosen.attempt IS NOT NULL) AS counts
          FROM split JOIN chosen USING (workflow_id, build_env, test_config, shard)
          GROUP BY ALL)
    WHERE counts AND time IS NOT NULL
    GROUP BY ALL
),
summed AS (
    SELECT build_env, test_config, file, classname, runs, time FROM daily
    WHERE runs > 0 AND build_env <> $default AND workflow_id IS NULL
    UNION ALL
    SELECT * FROM joined
)
SELECT build_env, test_config, file, classname, sum(time) / sum(runs) AS time, sum(runs)::BIGINT AS runs
FROM summed
GROUP BY ALL ORDER BY build_env, test_config, file, classname NULLS FIRST
