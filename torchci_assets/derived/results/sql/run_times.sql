-- How a workflow run's shards join into the run's test times, PyTorch's way (per run, the sum of a
-- file's times over the shards that ran it): the one definition test_time_daily.sql (a day's
-- reports) and sharding/sql/window_times.sql (the window's runs whose shards landed on different
-- days) both apply. stats.define_run_times creates it.

-- step: run_times
-- run_times('<view or CTE>'): from rows of one shard attempt and file (classname NULL) or class
-- (workflow_id, build_env, test_config, shard, num_shards, attempt, file, classname, time, clean:
-- the job succeeded and is no infra suspect), one row per run and file or class, for the runs
-- with a report from every shard (1..num_shards) among the rows:
--   all_clean  every shard has a clean attempt among the rows;
--   time       the sum over the shards that ran the file, each at its latest clean attempt (a
--              "re-run failed jobs" attempt holds only the shard re-run, the others stay at
--              their first);
--   counts     whether the run counts for the file: every shard that ran it has a clean attempt
--              and ran it there.
CREATE OR REPLACE TEMP MACRO run_times(shard_rows) AS TABLE
WITH run_shard_rows AS (
    SELECT workflow_id, build_env, test_config, shard, num_shards, attempt, file, classname, time, clean
    FROM query_table(shard_rows)
),
run_whole AS (
    SELECT workflow_id, build_env, test_config,
           count(DISTINCT shard) FILTER (WHERE clean) = max(num_shards) AS all_clean
    FROM run_shard_rows GROUP BY ALL
    HAVING count(DISTINCT shard) = max(num_shards) AND min(shard) = 1 AND max(shard) = max(num_shards)
),
run_chosen AS (
    SELECT workflow_id, build_env, test_config, shard, max(attempt) FILTER (WHERE clean) AS attempt
    FROM run_shard_rows SEMI JOIN run_whole USING (workflow_id, build_env, test_config)
    GROUP BY ALL
),
run_files AS (
    SELECT build_env, test_config, file, classname, workflow_id,
           seconds_sum(r.time, r.attempt = c.attempt) AS time,
           bool_and(c.attempt IS NOT NULL) AS every_shard_clean
    FROM run_shard_rows r JOIN run_chosen c USING (workflow_id, build_env, test_config, shard)
    GROUP BY ALL
)
SELECT f.build_env, f.test_config, f.file, f.classname, f.workflow_id, w.all_clean, f.time,
       f.every_shard_clean AND f.time IS NOT NULL AS counts
FROM run_files f JOIN run_whole w USING (workflow_id, build_env, test_config)
