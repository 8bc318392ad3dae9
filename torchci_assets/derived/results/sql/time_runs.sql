-- The day's main-branch runs as test_time_daily.sql and test_time_sha_daily.sql both count them, from
-- the day's test_results: one definition, so that the per-commit times test_time_regressions reads
-- count each run as the test times do (each shard at its latest clean attempt, a run once).
-- stats.build_test_time_daily runs these steps after run_times.sql's macro; each table's query then
-- reads the temp tables they leave:
--   shard_rows  one row per shard attempt (a job) and invoking file (classname NULL) or class: its
--               time, whether the job is clean (it succeeded and is no infra suspect), its commit and
--               when it finished;
--   runs        run_times over them: per run and file or class, for the runs with every shard today;
--   summed      the runs complete today from their first attempt on (every shard clean at some
--               attempt, attempt 1 among them: an earlier attempt may have been counted on an
--               earlier day otherwise), with their commit and when their last job finished.

-- step: time_tests
-- A job named as neither of PyTorch's patterns (a team's `test / unit (ubuntu-latest)`: build_env
-- NULL) is keyed by its whole name, with the test_config `default`; a PyTorch build job that ran tests
-- keeps its build_env and the empty test_config. A report without its job (no name) is left out.
CREATE OR REPLACE TEMP VIEW time_tests AS
SELECT workflow_id, workflow_run_attempt AS attempt, coalesce(build_env, job_name) AS build_env,
       coalesce(test_config, CASE WHEN build_env IS NULL THEN 'default' ELSE '' END) AS test_config,
       coalesce(shard, 1) AS shard, coalesce(num_shards, 1) AS num_shards, invoking_file, classname, time,
       job_conclusion = 'success' AND NOT infra_suspect AS clean, head_sha, job_completed_at
FROM test_results
WHERE branch_class = 'main' AND coalesce(build_env, job_name) IS NOT NULL AND file <> ''

-- step: shard_attempts
-- one row per job
CREATE OR REPLACE TEMP TABLE shard_attempts AS
SELECT workflow_id, build_env, test_config, shard, num_shards, attempt, bool_and(clean) AS clean,
       any_value(head_sha) AS head_sha, max(job_completed_at) AS completed_at
FROM time_tests
GROUP BY workflow_id, build_env, test_config, shard, num_shards, attempt

-- step: shard_rows
CREATE OR REPLACE TEMP TABLE shard_rows AS
WITH per_shard_attempt AS (
    SELECT workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file AS file, classname,
           seconds_sum(time) AS time
    FROM time_tests
    GROUP BY GROUPING SETS ((workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file),
                            (workflow_id, build_env, test_config, shard, num_shards, attempt, invoking_file, classname))
)
SELECT p.*, s.clean, s.head_sha, s.completed_at
FROM per_shard_attempt p JOIN shard_attempts s USING (workflow_id, build_env, test_config, shard, num_shards, attempt)

-- step: runs
CREATE OR REPLACE TEMP TABLE runs AS SELECT * FROM run_times('shard_rows')

-- step: summed
CREATE OR REPLACE TEMP TABLE summed AS
WITH complete AS (
    SELECT DISTINCT workflow_id, build_env, test_config FROM runs WHERE all_clean
)
SELECT workflow_id, build_env, test_config, any_value(head_sha) AS head_sha, max(completed_at) AS completed_at
FROM shard_attempts SEMI JOIN complete USING (workflow_id, build_env, test_config)
GROUP BY workflow_id, build_env, test_config
HAVING min(attempt) = 1
