-- pr_jobs' rows (after job_identities.sql over the pull requests' heads, and commit_groups.sql's step
-- `unstable`): every job of each pull request's latest head, the latest attempt of each job name with
-- its failure class (whether it was cancelled, whether it is unstable as on main), and the downstream
-- backends' results (levels in $levels) for that head. $as_of: the partition's instant. A pull
-- request whose head has no job yet has one row, its job columns NULL.

-- step: latest_identities
-- each job name's latest attempt: the highest attempt of the newest run of its workflow on the head (PyTorch's
-- Dr. CI keeps a workflow's newest run only), so an older run re-run never beats a newer run. A run is as new as
-- its first job (a re-run's jobs are created later, its run is not), then its id. An aggregate of whole rows:
-- cheaper than a window's sort.
CREATE TEMP TABLE latest_identities AS
WITH runs AS (SELECT run_id, min(created_at) AS run_created FROM identities GROUP BY run_id)
SELECT unnest(arg_max(i, (r.run_created, i.run_id, i.run_attempt))), count(*) AS attempts
FROM identities i JOIN runs r USING (run_id) GROUP BY i.sha, i.workflow, i.name

-- step: rows
CREATE TEMP TABLE pr_job_rows AS
WITH github0 AS (
    SELECT i.sha AS head_sha, 'github' AS source, NULL::VARCHAR AS level, i.workflow, i.job_group, i.name,
           CASE i.identity_state WHEN 'failed' THEN 'failure' WHEN 'pending' THEN 'pending'
                ELSE CASE WHEN i.skipped THEN 'skipped' ELSE 'success' END END AS state,
           c.failure_class, i.attempts, i.job_id, i.run_id, i.run_attempt, i.duration_s, i.started_at,
           i.completed_at, i.build_env, i.test_config, i.platform, c.infra_reason, c.failure_line,
           coalesce(c.failing_tests, []) AS failing_tests, coalesce(c.failing_test_count, 0) AS failing_test_count,
           i.cancelled, u.name IS NOT NULL AS unstable
    FROM latest_identities i LEFT JOIN identity_class c USING (sha, run_id, run_attempt, name)
    LEFT JOIN unstable u ON u.workflow = i.workflow AND u.name = i.name
),
-- a new failure whose group was failing on main when the job started, with every one of its failing tests
-- failing there too (or none known on either side: a build, a lint), came with main: broken on main. One
-- failing test that main does not share is the pull request's own, as Dr. CI says; a list cut at
-- MAX_LISTED_TESTS (fewer listed than failing_test_count) cannot show that every test is shared: new.
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
        CASE WHEN x.main_state = 'failure'
                  AND (g.failing_test_count = 0 AND len(x.main_tests) = 0
                       OR g.failing_test_count > 0 AND g.failing_test_count = len(g.failing_tests)
                          AND list_has_all(x.main_tests, g.failing_tests))
             THEN 'broken_on_main' ELSE g.failure_class END AS failure_class)
    FROM github0 g LEFT JOIN inherited x USING (head_sha, workflow, name)
),
-- each downstream job's attempt (its rows of the window's days merged: the furthest, then latest callback), judged
-- as of $as_of_ms as the backend pages judge it (downstream_macros.sql): a job whose `completed` callback never
-- came is timed out after the relay's $zombie_timeout_s, not pending for ever
ci_attempts AS (
    SELECT * EXCLUDE (rn), downstream_timed_out(status, first_callback_at, any_started_at,
                                                 $as_of_ms, $zombie_timeout_s) AS timed_out
    FROM (
        SELECT *, row_number() OVER (PARTITION BY repo, head_sha, job_name, run_id, run_attempt
                                     ORDER BY callback_state_rank(status) DESC, callback_at DESC NULLS LAST,
                                              day DESC) AS rn,
                  min(callback_at) OVER (PARTITION BY repo, head_sha, job_name, run_id, run_attempt)
                      AS first_callback_at,
                  min(started_at) OVER (PARTITION BY repo, head_sha, job_name, run_id, run_attempt) AS any_started_at
        FROM w_ci WHERE head_sha IN (SELECT sha FROM heads) AND list_contains($levels, level)
    ) WHERE rn = 1
),
ci AS (
    SELECT * REPLACE (downstream_kind(status, failure_kind, timed_out) AS failure_kind) FROM (
        SELECT *, row_number() OVER (PARTITION BY repo, head_sha, job_name
                                     ORDER BY run_attempt DESC, callback_at DESC NULLS LAST, day DESC) AS rn,
                  count(DISTINCT run_attempt) OVER (PARTITION BY repo, head_sha, job_name) AS attempts
        FROM ci_attempts
    ) WHERE rn = 1
),
downstream AS (
    SELECT head_sha, repo AS source, level, workflow_name AS workflow,
           workflow_name || ' / ' || job_name AS job_group, job_name AS name,
           CASE failure_kind WHEN 'none' THEN 'success' WHEN 'pending' THEN 'pending' ELSE 'failure' END AS state,
           CASE failure_kind WHEN 'infrastructure' THEN 'infra' WHEN 'test' THEN 'new' END AS failure_class,
           attempts, NULL::BIGINT AS job_id, run_id, run_attempt,
           CASE WHEN timed_out THEN CAST($zombie_timeout_s AS DOUBLE) ELSE execution_s END AS duration_s, started_at,
           completed_at, NULL::VARCHAR AS build_env, NULL::VARCHAR AS test_config,
           NULL::VARCHAR AS platform,
           CASE WHEN timed_out THEN 'downstream-timed-out'
                WHEN failure_kind = 'infrastructure' THEN 'downstream-infra' END AS infra_reason,
           NULL::VARCHAR AS failure_line, []::VARCHAR[] AS failing_tests,
           coalesce(failed, 0) AS failing_test_count, false AS cancelled, false AS unstable
    FROM ci
)
-- every pull request with a known head, its jobs' columns NULL (one header row) while its head has none: a new
-- head whose CI has not started, or a pull request merged days after its CI ran. Left out, it would show an
-- older partition's head and state, or vanish from the HUD.
SELECT p.number, p.head_sha, p.state AS pr_state, p.merged, p.head_ref, p.base_ref, p.labels,
       p.pr_updated_at, $as_of AS as_of, j.* EXCLUDE (head_sha)
