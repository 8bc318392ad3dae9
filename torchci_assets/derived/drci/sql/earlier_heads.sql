-- The failing GitHub jobs of the last head of each pull request closed in earlier pr_jobs partitions
-- (view earlier), not among the day's (temp table known_prs(number)) and landed by a main commit of
-- $repo (view pm over the pr_merges extracts): each pull request as the newest of those partitions
-- holds it, the last the lake knows of it before the day's window. Only the job groups asked about
-- (temp table wanted_groups(job_group)), failed from $since on.
WITH newest AS (SELECT number, max(day) AS day FROM earlier GROUP BY number)
SELECT number, head_sha, pr_state, head_ref, base_ref, pr_updated_at, labels, workflow, job_group, name, state,
       failure_class, job_id, run_id, run_attempt, build_env, test_config, infra_reason, failure_line, started_at,
       completed_at, cancelled
FROM earlier JOIN newest USING (number, day)
WHERE source = 'github' AND pr_state = 'closed' AND state = 'failure'
  AND number NOT IN (SELECT number FROM known_prs) AND job_group IN (SELECT job_group FROM wanted_groups)
  AND coalesce(completed_at, started_at) >= $since
  AND number IN (SELECT number FROM pm WHERE repo = $repo AND sha IS NOT NULL)
ORDER BY number, workflow, name
