-- The job identities of the commits in temp table heads(sha), read from the w_* views (see health.py):
-- one per (run, attempt, job name), their failing tests, infrastructure evidence and failure class.
-- Parameters: $stale_before (a job unresolved since before it was abandoned), $failing_conclusions,
-- $max_listed_tests.

-- step: identities
-- A job identity's rows (every id, attempt-day and delivery state of the window) aggregate
-- straight into its state: a conclusion appears only once a job completed and never changes,
-- so "any failing conclusion", "any conclusion" and the ids' latest fields are all order-free.
CREATE OR REPLACE TEMP TABLE identities AS
-- (j is read twice, by g and by `cancelled`: materialized, so the window's job files are read once)
-- A job id belongs to one attempt: a rerun's completion that arrived after midnight from an older
-- GitHub, without run_attempt, was written as attempt 1 by its day's ingest (it knew no other); the
-- id's rows of the days before name the rerun's attempt, the highest.
WITH j AS MATERIALIZED (
    SELECT * REPLACE (max(run_attempt) OVER (PARTITION BY id) AS run_attempt),
           coalesce(list_contains($failing_conclusions, conclusion), false) AS failing
    FROM w_jobs WHERE head_sha IN (SELECT sha FROM heads)
),
g AS (
    SELECT any_value(head_sha) AS sha, run_id, run_attempt, name, any_value(workflow_name) AS workflow_name,
           coalesce(bool_or(failing), false) AS failed,
           coalesce(bool_or(coalesce(conclusion, '') <> ''), false) AS concluded,
           coalesce(bool_and(conclusion IN ('skipped', 'neutral'))
                    FILTER (WHERE coalesce(conclusion, '') <> ''), false) AS skipped,
           coalesce(bool_or(status IN ('in_progress', 'completed')), false) AS started,
           max(coalesce(created_at, started_at, received_at)) AS created_at,
           -- the job to link to: a failing id first, else one that concluded, else one that started
           arg_max(id, (failing::BIGINT << 61)
                       + ((coalesce(conclusion, '') <> '')::BIGINT << 60)
                       + ((started_at IS NOT NULL)::BIGINT << 59) + id) AS job_id,
           -- (list_distinct on the result: DISTINCT inside the aggregate is ten times slower)
           list_distinct(list(id) FILTER (WHERE failing)) AS failing_ids,
           max(duration_s) AS duration_s, min(started_at) AS started_at,
           max(completed_at) AS completed_at,
           any_value(build_env) AS build_env, any_value(test_config) AS test_config,
           any_value(platform) AS platform
    FROM j
    GROUP BY run_id, run_attempt, name  -- a run is of one commit
),
-- the failed identities that failed by cancellation alone: every failing id that concluded, concluded
-- `cancelled` (what commit_groups.sql's attempts and pr_jobs.sql read as `cancelled`)
cancelled AS (
    SELECT f.run_id, f.run_attempt, f.name
    FROM (SELECT sha, run_id, run_attempt, name, unnest(failing_ids) AS id FROM g WHERE failed) f
    JOIN j ON j.id = f.id AND j.head_sha = f.sha
    WHERE coalesce(j.conclusion, '') <> ''
    GROUP BY ALL
    HAVING bool_and(j.conclusion = 'cancelled')
),
runs AS (
    -- each run's latest fields: from its highest-ranked delivery that has them
    SELECT id AS run_id, run_attempt,
           arg_max(name, (rank, updated_at, day)) FILTER (WHERE name IS NOT NULL) AS name,
           arg_max(event, (rank, updated_at, day)) FILTER (WHERE event IS NOT NULL) AS event,
           arg_max(status, (rank, updated_at, day)) FILTER (WHERE status IS NOT NULL) AS status,
           arg_max(conclusion, (rank, updated_at, day)) FILTER (WHERE conclusion IS NOT NULL) AS conclusion
    FROM (SELECT *, status_rank(status) AS rank
          FROM w_runs WHERE id IN (SELECT DISTINCT run_id FROM g))
    GROUP BY id, run_attempt
),
r AS (
    -- what a completed run's conclusion says of its jobs: none failed (success; skipped: none ran either),
    -- or it was cancelled, which stopped the jobs that had not started before they ran
    SELECT run_id, run_attempt, name, event,
           status = 'completed' AND conclusion IN ('success', 'neutral', 'skipped') AS none_failed,
           status = 'completed' AND conclusion = 'skipped' AS none_ran,
           status = 'completed' AND conclusion = 'cancelled' AS cancelled
    FROM runs
),
-- a job whose own `completed` never arrived (lost) is settled by its run only when the run's conclusion
-- rules out its failure: a run of no failure, or one cancelled before the job got a runner (nothing ran:
-- skipped). In a failed run it may be the failure: unknown, pending (and abandoned once stale), as
-- PyTorch's HUD shows a job without conclusion
r_of_g AS (
    SELECT g.*, r.name AS run_name, r.event,
           NOT g.concluded AND coalesce(r.none_failed, false) AS none_failed,
           NOT g.concluded AND coalesce(r.none_ran OR r.cancelled AND NOT g.started, false) AS not_run,
           k.name IS NOT NULL AS cancelled
    FROM g LEFT JOIN r USING (run_id, run_attempt)
    LEFT JOIN cancelled k ON k.run_id = g.run_id AND k.run_attempt = g.run_attempt AND k.name = g.name
),
i AS (
    SELECT * EXCLUDE (workflow_name, run_name, event, skipped, none_failed, not_run),
           coalesce(workflow_name, run_name, 'unknown') AS workflow,
           skipped OR not_run AS skipped, none_failed OR not_run AS settled_by_run
    FROM r_of_g
    WHERE coalesce(event, '') <> 'workflow_run'
)
SELECT *,
    workflow || ' / ' || regexp_replace(name, ', \d+, \d+(,|\))', '\1') AS job_group,
    CASE WHEN failed THEN 'failed' WHEN concluded OR settled_by_run THEN 'resolved'
         WHEN created_at < $stale_before THEN 'failed' ELSE 'pending' END AS identity_state,
    NOT failed AND NOT concluded AND NOT settled_by_run AND created_at < $stale_before AS stale
FROM i

-- step: identity_class
-- each failed identity's failure class, from its failing tests (final failures on that commit, by job id) and the
-- infrastructure evidence of its failing job ids: of an identity's ids, the linked one's (the latest failing id),
-- else the latest id's that has some, and of a job's rows over the window, its latest day's. (One statement, not
-- three temp tables: each statement's planning is a fixed cost, most of the cost in a small window.)
CREATE OR REPLACE TEMP TABLE identity_class AS
WITH ids AS (
    SELECT sha, run_id, run_attempt, name, test_config, unnest(failing_ids) AS job_id FROM identities WHERE failed
),
ft AS (
    SELECT o.file, o.classname, o.name AS test, o.head_sha AS sha, unnest(o.failing_job_ids) AS job_id
    FROM w_outcomes o WHERE o.failed + o.errors > 0 AND o.head_sha IN (SELECT sha FROM heads)
),
identity_tests AS (
    SELECT DISTINCT ids.sha, ids.run_id, ids.run_attempt, ids.name, ft.file, ft.classname, ft.test,
           coalesce(f.verdict, 'unknown') AS verdict
    FROM ids JOIN ft USING (sha, job_id)
    LEFT JOIN w_flaky f ON f.file = ft.file AND f.classname = ft.classname AND f.name = ft.test
),
tj AS (SELECT job_id, workflow_run_attempt AS run_attempt, bool_or(infra_suspect) AS infra,
              arg_max(infra_reason, day) FILTER (WHERE infra_suspect) AS reason
       FROM w_tjobs GROUP BY ALL),
jf AS (SELECT job_id, run_attempt, bool_or(infra) AS infra, arg_max(line, day) AS line
       FROM w_job_failure GROUP BY ALL),
identity_infra AS (
    SELECT ids.sha, ids.run_id, ids.run_attempt, ids.name,
           bool_and(coalesce(jf.infra, false) OR coalesce(tj.infra, false)
                    OR (tj.job_id IS NULL AND ids.test_config IS NOT NULL)) AS infra,
           arg_max(CASE WHEN jf.infra THEN 'log' WHEN tj.infra THEN tj.reason
                        WHEN tj.job_id IS NULL AND ids.test_config IS NOT NULL THEN 'no-test-results'
                   END, ids.job_id) AS infra_reason,
           arg_max(jf.line, ids.job_id) AS failure_line
    FROM ids LEFT JOIN tj ON tj.job_id = ids.job_id AND tj.run_attempt = ids.run_attempt
    LEFT JOIN jf ON jf.job_id = ids.job_id AND jf.run_attempt = ids.run_attempt
    GROUP BY ALL
),
t AS (
    SELECT sha, run_id, run_attempt, name, count(*) AS tests,
           count(*) FILTER (WHERE verdict NOT IN ('flaky', 'broken')) AS new_tests,
           count(*) FILTER (WHERE verdict = 'broken') AS broken_tests,
           list(concat_ws('.', nullif(classname, ''), test) || ' (' || file || ')'
                ORDER BY verdict IN ('flaky', 'broken'), file, classname, test)[1:$max_listed_tests]
               AS failing_tests
    FROM identity_tests GROUP BY ALL
)
SELECT i.sha, i.run_id, i.run_attempt, i.name,
    CASE WHEN i.stale OR coalesce(x.infra, false) THEN 'infra'
         WHEN coalesce(t.tests, 0) = 0 OR t.new_tests > 0 THEN 'new'
         WHEN t.broken_tests > 0 THEN 'broken_on_main'
         ELSE 'known_flaky' END AS failure_class,
    CASE WHEN i.stale THEN 'abandoned' ELSE x.infra_reason END AS infra_reason,
    x.failure_line, coalesce(t.failing_tests, []) AS failing_tests,
    coalesce(t.tests, 0) AS failing_test_count
FROM identities i
LEFT JOIN t USING (sha, run_id, run_attempt, name)
LEFT JOIN identity_infra x USING (sha, run_id, run_attempt, name)
WHERE i.identity_state = 'failed'