FROM prs p LEFT JOIN (SELECT * FROM github UNION ALL BY NAME SELECT * FROM downstream) j USING (head_sha)
WHERE p.head_sha IS NOT NULL
ORDER BY p.number, j.source, j.workflow, j.name

-- step: carried
-- a head's jobs that ran before this window, kept in the previous day's partition (view prev_pr_jobs): its CI ran
-- days ago and a later webhook (a label, a merge) brought the pull request back, or a ciflow label started another
-- workflow on it days after `pull` ran. Every job name of the head that this window does not show is carried, with
-- today's pull request fields, as a longer window would show it (each job name's latest attempt): a header row
-- alone would show "no job yet" for a head whose CI is done, and the label's new workflow alone would hide the
-- head's earlier failures from Dr. CI.
CREATE OR REPLACE TEMP TABLE pr_job_rows AS
WITH today AS (SELECT DISTINCT ON (number) * FROM pr_job_rows ORDER BY number, source NULLS FIRST),
carried AS (
    SELECT p.* EXCLUDE (day) REPLACE (h.pr_state AS pr_state, h.merged AS merged, h.head_ref AS head_ref,
                                      h.base_ref AS base_ref, h.labels AS labels, h.pr_updated_at AS pr_updated_at,
                                      h.as_of AS as_of)
    FROM today h JOIN prev_pr_jobs p ON p.number = h.number AND p.head_sha = h.head_sha AND p.source IS NOT NULL
    -- a downstream callback may name no workflow: NULL is a value here, or a job the window shows would be carried too
    ANTI JOIN pr_job_rows t ON t.number = p.number AND t.head_sha = p.head_sha AND t.source = p.source
                           AND t.workflow IS NOT DISTINCT FROM p.workflow AND t.name IS NOT DISTINCT FROM p.name
),
merged AS (
    SELECT *, false AS is_carried FROM pr_job_rows WHERE source IS NOT NULL OR number NOT IN (SELECT number FROM carried)
    UNION ALL BY NAME
    SELECT *, true AS is_carried FROM carried
)
-- a carried job is unstable by today's UNSTABLE issues, not the day's it was carried from (a partition
-- written before `cancelled` or `unstable` existed has them NULL)
SELECT * EXCLUDE (is_carried) REPLACE (
    CASE WHEN is_carried THEN coalesce(cancelled, false) ELSE cancelled END AS cancelled,
    CASE WHEN is_carried AND source = 'github' THEN unstable_job(workflow || ' / ' || name, $unstable::VARCHAR[])
         ELSE coalesce(unstable, false) END AS unstable)
FROM merged
ORDER BY number, source, workflow, name
