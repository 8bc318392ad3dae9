-- The rows of one test_results file (view src) that the rerun evidence reads (rerun_evidence.sql):
-- those of PyTorch's rerun_disabled_tests jobs that count, a pass, a failure or error, or a skip
-- carrying the reruns' counts as JSON (num_green, num_red). A few hundred rows of millions a day.
SELECT name, classname, platform, job_name, job_id, job_completed_at, infra_suspect, status, message
FROM src
WHERE job_name LIKE '%rerun_disabled_tests%'
  AND (status <> 'skipped' OR (json_valid(message) AND message LIKE '%num_red%'))
