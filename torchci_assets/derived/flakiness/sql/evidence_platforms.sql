-- A DISABLED issue's counts per platform: the wanted tests' rows of flaky_test_platforms (view p).
-- `wanted` holds (test, name, cls): a test key is "name (__main__.cls)", and a dotted classname
-- matches on its last part, as `lists.pytorch_key` builds keys. last_main_flake_at is NULL in a
-- partition written before it was recorded.
SELECT w.test, x.platform, sum(x.runs)::BIGINT, sum(x.failures)::BIGINT, sum(x.flake_events)::BIGINT,
       sum(x.rerun_passes)::BIGINT, sum(x.same_commit_pairs)::BIGINT, sum(x.flips)::BIGINT,
       any_value(x.file), min(x.window_start)::VARCHAR, max(x.window_end)::VARCHAR,
       max(x.last_main_flake_at) AS last_main_flake_at
FROM p x JOIN wanted w ON w.name = x.name AND string_split(x.classname, '.')[-1] = w.cls
GROUP BY ALL ORDER BY w.test, x.platform
