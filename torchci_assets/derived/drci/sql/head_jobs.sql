-- The GitHub jobs of each pull request's latest head in the day's pr_jobs (view pj), with the pull
-- request's labels (a label may suppress a job's failure): those not finished green (failing, pending)
-- when $finished is false, which head_done.sql sums the others of; the finished ones (success, skipped)
-- of the pull requests $numbers when it is true (a head read again from the REST API).
SELECT number, head_sha, pr_state, head_ref, base_ref, pr_updated_at, labels, workflow, job_group, name, state, failure_class,
       job_id, run_id, run_attempt, build_env, test_config, infra_reason, failure_line, started_at, completed_at, cancelled
FROM pj
WHERE source = 'github' AND (coalesce(state, '') IN ('success', 'skipped')) = $finished
  AND ($numbers IS NULL OR list_contains($numbers, number))
ORDER BY number, workflow, name
