-- Each main commit's latest word per job group: the newest commit_health partition that has it.
SELECT sha, pushed_at, workflow, job_group, blocking, state, failure_class, attempts, run_id, run_attempt, job_id,
       failing_tests, failing_test_count
FROM commit_health
WHERE pushed_at >= $since
QUALIFY row_number() OVER (PARTITION BY sha, job_group ORDER BY day DESC) = 1
ORDER BY pushed_at, sha, job_group
