-- Following test_run's parts (increments.py): the steps of an append to the day's aggregates.
-- Views and tables: test_jobs (the day's jobs now), counted (the jobs as the previous result
-- counted them), results_files (test_results' files holding the rows of the jobs read),
-- previous_stats / previous_outcomes (the previous result), agg_a / agg_b / outcomes_a / extremes_a /
-- extremes_b (aggregates of rows A and B and of the changed jobs' rows, see increments.py).

-- step: counted_jobs
-- The jobs' fields the aggregates read, as the aggregates counted them (what the next append compares).
CREATE OR REPLACE TEMP TABLE counted_now AS
SELECT workflow_id, workflow_run_attempt, job_id, head_sha, branch_class, build_env, test_config, platform,
       workflow_name, job_completed_at, infra_suspect, tests
FROM test_jobs

-- step: counted_now_rows
SELECT * FROM counted_now

-- step: moved_jobs
-- N: jobs not counted yet; C: jobs counted whose fields changed since (a later webhook or log
-- verdict); grown: counted jobs with more rows now (their reports came in two parts).
CREATE OR REPLACE TEMP TABLE moved AS
SELECT j.workflow_id, j.workflow_run_attempt, j.job_id,
       c.job_id IS NULL AS is_new, coalesce(c.tests <> j.tests, false) AS grown
FROM counted_now j LEFT JOIN counted c USING (workflow_id, workflow_run_attempt, job_id)
WHERE c.job_id IS NULL
   OR (j.head_sha, j.branch_class, j.build_env, j.test_config, j.platform, j.workflow_name, j.job_completed_at,
       j.infra_suspect, j.tests) IS DISTINCT FROM
      (c.head_sha, c.branch_class, c.build_env, c.test_config, c.platform, c.workflow_name, c.job_completed_at,
       c.infra_suspect, c.tests)

-- step: touched_keys
-- K: the (commit, configuration) of the moved jobs, before and after. The aggregates of a test
-- and configuration decompose by commit, so only the rows of jobs with a key in K can differ.
CREATE OR REPLACE TEMP TABLE touched AS
SELECT DISTINCT hash(head_sha, build_env, test_config, platform, branch_class) AS k
FROM (SELECT head_sha, build_env, test_config, platform, branch_class
      FROM counted_now SEMI JOIN moved USING (workflow_id, workflow_run_attempt, job_id)
      UNION ALL
      SELECT head_sha, build_env, test_config, platform, branch_class
      FROM counted SEMI JOIN moved USING (workflow_id, workflow_run_attempt, job_id))

-- step: jobs_a
-- The jobs whose rows are read: those with a key in K now (A) or when counted (B).
CREATE OR REPLACE TEMP TABLE jobs_a AS
SELECT * FROM counted_now WHERE hash(head_sha, build_env, test_config, platform, branch_class) IN (SELECT k FROM touched)

-- step: jobs_b
CREATE OR REPLACE TEMP TABLE jobs_b AS
SELECT * FROM counted WHERE hash(head_sha, build_env, test_config, platform, branch_class) IN (SELECT k FROM touched)

-- step: key_jobs
CREATE OR REPLACE TEMP TABLE key_jobs AS
SELECT workflow_id, workflow_run_attempt, job_id FROM jobs_a
UNION
SELECT workflow_id, workflow_run_attempt, job_id FROM jobs_b

-- step: key_rows
-- Their test rows (test columns only: the job's fields come from jobs_a or jobs_b).
CREATE OR REPLACE TEMP TABLE key_rows AS
SELECT r.workflow_id, r.workflow_run_attempt, r.job_id, r.file, r.classname, r.name, r.status, r.rerun_count, r.time
FROM results_files r SEMI JOIN key_jobs USING (workflow_id, workflow_run_attempt, job_id)

-- step: rows_now
-- The rows of the jobs with a key in K with their jobs' fields now (rows_counted: as the previous
-- result counted them; no new job's): what A, B and the changed jobs' rows below select from.
CREATE OR REPLACE TEMP VIEW rows_now AS
SELECT r.*, j.head_sha, j.branch_class, j.build_env, j.test_config, j.platform, j.workflow_name,
       j.job_completed_at, j.infra_suspect
FROM key_rows r JOIN jobs_a j USING (workflow_id, workflow_run_attempt, job_id)

-- step: rows_counted
CREATE OR REPLACE TEMP VIEW rows_counted AS
SELECT r.*, j.head_sha, j.branch_class, j.build_env, j.test_config, j.platform, j.workflow_name,
       j.job_completed_at, j.infra_suspect
FROM key_rows r JOIN jobs_b j USING (workflow_id, workflow_run_attempt, job_id)

-- step: moved_groups
-- The groups (test and configuration) the moved jobs have rows in, now or as counted: only those
-- can differ (the other shards of a configuration run other tests).
CREATE OR REPLACE TEMP TABLE moved_groups AS
SELECT hash(file, classname, name, build_env, test_config, platform, branch_class) AS g
FROM rows_now SEMI JOIN moved USING (workflow_id, workflow_run_attempt, job_id)
UNION
SELECT hash(file, classname, name, build_env, test_config, platform, branch_class) AS g
FROM rows_counted SEMI JOIN moved USING (workflow_id, workflow_run_attempt, job_id)

-- step: rows_a
-- A: the rows of the moved groups with a key in K, with their jobs' fields now.
CREATE OR REPLACE TEMP VIEW test_results AS
SELECT * FROM rows_now
WHERE hash(file, classname, name, build_env, test_config, platform, branch_class) IN (SELECT g FROM moved_groups)

-- step: rows_b
-- B: the same as the previous result counted them (no new job's).
CREATE OR REPLACE TEMP VIEW test_results AS
SELECT * FROM rows_counted
WHERE hash(file, classname, name, build_env, test_config, platform, branch_class) IN (SELECT g FROM moved_groups)

-- step: changed_rows_b
-- The changed jobs' rows as counted, and (changed_rows_a) as they are now: whether an extreme of a
-- group (the longest clean pass, first and last seen) may have come from a row that changed.
CREATE OR REPLACE TEMP VIEW test_results AS
SELECT * FROM rows_counted SEMI JOIN moved USING (workflow_id, workflow_run_attempt, job_id)

-- step: changed_rows_a
CREATE OR REPLACE TEMP VIEW test_results AS
SELECT * FROM rows_now SEMI JOIN (SELECT * FROM moved WHERE NOT is_new) USING (workflow_id, workflow_run_attempt, job_id)

-- step: outside_groups
-- The moved groups in which the previous result counted rows that B does not hold (rows outside
-- the moved keys): their previous extremes may be those rows'. In the other moved groups every
-- counted row is in B, so the group is A's rows alone now, whose extremes are taken as they are.
-- That is the common case on a day of PyTorch's pull requests: a job's reports land before its
-- webhooks, its rows are counted under an unknown configuration (NULL columns, so groups are
-- matched by hash, NULL-safe) and all leave it when the webhooks come.
CREATE OR REPLACE TEMP TABLE outside_groups AS
WITH counted_b AS (SELECT hash(file, classname, name, build_env, test_config, platform, branch_class) AS g,
                          runs + infra_runs AS n FROM agg_b)
SELECT p.g
FROM (SELECT hash(file, classname, name, build_env, test_config, platform, branch_class) AS g,
             runs + infra_runs AS n FROM previous_stats) p
LEFT JOIN counted_b USING (g)
WHERE p.g IN (SELECT g FROM moved_groups) AND p.n > coalesce(counted_b.n, 0)

-- step: lost_extremes
-- Groups with rows outside the moved keys whose previous extreme equals one a changed row held
-- and no longer holds the same way: that extreme may be gone, and only the whole day can say
-- (then the day is recomputed).
WITH b AS (SELECT *, hash(file, classname, name, build_env, test_config, platform, branch_class) AS g FROM extremes_b),
     a AS (SELECT *, hash(file, classname, name, build_env, test_config, platform, branch_class) AS g FROM extremes_a),
     p AS (SELECT *, hash(file, classname, name, build_env, test_config, platform, branch_class) AS g
           FROM previous_stats WHERE g IN (SELECT g FROM b))
SELECT count(*)
FROM b JOIN p USING (g) LEFT JOIN a USING (g)
WHERE g IN (SELECT g FROM outside_groups)
  AND ((b.max_pass_time = p.max_pass_time AND b.max_pass_time IS DISTINCT FROM a.max_pass_time)
    OR (b.first_seen = p.first_seen AND b.first_seen IS DISTINCT FROM a.first_seen)
    OR (b.last_seen = p.last_seen AND b.last_seen IS DISTINCT FROM a.last_seen))

-- step: counted
-- (view counted_files: the hidden files' rows, `Lake.register_rows`: read through pyarrow on either store)
CREATE OR REPLACE TEMP TABLE counted AS SELECT * FROM counted_files

-- step: moved_counts
SELECT count(*) FILTER (WHERE is_new), count(*) FILTER (WHERE NOT is_new), count(*) FILTER (WHERE grown) FROM moved

-- step: counted_rows
SELECT coalesce(sum(runs + infra_runs), 0)::BIGINT FROM test_daily_stats

-- step: all_rows
CREATE OR REPLACE TEMP VIEW test_results AS SELECT * FROM all_results

-- step: job_totals
-- test_results' totals from test_jobs (a job's `tests` are its rows): jobs, jobs without their
-- webhooks, rows, rows without their job.
SELECT count(*), count(*) FILTER (WHERE NOT job_found), coalesce(sum(tests), 0)::BIGINT,
       coalesce(sum(tests) FILTER (WHERE NOT job_found), 0)::BIGINT
FROM test_jobs

-- step: infra_reasons
SELECT infra_reason, count(*) FROM test_jobs WHERE infra_suspect GROUP BY ALL
