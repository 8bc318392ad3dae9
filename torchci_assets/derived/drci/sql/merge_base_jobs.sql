-- The jobs of each merge base (temp table merge_base_shas(sha)) in the newest commit_health partition
-- holding it (view ch): one row per job group, its workflow and a job's name (the shards of a group
-- share the name Dr. CI compares). Every state counts: PyTorch's Dr. CI asks whether the job ran there.
WITH newest AS (SELECT sha, max(day) AS day FROM ch WHERE sha IN (SELECT sha FROM merge_base_shas) GROUP BY sha)
SELECT DISTINCT c.sha, c.workflow, c.job_name
FROM ch c JOIN newest n USING (sha, day)
WHERE c.job_group IS NOT NULL AND c.job_name IS NOT NULL
