-- The GitHub jobs of each pull request's latest head that are not finished green (failing, pending),
-- from the day's pr_jobs (view pj), with the pull request's labels (a label may suppress a job's
-- failure). The finished ones are summed up by head_done.sql.
SELECT number, head_sha, pr_state, head_ref, base_ref, pr_updated_at, labels, workflow, job_group, name, state, failure_class,
       job_id, run_id, run_attempt, build_env, test_config, infra_reason, failure_line, started_at, completed_at, cancelled
FROM pj
WHERE source = 'github' AND coalesce(state, '') NOT IN ('success', 'skipped')
ORDER BY number, workflow, name
