-- test_results following test_run's parts (parts.py). Views and tables: test_run (the parts being
-- added), job_tests (their jobs' test counts), previous_jobs (test_jobs as the previous run wrote
-- it), job_parts (which files, by test_run part and number, hold each job's rows).

-- step: split_jobs
-- Jobs of the new parts that an earlier part holds rows of too: their counts need every row.
SELECT count(*) FROM job_tests SEMI JOIN previous_jobs USING (workflow_id, workflow_run_attempt, job_id)

-- step: no_new_jobs
-- No new part: the jobs' counts are the previous ones.
CREATE OR REPLACE TEMP TABLE job_tests AS
SELECT workflow_id, workflow_run_attempt, job_id, tests, executed, failed, errors, skipped, rerun_passed, time,
       top_message_failures
FROM previous_jobs WHERE false

-- step: job_parts
-- (view job_parts_rows: the hidden files' rows, `Lake.register_rows`: read through pyarrow on either store)
CREATE OR REPLACE TEMP TABLE job_parts AS SELECT * FROM job_parts_rows

-- step: all_jobs
SELECT * FROM test_jobs

-- step: all_job_parts
SELECT * FROM job_parts

-- step: add_previous_jobs
INSERT INTO job_tests BY NAME
SELECT workflow_id, workflow_run_attempt, job_id, tests, executed, failed, errors, skipped, rerun_passed, time,
       top_message_failures
FROM previous_jobs

-- step: changed_files
-- The files holding rows of a job whose fields on test rows changed since they were written (a
-- later webhook, a log classified as infrastructure).
SELECT DISTINCT m.src, m.bucket
FROM previous_jobs p
JOIN test_jobs j USING (workflow_id, workflow_run_attempt, job_id)
JOIN job_parts m USING (workflow_id, workflow_run_attempt, job_id)
WHERE (p.head_sha, p.head_branch, p.branch_class, p.build_env, p.test_config, p.shard, p.num_shards, p.platform,
       p.job_name, p.workflow_name, p.job_conclusion, p.job_completed_at, p.job_found, p.infra_suspect)
      IS DISTINCT FROM
      (j.head_sha, j.head_branch, j.branch_class, j.build_env, j.test_config, j.shard, j.num_shards, j.platform,
       j.job_name, j.workflow_name, j.job_conclusion, j.job_completed_at, j.job_found, j.infra_suspect)
ORDER BY ALL

-- step: jobs_moved
-- Rows of test_jobs that differ from those the previous run wrote, either way (same columns, in
-- order; view previous_jobs' Hive `day` left out).
SELECT (SELECT count(*) FROM (SELECT * FROM test_jobs EXCEPT ALL SELECT * EXCLUDE (day) FROM previous_jobs))
     + (SELECT count(*) FROM (SELECT * EXCLUDE (day) FROM previous_jobs EXCEPT ALL SELECT * FROM test_jobs))

-- step: files_of_jobs
-- The files holding rows of the jobs in table key_jobs.
SELECT DISTINCT m.src, m.bucket FROM job_parts m SEMI JOIN key_jobs USING (workflow_id, workflow_run_attempt, job_id)
