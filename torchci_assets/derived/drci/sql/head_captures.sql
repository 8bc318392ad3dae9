-- The log classifier's captures of the heads' failing jobs (temp table failing_jobs(job_id)), from
-- job_failure over the window (view jfc): a job's latest attempt classified.
SELECT job_id, arg_max(captures, coalesce(run_attempt, 0)) AS captures
FROM jfc
WHERE job_id IN (SELECT job_id FROM failing_jobs) AND captures IS NOT NULL
GROUP BY job_id
