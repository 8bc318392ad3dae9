-- Failures on any commit of the tests that flaky_tests (view ft) calls flaky and that fail on a head
-- (temp table head_tests(test)), with their messages (view tr over test_results): final failures,
-- and tries that failed before the test passed on rerun (status passed, rerun_count > 0, the
-- failed try's message kept), which are a flake's most common sighting. Ordered so that the sighting a comment cites
-- does not change from run to run (an unchanged body is never re-posted).
WITH flaky AS (
    SELECT DISTINCT concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' AS test FROM ft WHERE verdict = 'flaky'
)
SELECT concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' AS test, message, head_sha AS sha, head_branch, job_id, workflow_id AS run_id
FROM tr
WHERE head_sha IS NOT NULL
  AND (status IN ('failed', 'error') OR (status = 'passed' AND rerun_count > 0 AND message IS NOT NULL))
  AND concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' IN (SELECT test FROM flaky)
  AND concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' IN (SELECT test FROM head_tests)
ORDER BY status = 'passed', sha, job_id
