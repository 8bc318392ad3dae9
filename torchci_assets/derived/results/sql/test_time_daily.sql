-- test_time_daily, from the day's runs (time_runs.sql).
-- Test time per invoking file (classname NULL) and per class, PyTorch's way: per workflow run
-- the sum of the file's test times across the shards that ran it, over main-branch runs, the
-- shards joined as run_times.sql says (each at its latest clean attempt).
-- Three kinds of rows, so that a window counts every run once whichever days its reports landed:
--   summed  a run whose config has reports from all its shards today, each clean at some attempt,
--           and whose first attempt is among them (the usual case): `runs` counts those runs,
--           `time` sums their times (workflow_id NULL);
--   marker  one per run summed today (workflow_id set, file NULL, runs 0): its reports landing on
--           another day (a "re-run all jobs" the next day) are left out of the window, which
--           already counts the run here;
--   shard   any other run (it straddles midnight, a shard failed and may be re-run tomorrow, or
--           today holds only later attempts of a run whose first attempt landed before) keeps one
--           row per shard and attempt (workflow_id, shard, num_shards, attempt, clean; runs 0) for
--           the window to join with its other days through the same run_times
--           (sharding/sql/window_times.sql); with the run's commit (head_sha) and when the job
--           finished (completed_at), test_time_regressions joins them per commit the same way.
-- A day reads only its own reports, so its rows never depend on which other days exist; a
-- window's average is sum(time) / sum(runs) once the shard rows are joined by run.
SELECT build_env, test_config, file, classname, count(*) AS runs,
       seconds_sum(time) AS time,
       NULL::BIGINT AS workflow_id, NULL::INTEGER AS shard, NULL::INTEGER AS num_shards,
       NULL::BIGINT AS attempt, NULL::BOOLEAN AS clean, NULL::VARCHAR AS head_sha,
       NULL::TIMESTAMPTZ AS completed_at
FROM runs SEMI JOIN summed USING (workflow_id, build_env, test_config)
WHERE counts
GROUP BY build_env, test_config, file, classname
UNION ALL
SELECT build_env, test_config, NULL, NULL, 0, NULL, workflow_id, NULL, NULL, NULL, NULL, NULL, NULL
FROM summed
UNION ALL
SELECT build_env, test_config, file, classname, 0, time, workflow_id, shard, num_shards, attempt, clean, head_sha,
       completed_at
FROM shard_rows ANTI JOIN summed USING (workflow_id, build_env, test_config)
ORDER BY build_env, test_config, file, classname NULLS FIRST, workflow_id NULLS FIRST, shard, attempt
