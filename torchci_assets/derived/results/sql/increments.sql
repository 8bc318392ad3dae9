-- Following test_run's parts (increments.py): the steps of an append to the day's aggregates.
-- Views and tables: all_results (the day's test_results), test_jobs, new_jobs (the job attempts
-- of the parts not counted yet), previous_stats / previous_outcomes (the previous result),
-- agg_a / agg_b / outcomes_a (the aggregates of rows A and B, see increments.py).

-- step: jobs_digest
-- The jobs counted before, as test_jobs describes them now (every field the aggregates read, and
-- the number of test rows): equal to the recorded digest only if none of them changed.
SELECT coalesce(bit_xor(hash(j.workflow_id, j.workflow_run_attempt, j.job_id, j.head_sha, j.branch_class,
                             j.build_env, j.test_config, j.platform, j.job_completed_at, j.infra_suspect,
                             j.tests)), 0)::VARCHAR AS digest
FROM test_jobs j ANTI JOIN new_jobs n USING (workflow_id, workflow_run_attempt, job_id)

-- step: all_rows
CREATE OR REPLACE TEMP VIEW test_results AS SELECT * FROM all_results

-- step: touched_commits
-- S: the commits the new jobs ran on (NULL stands for the rows without their job).
CREATE OR REPLACE TEMP TABLE touched AS
SELECT DISTINCT j.head_sha FROM test_jobs j SEMI JOIN new_jobs n USING (workflow_id, workflow_run_attempt, job_id)

-- step: rows_a
-- A: every row of the day on a commit of S.
CREATE OR REPLACE TEMP VIEW test_results AS
SELECT * FROM all_results r
WHERE r.head_sha IN (SELECT head_sha FROM touched WHERE head_sha IS NOT NULL)
   OR (r.head_sha IS NULL AND EXISTS (SELECT 1 FROM touched WHERE head_sha IS NULL))

-- step: rows_b
-- B: A without the new jobs' rows, what the previous result counted of S.
CREATE OR REPLACE TEMP VIEW test_results AS
SELECT r.* FROM all_results r ANTI JOIN new_jobs n USING (workflow_id, workflow_run_attempt, job_id)
WHERE r.head_sha IN (SELECT head_sha FROM touched WHERE head_sha IS NOT NULL)
   OR (r.head_sha IS NULL AND EXISTS (SELECT 1 FROM touched WHERE head_sha IS NULL))

-- step: job_totals
-- test_results' totals from test_jobs (a job's `tests` are its rows): jobs, jobs without their
-- webhooks, rows, rows without their job.
SELECT count(*), count(*) FILTER (WHERE NOT job_found), coalesce(sum(tests), 0)::BIGINT,
       coalesce(sum(tests) FILTER (WHERE NOT job_found), 0)::BIGINT
FROM test_jobs

-- step: infra_reasons
SELECT infra_reason, count(*) FROM test_jobs WHERE infra_suspect GROUP BY ALL
