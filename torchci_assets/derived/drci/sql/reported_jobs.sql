-- The jobs among temp table rest_test_jobs(job_id) of which a test report landed: a row in test_jobs over
-- the window (view tjr), as pr_jobs looks a job's reports up.
SELECT DISTINCT job_id
FROM tjr
WHERE job_id IN (SELECT job_id FROM rest_test_jobs)
