-- test_time_sha_daily, from the day's runs (time_runs.sql).
-- Test time per invoking file and commit (head_sha): what test_time_regressions needs to see a
-- file's time move and name the first commit seen slow, without reading raw rows over its window.
-- The runs are those test_time_daily sums today, counted the same way (each run once, each shard at
-- its latest clean attempt): `runs` counts them, `time` sums their times, `first_at` is when the
-- first of them finished (it orders commits within a day when their pushes are not in the lake).
-- The other runs (split over days, or re-attempted on a later day) are test_time_daily's shard
-- rows, which carry their commit: test_time_regressions joins them as the test times' window does.
SELECT r.build_env, r.test_config, r.file, s.head_sha, count(*) AS runs,
       seconds_sum(r.time) AS time,
       min(s.completed_at) AS first_at
FROM runs r JOIN summed s USING (workflow_id, build_env, test_config)
WHERE r.counts AND r.classname IS NULL AND s.head_sha IS NOT NULL
GROUP BY r.build_env, r.test_config, r.file, s.head_sha
ORDER BY build_env, test_config, file, first_at, head_sha
