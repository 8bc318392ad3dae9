-- Tests the newest flaky verdicts call flaky, named as commit_health lists its failing tests.
SELECT DISTINCT concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' AS test
FROM flaky_tests
WHERE verdict = 'flaky' AND day = (SELECT max(day) FROM flaky_tests)
