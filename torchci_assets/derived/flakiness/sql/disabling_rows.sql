-- The rows of flaky_tests (view f) a disabled-list decision can depend on: every row of a test
-- that is flaky or flaked in the window, or that $keys names (PyTorch's test ids, "name
-- (__main__.Class)" (test_key.sql), of the published list and the open issues); every row when
-- $keys is NULL.
-- A day holds ~60,000 healthy tests that no list names: reading them into Python cost more than
-- the decision.
WITH keyed AS (
    SELECT *, pytorch_key(name, classname) AS test_key FROM f
)
SELECT file, classname, name, verdict, flake_events, main_flake_events, runs, platforms, flaky_platforms,
       main_flaky_platforms, main_flaky_os_platforms, main_flaky_configs
FROM keyed
WHERE $keys::VARCHAR[] IS NULL
   OR test_key IN (SELECT test_key FROM keyed WHERE verdict = 'flaky' OR flake_events > 0)
   OR test_key IN (SELECT unnest($keys::VARCHAR[]))
