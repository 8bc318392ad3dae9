-- A DISABLED issue's counts per platform: the wanted tests' rows of flaky_test_platforms (view p).
-- `wanted` holds (test, name, cls): a test key is "name (__main__.cls)" ("name (__main__)", cls
-- empty, outside a class), and a dotted classname matches on its last part, as `lists.pytorch_key`
-- builds keys. The counts are main's, the evidence that disables a test (flips are main's by
-- nature), with every branch's flake events beside them.
-- A partition written before main's were counted (NULL) decided on every branch's evidence, which
-- then stands for them, as `lists.main_evidence` reads it; its last_main_flake_at is NULL.
SELECT w.test, x.platform,
       coalesce(sum(x.main_runs), sum(x.runs))::BIGINT,
       coalesce(sum(x.main_failures), sum(x.failures))::BIGINT,
       coalesce(sum(x.main_flake_events), sum(x.flake_events))::BIGINT,
       coalesce(sum(x.main_rerun_passes), sum(x.rerun_passes))::BIGINT,
       coalesce(sum(x.main_same_commit_pairs), sum(x.same_commit_pairs))::BIGINT,
       sum(x.flips)::BIGINT, sum(x.flake_events)::BIGINT,
       any_value(x.file), min(x.window_start)::VARCHAR, max(x.window_end)::VARCHAR,
       max(x.last_main_flake_at) AS last_main_flake_at
FROM p x JOIN wanted w ON w.name = x.name AND string_split(x.classname, '.')[-1] = w.cls
GROUP BY ALL ORDER BY w.test, x.platform
