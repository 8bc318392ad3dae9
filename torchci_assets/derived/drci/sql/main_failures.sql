-- Job groups that failed (every attempt) on main commits, each commit's newest word (view ch), and
-- whether the group's latest attempt failed by cancellation only: every failing job of it that has a
-- conclusion concluded `cancelled` (view wj over the job_failures extracts of workflow_job), as
-- pr_jobs marks a pull request's job cancelled. PyTorch's Dr. CI compares conclusions (isSameFailure).
WITH newest AS (SELECT sha, max(day) AS day FROM ch GROUP BY sha),
failed AS (
    SELECT c.sha, c.workflow, c.job_group, c.job_id, c.run_id, c.run_attempt, c.failure_line
    FROM ch c JOIN newest n USING (sha, day)
    WHERE c.state = 'failure' AND c.job_group IS NOT NULL
),
cancelled AS (
    SELECT f.sha, f.job_group, bool_and(j.conclusion = 'cancelled') AS cancelled
    FROM failed f JOIN wj j ON j.head_sha = f.sha AND j.run_id = f.run_id AND j.run_attempt = f.run_attempt
     AND f.workflow || ' / ' || regexp_replace(j.name, ', \d+, \d+(,|\))', '\1') = f.job_group
    GROUP BY f.sha, f.job_group
)
SELECT f.sha, f.job_group, f.job_id, f.run_id, f.failure_line, coalesce(k.cancelled, false) AS cancelled
FROM failed f LEFT JOIN cancelled k USING (sha, job_group)
