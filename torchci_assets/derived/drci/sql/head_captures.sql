-- The log classifier's word on the heads' failing jobs (temp table failing_jobs(job_id)), from job_failure
-- over the window (view jfc): a row per job whose log it read, a rule matched or none, with its latest
-- attempt's captures (NULL in a partition written before them) and whether the log was read whole.
SELECT job_id, arg_max(captures, coalesce(run_attempt, 0)) AS captures,
       bool_and(coalesce(log_complete, true)) AS complete
FROM jfc
WHERE job_id IN (SELECT job_id FROM failing_jobs)
GROUP BY job_id
