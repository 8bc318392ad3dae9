-- The finished GitHub jobs (success, skipped) of the heads asked about (temp table done_prs(number)),
-- from the day's pr_jobs (view pj): the rows head_jobs.sql leaves to head_done.sql, when a head is
-- read again from the REST API.
SELECT number, head_sha, pr_state, head_ref, base_ref, pr_updated_at, labels, workflow, job_group, name, state,
       failure_class, job_id, run_id, run_attempt, build_env, test_config, infra_reason, failure_line, started_at,
       completed_at, cancelled
FROM pj
WHERE source = 'github' AND state IN ('success', 'skipped') AND number IN (SELECT number FROM done_prs)
ORDER BY number, workflow, name
