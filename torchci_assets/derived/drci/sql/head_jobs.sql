-- Every GitHub job of each pull request's latest head, from the day's pr_jobs (view pj), with the pull
-- request's labels (a label may suppress a job's failure).
SELECT number, head_sha, pr_state, head_ref, base_ref, pr_updated_at, labels, workflow, job_group, name, state, failure_class,
       job_id, run_id, run_attempt, build_env, test_config, infra_reason, failure_line, started_at, completed_at, cancelled
FROM pj
WHERE source = 'github'
ORDER BY number, workflow, name
