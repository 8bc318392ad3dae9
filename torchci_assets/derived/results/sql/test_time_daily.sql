-- test_time_daily, from the day's test_results.
-- Test time per invoking file (classname NULL) and per class, PyTorch's way: per workflow run
-- the sum of the file's test times across the shards that ran it, over main-branch runs, the
-- shards joined as run_times.sql says (each at its latest clean attempt).
-- A run whose config has reports from all its shards today, each clean at some attempt (the usual
-- case), is summed here: `runs` counts those runs, `time` sums their times (workflow_id NULL). Any
-- other run (it straddles midnight, or a shard failed and may be re-run tomorrow) keeps one row
-- per shard and attempt (workflow_id, shard, num_shards, attempt, clean; runs 0) for the window
-- to join with its other days through the same run_times (sharding/sql/window_times.sql). Either
-- way a window's average is sum(time) / sum(runs) once those rows are joined by run.
WITH r AS (
    SELECT workflow_id, workflow_run_attempt AS attempt, build_env, coalesce(test_config, '') AS test_config,
           coalesce(shard, 1) AS shard, coalesce(num_shards, 1) AS num_shards, invoking_file, classname, time,
           job_conclusion = 'success' AND NOT infra_suspect AS clean
    FROM test_results
    WHERE branch_class = 'main' AND build_env IS NOT NULL AND file <> ''
),
shard_attempts AS (  -- one job each
    SELECT workflow_id, build_env, test_config, shard, num_shards, attempt, bool_and(clean) AS clean
    FROM r GROUP BY ALL
),
per_shard_attempt AS (
    SELECT workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file AS file, classname,
           sum(time) AS time
    FROM r
    GROUP BY GROUPING SETS ((workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file),
                            (workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file, classname))
),
shard_rows AS (
    SELECT p.*, s.clean
    FROM per_shard_attempt p JOIN shard_attempts s USING (workflow_id, build_env, test_config, shard, num_shards, attempt)
),
runs AS (SELECT * FROM run_times('shard_rows')),
summed AS (  -- the runs complete today
    SELECT DISTINCT workflow_id, build_env, test_config FROM runs WHERE all_clean
)
SELECT build_env, test_config, file, classname, count(*) AS runs, sum(time) AS time,
       NULL::BIGINT AS workflow_id, NULL::INTEGER AS shard, NULL::INTEGER AS num_shards,
       NULL::BIGINT AS attempt, NULL::BOOLEAN AS clean
FROM runs WHERE all_clean AND counts
GROUP BY build_env, test_config, file, classname
UNION ALL
SELECT build_env, test_config, file, classname, 0, time, workflow_id, shard, num_shards, attempt, clean
FROM shard_rows ANTI JOIN summed USING (workflow_id, build_env, test_config)
ORDER BY build_env, test_config, file, classname NULLS FIRST, workflow_id NULLS FIRST, shard, attempt
