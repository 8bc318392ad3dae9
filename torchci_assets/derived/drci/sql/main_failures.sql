-- Job groups that failed (every attempt) on main commits, each commit's newest word (view ch).
WITH newest AS (SELECT sha, max(day) AS day FROM ch GROUP BY sha)
SELECT c.sha, c.job_group, c.job_id, c.run_id, c.failure_line
FROM ch c JOIN newest n USING (sha, day)
WHERE c.state = 'failure' AND c.job_group IS NOT NULL
