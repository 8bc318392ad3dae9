-- test_time_regressions' SQL: a table of a few values per file, config and day, filled one day at a
-- time (medians hold their values: a whole window at once would not fit in memory at PyTorch's
-- size), then each file's level before $day and on it.
-- A commit's runs on a day: those test_time_sha_daily summed that day, and those the days split
-- (test_time_daily's shard rows) joined by run_times on the last day one of their reports landed,
-- as the test times' window joins them (window_times.sql): each run counts once, whichever days
-- its reports landed.

-- step: split_runs
-- view time_daily over test_time_daily of the window and the look-back days before it (in today's
-- columns): one row per file and run the days split that counts for the file and whose last day
-- is in the window (from $first_day), with that day and the run's commit. A run some day summed
-- whole (its marker row) is that day's, in test_time_sha_daily: its shard rows elsewhere are left out.
CREATE OR REPLACE TEMP TABLE split_runs AS
WITH summed_whole AS (
    SELECT DISTINCT workflow_id, build_env, test_config FROM time_daily WHERE workflow_id IS NOT NULL AND file IS NULL
),
split AS (
    SELECT * FROM time_daily ANTI JOIN summed_whole USING (workflow_id, build_env, test_config)
    WHERE workflow_id IS NOT NULL AND classname IS NULL
),
run_days AS (
    SELECT workflow_id, build_env, test_config, max(day) AS day, any_value(head_sha) AS head_sha,
           max(completed_at) AS first_at
    FROM split GROUP BY workflow_id, build_env, test_config
    HAVING max(day) >= $first_day::DATE
),
window_split AS (
    SELECT * FROM split SEMI JOIN run_days USING (workflow_id, build_env, test_config)
)
SELECT j.build_env, j.test_config, j.file, d.head_sha, d.day, j.time, d.first_at
FROM run_times('window_split') j JOIN run_days d USING (workflow_id, build_env, test_config)
WHERE j.counts AND d.head_sha IS NOT NULL

-- step: no_split_runs
-- table split_runs when the days have no test_time_daily partition
CREATE OR REPLACE TEMP TABLE split_runs (build_env VARCHAR, test_config VARCHAR, file VARCHAR, head_sha VARCHAR,
                                         day DATE, time DOUBLE, first_at TIMESTAMPTZ)

-- step: daily_table
CREATE TEMP TABLE daily (build_env VARCHAR, test_config VARCHAR, file VARCHAR, day VARCHAR,
                         seconds DOUBLE, commits INTEGER, run_spread DOUBLE)

-- step: add_day
-- day $day (view sha_day over its test_time_sha_daily, and its split_runs): per file, the median over
-- the day's commits of their mean time per run; $mad_to_sd turns a MAD into a standard deviation
INSERT INTO daily
WITH commits AS (
    SELECT build_env, test_config, file, head_sha, sum(runs) AS runs,
           seconds_sum(time) AS time
    FROM (SELECT build_env, test_config, file, head_sha, runs, time FROM sha_day WHERE runs > 0
          UNION ALL
          SELECT build_env, test_config, file, head_sha, 1, time FROM split_runs WHERE day = $day::DATE)
    WHERE build_env IS NOT NULL
    GROUP BY build_env, test_config, file, head_sha
)
SELECT build_env, test_config, file, $day AS day,
       median(time / runs) AS seconds, count(*)::INTEGER AS commits,
       coalesce($mad_to_sd * mad(time / runs), 0.0) AS run_spread
FROM commits
GROUP BY build_env, test_config, file

-- step: levels
SELECT build_env, test_config, file,
       median(seconds) FILTER (WHERE day < $day) AS before_s,
       any_value(seconds) FILTER (WHERE day = $day) AS today_s
FROM daily GROUP BY ALL
HAVING before_s IS NOT NULL

-- step: series
-- the daily values of the files in table wanted
SELECT build_env, test_config, file, day, seconds, commits, run_spread
FROM daily JOIN wanted USING (build_env, test_config, file) ORDER BY ALL

-- step: no_pushes
-- view pushes when the window has no push partition
CREATE OR REPLACE TEMP VIEW pushes AS
SELECT NULL::VARCHAR AS ref, NULL::VARCHAR AS after, NULL::TIMESTAMPTZ AS received_at WHERE false

-- step: commits
-- each moved file's commits (table moved) from the day before its move to $day, in main's order
-- (pushes to $main_ref, the configured main branch)
WITH pushed AS (
    SELECT after AS head_sha, min(received_at) AS pushed_at FROM pushes
    WHERE ref = $main_ref GROUP BY 1
),
commit_runs AS (  -- the window's runs per commit and day, as add_day reads them
    SELECT build_env, test_config, file, head_sha, day, runs, time, first_at FROM sha_daily WHERE runs > 0
    UNION ALL
    SELECT build_env, test_config, file, head_sha, day, 1, time, first_at FROM split_runs
),
runs AS (
    SELECT build_env, test_config, file, head_sha, min(first_at) AS first_at,
           seconds_sum(time) / sum(runs) AS seconds, sum(runs)::BIGINT AS runs
    FROM commit_runs JOIN moved USING (build_env, test_config, file)
    WHERE day >= moved.since::DATE - 1 AND day <= $day::DATE
    GROUP BY ALL
)
SELECT build_env, test_config, file, head_sha, coalesce(pushed_at, first_at) AS ordered_at, seconds, runs
FROM runs LEFT JOIN pushed USING (head_sha)
ORDER BY build_env, test_config, file, ordered_at NULLS LAST, head_sha
