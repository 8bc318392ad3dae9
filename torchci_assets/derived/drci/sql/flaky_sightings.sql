-- Failures on any commit of the tests that flaky_tests (view ft) calls flaky and that fail on a head
-- (temp table head_tests(test)), with their messages (view tr over test_results).
WITH flaky AS (
    SELECT DISTINCT classname || '.' || name || ' (' || file || ')' AS test FROM ft WHERE verdict = 'flaky'
)
SELECT classname || '.' || name || ' (' || file || ')' AS test, message, head_sha AS sha, head_branch, job_id, workflow_id AS run_id
FROM tr
WHERE status IN ('failed', 'error') AND head_sha IS NOT NULL
  AND classname || '.' || name || ' (' || file || ')' IN (SELECT test FROM flaky)
  AND classname || '.' || name || ' (' || file || ')' IN (SELECT test FROM head_tests)
