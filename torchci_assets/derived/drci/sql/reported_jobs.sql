-- The jobs among temp table rest_test_jobs(job_id) of which a test report landed: a row in test_jobs over
-- the window (view tjr), as pr_jobs looks a job's reports up, with the infrastructure reason its reports
-- gave it (most tests failing at once, one message shared...), its latest day's, as pr_jobs takes it.
SELECT job_id, arg_max(infra_reason, day) FILTER (WHERE infra_suspect) AS infra_reason
FROM tjr
WHERE job_id IN (SELECT job_id FROM rest_test_jobs)
GROUP BY job_id
