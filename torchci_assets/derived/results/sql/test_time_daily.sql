-- test_time_daily, from the day's test_results.
-- Test time per invoking file (classname NULL) and per class, PyTorch's way: per workflow run
-- the sum of the file's test times across the shards that ran it, over main-branch runs.
-- Each shard counts at its latest clean attempt (its job succeeded, no infra suspect): a
-- "re-run failed jobs" attempt holds only the shard re-run, the others stay at their first. A
-- file counts in a run when every shard that ran it has such an attempt.
-- A run whose config has reports from all its shards today, each clean at some attempt (the usual
-- case), is summed here: `runs` counts those runs, `time` sums their times (workflow_id NULL). Any
-- other run (it straddles midnight, or a shard failed and may be re-run tomorrow) keeps one row
-- per shard and attempt (workflow_id, shard, num_shards, attempt, clean; runs 0) for the window
-- to join with its other days (sharding/sql/window_times.sql). Either way a window's average is
-- sum(time) / sum(runs) once those rows are joined by run.
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
complete AS (  -- runs with reports from every shard of the config today, each shard clean at some attempt
    SELECT workflow_id, build_env, test_config
    FROM shard_attempts GROUP BY ALL
    HAVING count(DISTINCT shard) = max(num_shards) AND min(shard) = 1 AND max(shard) = max(num_shards)
       AND count(DISTINCT shard) FILTER (WHERE clean) = max(num_shards)
),
per_shard_attempt AS (
    SELECT workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file, classname,
           sum(time) AS time
    FROM r
    GROUP BY GROUPING SETS ((workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file),
                            (workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file, classname))
),
rows AS (
    SELECT p.*, s.clean, c.workflow_id IS NOT NULL AS complete
    FROM per_shard_attempt p JOIN shard_attempts s USING (workflow_id, build_env, test_config, shard, num_shards, attempt)
    LEFT JOIN complete c USING (workflow_id, build_env, test_config)
),
chosen AS (  -- per shard of a complete run, its latest clean attempt
    SELECT workflow_id, build_env, test_config, shard, max(attempt) FILTER (WHERE clean) AS attempt
    FROM rows WHERE complete GROUP BY ALL
),
per_run AS (
    SELECT build_env, test_config, invoking_file, classname, workflow_id,
           sum(time) FILTER (WHERE rows.attempt = chosen.attempt) AS time,
           bool_and(chosen.attempt IS NOT NULL) AS counts
    FROM rows JOIN chosen USING (workflow_id, build_env, test_config, shard)
    GROUP BY ALL
)
SELECT build_env, test_config, invoking_file AS file, classname, count(*) AS runs, sum(time) AS time,
       NULL::BIGINT AS workflow_id, NULL::INTEGER AS shard, NULL::INTEGER AS num_shards,
       NULL::BIGINT AS attempt, NULL::BOOLEAN AS clean
FROM per_run WHERE counts AND time IS NOT NULL
GROUP BY ALL
UNION ALL
SELECT build_env, test_config, invoking_file, classname, 0, time, workflow_id, shard, num_shards, attempt, clean
FROM rows WHERE NOT complete
ORDER BY build_env, test_config, file, classname NULLS FIRST, workflow_id NULLS FIRST, shard, attempt
