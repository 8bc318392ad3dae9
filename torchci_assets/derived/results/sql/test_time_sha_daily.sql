-- test_time_sha_daily, from the day's test_results.
-- Test time per invoking file (classname NULL) and per class, PyTorch's way: per workflow run
-- attempt the sum of the file's test times across the shards that ran it, over main-branch
-- runs where every job that ran the file succeeded and none is an infra suspect. `runs`
-- counts those run attempts, so a window's average is sum(time) / sum(runs).
-- The same runs per invoking file and commit: what test_time_regressions needs to see a file's
-- time move and name the first commit seen slow, without reading raw rows over its window.
-- `first_at`, when the commit's first such run finished, orders commits within a day.
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
    SELECT build_env, test_config, invoking_file, workflow_id, workflow_run_attempt,
           any_value(head_sha) AS head_sha, sum(time) AS time, max(job_completed_at) AS completed_at
    FROM r JOIN good USING (workflow_id, workflow_run_attempt, build_env, test_config, invoking_file)
    WHERE head_sha IS NOT NULL
    GROUP BY ALL
)
SELECT build_env, test_config, invoking_file AS file, head_sha, count(*) AS runs, sum(time) AS time,
       min(completed_at) AS first_at
FROM per_run
GROUP BY ALL
ORDER BY build_env, test_config, file, first_at, head_sha
