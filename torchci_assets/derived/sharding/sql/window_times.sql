-- Per build_env, test_config, file and class (NULL: the whole file), the mean time of a successful
-- main-branch run over the window (view daily over test_time_daily, from $first_day on, and the
-- look-back days before it), leaving out PyTorch's "default" averages ($default), which are
-- computed, not read.
-- Runs summed on their day (runs > 0; all of an older partition's rows) count in the window when
-- their day is in it. The runs whose shards landed on different days (workflow_id set) are joined
-- by run_times, the definition test_time_daily.sql applies to a day's, and count in the window
-- holding the last day one of their reports landed: the look-back days supply the shards of a run
-- straddling the window's first day, so every run counts in as many windows as a run summed on
-- its day. A run some day read summed whole (its marker row, file NULL) counts there only: its
-- shard rows on other days (a "re-run all jobs" after midnight) are left out, so it counts once.
WITH summed_whole AS (
    SELECT DISTINCT workflow_id, build_env, test_config FROM daily WHERE workflow_id IS NOT NULL AND file IS NULL
),
split AS (
    SELECT * FROM daily ANTI JOIN summed_whole USING (workflow_id, build_env, test_config)
    WHERE workflow_id IS NOT NULL AND build_env <> $default
),
ending_in_window AS (
    SELECT workflow_id, build_env, test_config FROM split GROUP BY ALL HAVING max(day) >= $first_day::DATE
),
window_split AS (
    SELECT * FROM split SEMI JOIN ending_in_window USING (workflow_id, build_env, test_config)
),
joined AS (
    SELECT build_env, test_config, file, classname, count(*) AS runs,
           seconds_sum(time) AS time
    FROM run_times('window_split') WHERE counts
    GROUP BY ALL
),
summed AS (
    SELECT build_env, test_config, file, classname, runs, time FROM daily
    WHERE runs > 0 AND build_env <> $default AND workflow_id IS NULL AND day >= $first_day::DATE
    UNION ALL
    SELECT * FROM joined
)
SELECT build_env, test_config, file, classname, seconds_sum(time) / sum(runs) AS time,
       sum(runs)::BIGINT AS runs
FROM summed
GROUP BY ALL ORDER BY build_env, test_config, file, classname NULLS FIRST
