-- test_time_daily, from the day's test_results.
-- Test time per invoking file (classname NULL) and per class, PyTorch's way: per workflow run
-- attempt the sum of the file's test times across the shards that ran it, over main-branch
-- runs where every job that ran the file succeeded and none is an infra suspect. `runs`
-- counts those run attempts, so a window's average is sum(time) / sum(runs).
WITH r AS (
    SELECT workflow_id, workflow_run_attempt, build_env, coalesce(test_config, '') AS test_config,
           invoking_file, classname, time, job_conclusion, infra_suspect, head_sha, job_completed_at
    FROM test_results
    WHERE branch_class = 'main' AND build_env IS NOT NULL AND file <> ''
),
good AS (
    SELECT workflow_id, workflow_run_attempt, build_env, test_config, invoking_file
    FROM r GROUP BY ALL
    HAVING bool_and(job_conclusion = 'success' AND NOT infra_suspect)
),
per_run AS (
    SELECT build_env, test_config, invoking_file, classname, workflow_id, workflow_run_attempt,
           sum(time) AS time
    FROM r JOIN good USING (workflow_id, workflow_run_attempt, build_env, test_config, invoking_file)
    GROUP BY GROUPING SETS ((build_env, test_config, invoking_file, workflow_id, workflow_run_attempt),
                            (build_env, test_config, invoking_file, classname, workflow_id, workflow_run_attempt))
)
SELECT build_env, test_config, invoking_file AS file, classname, count(*) AS runs, sum(time) AS time
FROM per_run
GROUP BY ALL
ORDER BY build_env, test_config, file, classname NULLS FIRST
