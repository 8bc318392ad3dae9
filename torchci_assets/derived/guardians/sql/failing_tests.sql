-- Tests the newest flaky verdicts call flaky or broken: what the disabled-issue bot should act on.
SELECT count(*) AS tests FROM flaky_tests
WHERE verdict IN ('flaky', 'broken') AND day = (SELECT max(day) FROM flaky_tests)
