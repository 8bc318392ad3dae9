-- test_results: test rows (view test_run: a test_run part, or a test_results file rewritten) with
-- their job (test_jobs), sorted by configuration and test (parts.py cuts them into files where the
-- configuration changes).
SELECT t.workflow_id, t.workflow_run_attempt, t.job_id,
       replace(t.invoking_file, '.', '/') AS invoking_file,
       t.file, t.classname, t.name, t.time, t.status, t.rerun_count, t.message,
       j.head_sha, j.head_branch, j.branch_class, j.build_env, j.test_config, j.shard, j.num_shards,
       j.platform, j.job_name, j.workflow_name, j.job_conclusion, j.job_completed_at, j.job_found, j.infra_suspect
FROM test_run t JOIN test_jobs j USING (workflow_id, workflow_run_attempt, job_id)
ORDER BY j.build_env, j.test_config, t.file, t.classname, t.name, t.job_id
