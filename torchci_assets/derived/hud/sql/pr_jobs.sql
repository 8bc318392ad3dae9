-- pr_jobs' rows (after job_identities.sql over the pull requests' heads): every job of each pull
-- request's latest head, the latest attempt of each job name with its failure class, and the
-- downstream backends' results (levels in $levels) for that head. $as_of: the partition's instant.

-- step: latest_identities
-- each job name's latest attempt (an aggregate of whole rows: cheaper than a window's sort)
CREATE TEMP TABLE latest_identities AS
SELECT unnest(arg_max(i, (run_attempt::BIGINT << 44) + epoch_ms(created_at))), count(*) AS attempts
FROM identities i GROUP BY sha, workflow, name

-- step: rows
CREATE TEMP TABLE pr_job_rows AS
WITH github0 AS (
    SELECT i.sha AS head_sha, 'github' AS source, NULL::VARCHAR AS level, i.workflow, i.job_group, i.name,
           CASE i.identity_state WHEN 'failed' THEN 'failure' WHEN 'pending' THEN 'pending'
                ELSE CASE WHEN i.skipped THEN 'skipped' ELSE 'success' END END AS state,
           c.failure_class, i.attempts, i.job_id, i.run_id, i.run_attempt, i.duration_s, i.started_at,
           i.completed_at, i.build_env, i.test_config, i.platform, c.infra_reason, c.failure_line,
           coalesce(c.failing_tests, []) AS failing_tests, coalesce(c.failing_test_count, 0) AS failing_test_count
    FROM latest_identities i LEFT JOIN identity_class c USING (sha, run_id, run_attempt, name)
),
-- a new failure whose group was failing on main when the job started, with the same failing
-- tests (or none known on either side: a build, a lint), came with main: broken on main
main_states AS (
    SELECT job_group, pushed_at, state, failing_tests FROM w_health
    WHERE state IN ('failure', 'flaky', 'success')
),
inherited AS (
    SELECT g.head_sha, g.workflow, g.name, m.state AS main_state, m.failing_tests AS main_tests
    FROM (SELECT *, coalesce(started_at, completed_at, $as_of) AS t FROM github0
          WHERE state = 'failure' AND failure_class = 'new') g
    ASOF JOIN main_states m ON m.job_group = g.job_group AND g.t >= m.pushed_at
),
github AS (
    SELECT g.* REPLACE (
        CASE WHEN x.main_state = 'failure' AND (len(g.failing_tests) = 0 AND len(x.main_tests) = 0
                                                OR list_has_any(g.failing_tests, x.main_tests))
             THEN 'broken_on_main' ELSE g.failure_class END AS failure_class)
    FROM github0 g LEFT JOIN inherited x USING (head_sha, workflow, name)
),
ci AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (PARTITION BY repo, head_sha, job_name
                                     ORDER BY run_attempt DESC, callback_at DESC NULLS LAST, day DESC) AS rn,
                  count(DISTINCT run_attempt) OVER (PARTITION BY repo, head_sha, job_name) AS attempts
        FROM w_ci WHERE head_sha IN (SELECT sha FROM heads) AND list_contains($levels, level)
    ) WHERE rn = 1
),
downstream AS (
    SELECT head_sha, repo AS source, level, workflow_name AS workflow,
           workflow_name || ' / ' || job_name AS job_group, job_name AS name,
           CASE failure_kind WHEN 'none' THEN 'success' WHEN 'pending' THEN 'pending' ELSE 'failure' END AS state,
           CASE failure_kind WHEN 'infrastructure' THEN 'infra' WHEN 'test' THEN 'new' END AS failure_class,
           attempts, NULL::BIGINT AS job_id, run_id, run_attempt, execution_s AS duration_s, started_at,
           completed_at, NULL::VARCHAR AS build_env, NULL::VARCHAR AS test_config,
           NULL::VARCHAR AS platform,
           CASE WHEN failure_kind = 'infrastructure' THEN 'downstream-infra' END AS infra_reason,
           NULL::VARCHAR AS failure_line, []::VARCHAR[] AS failing_tests,
           coalesce(failed, 0) AS failing_test_count
    FROM ci
)
SELECT p.number, p.head_sha, p.state AS pr_state, p.merged, p.head_ref, p.base_ref, p.labels,
       p.pr_updated_at, $as_of AS as_of, j.* EXCLUDE (head_sha)
FROM prs p JOIN (SELECT * FROM github UNION ALL BY NAME SELECT * FROM downstream) j USING (head_sha)
ORDER BY p.number, j.source, j.workflow, j.name
