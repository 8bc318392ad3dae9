-- Each main commit's latest word per job group: the newest commit_health partition that has it.
-- The columns are picked by name so that a window of partitions all written before `cancelled`
-- existed still reads (its rows then say nothing of cancellations).
SELECT COLUMNS(lambda c: c IN ('sha', 'pushed_at', 'workflow', 'job_group', 'blocking', 'state', 'failure_class',
                               'attempts', 'run_id', 'run_attempt', 'job_id', 'failing_tests', 'failing_test_count',
                               'cancelled'))
FROM commit_health
WHERE pushed_at >= $since
QUALIFY row_number() OVER (PARTITION BY sha, job_group ORDER BY day DESC) = 1
ORDER BY pushed_at, sha, job_group
