-- test_time_regressions' SQL: a table of a few values per file, config and day, filled one day at a
-- time (medians hold their values: a whole window at once would not fit in memory at PyTorch's
-- size), then each file's level before $day and on it.

-- step: daily_table
CREATE TEMP TABLE daily (build_env VARCHAR, test_config VARCHAR, file VARCHAR, day VARCHAR,
                         seconds DOUBLE, commits INTEGER, run_spread DOUBLE)

-- step: add_day
-- one day (view sha_day over its test_time_sha_daily); $mad_to_sd turns a MAD into a standard deviation
INSERT INTO daily
SELECT build_env, test_config, file, strftime(day, '%Y-%m-%d') AS day,
       median(time / runs) AS seconds, count(*)::INTEGER AS commits,
       coalesce($mad_to_sd * mad(time / runs), 0.0) AS run_spread
FROM sha_day WHERE runs > 0 AND build_env IS NOT NULL
GROUP BY ALL

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
runs AS (
    SELECT build_env, test_config, file, head_sha, min(first_at) AS first_at,
           sum(time) / sum(runs) AS seconds, sum(runs)::BIGINT AS runs
    FROM sha_daily JOIN moved USING (build_env, test_config, file)
    WHERE runs > 0 AND day >= moved.since::DATE - 1 AND day <= $day::DATE
    GROUP BY ALL
)
SELECT build_env, test_config, file, head_sha, coalesce(pushed_at, first_at) AS ordered_at, seconds, runs
FROM runs LEFT JOIN pushed USING (head_sha)
ORDER BY build_env, test_config, file, ordered_at NULLS LAST, head_sha
