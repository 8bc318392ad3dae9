-- commit_health's steps after job_identities.sql: each group's attempts, its state, the commit's
-- time to signal and conclusion. Parameters: $blocking and $signal (workflow names; empty: every workflow), $min_groups,
-- $stale_before (a push's head pushed since then with nothing blocking yet is pending; a commit under
-- a stack's head, which GitHub runs no push workflow on, has no signal at once), $unstable (the
-- jobs of the open UNSTABLE issues).

-- step: unstable_rule
-- whether a job (`workflow / job (config, shard, shards, runner)`) is unstable as PyTorch's HUD says
-- (unstable.py): `unstable`, as written, in its name, or `UNSTABLE <name>` containing an open UNSTABLE
-- issue's title (`issues`), the name read as `workflow / job (config)`
CREATE OR REPLACE TEMP MACRO unstable_job(whole, issues) AS
    whole LIKE '%unstable%' OR len(list_filter(issues, lambda k: contains(
        'UNSTABLE ' || CASE WHEN regexp_matches(whole, '^(.*) \(([^,]*),.*\)')
            THEN regexp_extract(whole, '^(.*) \(([^,]*),.*\)', 1) || ' (' || regexp_extract(whole, '^(.*) \(([^,]*),.*\)', 2) || ')'
            ELSE whole END,
        'UNSTABLE ' || k))) > 0

-- step: unstable
-- the jobs of the window that are unstable
CREATE OR REPLACE TEMP TABLE unstable AS
SELECT DISTINCT workflow, name FROM identities
WHERE unstable_job(workflow || ' / ' || name, $unstable::VARCHAR[])

-- step: first_occurrences
-- a list's items in their order, each once (list_distinct keeps no order)
CREATE OR REPLACE TEMP MACRO first_occurrences(items) AS
    list_filter(items, lambda item, n: list_position(items, item) = n)

-- step: attempts
-- one row per attempt of a group, with what its cell would show if it is the latest: the
-- failing identities' classes combined (infra only when every failing job is; a real
-- failure anywhere makes it new), the job to link to (the failing job that tells the most: the
-- attempt's class is its own, a new failure before a broken or known flaky test, an infrastructure
-- failure with a reason before a test job whose reports are not in; then the longest, then by name)
-- with its own infra reason and failure line, the class, infra reason and id of each failing job (the
-- tooltip's count, whose jobs the site judges at its time as it judges the linked one), the longest
-- job, the failing tests (the linked job's first, each job's in its order), and whether it failed by
-- cancellation alone (every failing job cancelled: the HUD counts it red, as PyTorch's does, but the
-- trunk guardians take it for no word on the code, as upstream's autorevert and alerts do)
CREATE OR REPLACE TEMP TABLE attempts AS
WITH linked AS (
    SELECT i.* EXCLUDE (cancelled), c.failure_class, c.infra_reason, c.failure_line, c.failing_tests,
           c.failing_test_count, u.name IS NOT NULL AS is_unstable, i.cancelled AS is_cancelled,
           (CASE c.failure_class WHEN 'new' THEN 5 WHEN 'broken_on_main' THEN 4 WHEN 'known_flaky' THEN 3
                WHEN 'infra' THEN CASE WHEN c.infra_reason = 'no-test-results' THEN 1 ELSE 2 END ELSE 0 END,
            coalesce(i.duration_s, 0), i.name) AS link
    FROM identities i
    LEFT JOIN identity_class c ON c.sha = i.sha AND c.run_id = i.run_id AND c.run_attempt = i.run_attempt
         AND c.name = i.name
    LEFT JOIN unstable u ON u.workflow = i.workflow AND u.name = i.name
)
SELECT sha, workflow, job_group, run_id, run_attempt,
       bool_or(identity_state = 'failed') AS has_failure,
       coalesce(bool_and(is_cancelled) FILTER (WHERE identity_state = 'failed'), false) AS cancelled,
       bool_or(identity_state = 'pending') AS has_pending,
       bool_and(skipped) AS all_skipped,
       -- jobs PyTorch ignores on viable/strict do not block
       bool_and((len($blocking) = 0 OR list_contains($blocking, workflow)) AND NOT is_unstable
                AND NOT (name LIKE '%rerun_disabled_tests%'
                         OR name LIKE 'ciflow_should_run' OR name LIKE 'generate-test-matrix')) AS blocking,
       bool_and(is_unstable) AS unstable,
       count(*) AS jobs, count(*) FILTER (WHERE identity_state = 'failed') AS failing_jobs,
       min(created_at) AS created_at,
       CASE WHEN count(failure_class) = 0 THEN NULL
            WHEN bool_and(failure_class = 'infra') THEN 'infra'
            WHEN bool_or(failure_class = 'new') THEN 'new'
            WHEN bool_or(failure_class = 'broken_on_main') THEN 'broken_on_main'
            ELSE 'known_flaky' END AS failure_class,
       arg_max(job_id, link) AS job_id, arg_max(name, link) AS job_name,
       max(duration_s) AS duration_s,
       arg_max_null(infra_reason, link) AS infra_reason, arg_max_null(failure_line, link) AS failure_line,
       coalesce(list({'failure_class': failure_class, 'infra_reason': infra_reason, 'job_id': job_id}
                     ORDER BY link DESC)
                FILTER (WHERE failure_class IS NOT NULL), []) AS failing_kinds,
       -- (the failing identities' lists only: the others have none, and a sorted list aggregate buffers each row)
       coalesce(first_occurrences(flatten(list(failing_tests ORDER BY link DESC)
                                          FILTER (WHERE failure_class IS NOT NULL))), []) AS failing_tests,
       coalesce(sum(failing_test_count), 0)::BIGINT AS failing_test_count
FROM linked
GROUP BY sha, workflow, job_group, run_id, run_attempt

-- step: group_rows
-- a group over its attempts; its cell is its latest attempt's, each field that attempt's own (an
-- earlier attempt's failure line is not the latest's), and a group that recovered on a rerun also
-- keeps its latest failed attempt (`failed_attempt`), the one its flaky cell shows
CREATE OR REPLACE TEMP TABLE group_rows AS
WITH g AS (
    SELECT sha, workflow, job_group, count(*) AS attempts, bool_or(has_pending) AS has_pending,
           bool_and(has_failure) AS all_failed, bool_or(has_failure) AS any_failed,
           bool_and(all_skipped) AS all_skipped, bool_and(blocking) AS blocking, bool_and(unstable) AS unstable,
           -- every failed attempt failed by cancellation alone
           coalesce(bool_and(cancelled) FILTER (WHERE has_failure), false) AS cancelled,
           -- the latest attempt's cell: by creation time, then attempt number, then run
           arg_max(run_id, latest) AS run_id,
           arg_max(run_attempt, latest) AS run_attempt,
           arg_max(jobs, latest) AS jobs,
           arg_max(failing_jobs, latest) AS failing_jobs,
           arg_max_null(failure_class, latest) AS failure_class,
           arg_max(job_id, latest) AS job_id,
           arg_max(job_name, latest) AS job_name,
           arg_max_null(duration_s, latest) AS duration_s,
           arg_max_null(infra_reason, latest) AS infra_reason,
           arg_max_null(failure_line, latest) AS failure_line,
           arg_max(failing_tests, latest) AS failing_tests,
           arg_max(failing_test_count, latest) AS failing_test_count,
           arg_max(failing_kinds, latest) AS failing_kinds,
           arg_max({'run_id': run_id, 'run_attempt': run_attempt, 'job_id': job_id, 'job_name': job_name,
                    'failing_jobs': failing_jobs, 'infra_reason': infra_reason, 'failure_line': failure_line,
                    'failing_tests': failing_tests, 'failing_test_count': failing_test_count}, latest)
               FILTER (WHERE has_failure) AS failed_attempt
    FROM (SELECT *, (epoch_ms(created_at) * 64 + least(run_attempt, 63), run_id) AS latest FROM attempts)
    GROUP BY sha, workflow, job_group
)
SELECT sha, workflow, job_group, blocking, unstable, attempts, jobs,
    CASE WHEN has_pending THEN 'pending' WHEN all_failed THEN 'failure'
         WHEN any_failed THEN 'flaky' WHEN all_skipped THEN 'skipped' ELSE 'success' END AS state,
    failing_jobs, job_id, run_id, run_attempt, job_name, duration_s, infra_reason, failure_line,
    failing_tests, failing_test_count,
    CASE WHEN all_failed AND NOT has_pending THEN coalesce(failure_class, 'new') END AS failure_class, cancelled,
    failing_kinds,
    CASE WHEN any_failed AND NOT all_failed AND NOT has_pending THEN failed_attempt END AS failed_attempt
FROM g

-- step: signal
-- time to signal (test-infra time_to_signal): the slowest signal workflow run, for commits
-- where every such run succeeded at its first attempt
CREATE OR REPLACE TEMP TABLE signal AS
WITH r AS (
    SELECT id, run_attempt,
           arg_max(name, (rank, updated_at, day)) FILTER (WHERE name IS NOT NULL) AS name,
           arg_max(status, (rank, updated_at, day)) FILTER (WHERE status IS NOT NULL) AS status,
           arg_max(conclusion, (rank, updated_at, day)) FILTER (WHERE conclusion IS NOT NULL) AS conclusion,
           arg_max(created_at, (rank, updated_at, day)) FILTER (WHERE created_at IS NOT NULL) AS created_at,
           arg_max(updated_at, (rank, updated_at, day)) FILTER (WHERE updated_at IS NOT NULL) AS updated_at
    FROM (SELECT *, status_rank(status) AS rank
          FROM w_runs
          WHERE id IN (SELECT DISTINCT run_id FROM identities
                       WHERE len($signal) = 0 OR list_contains($signal, workflow)))
    GROUP BY id, run_attempt
),
per_sha AS (
    SELECT DISTINCT i.sha, r.* FROM r JOIN identities i ON i.run_id = r.id
)
SELECT sha, max(epoch(updated_at) - epoch(created_at)) AS time_to_signal_s, max(updated_at) AS signal_at
FROM per_sha WHERE len($signal) = 0 OR list_contains($signal, name)
GROUP BY sha
HAVING bool_and(run_attempt = 1 AND status = 'completed' AND conclusion = 'success')

-- step: commit_conclusion
CREATE OR REPLACE TEMP TABLE commit_conclusion AS
SELECT h.sha,
    count(g.sha) FILTER (WHERE g.blocking) AS blocking_groups,
    CASE WHEN bool_or(g.blocking AND g.state = 'pending') THEN 'pending'
         WHEN count(g.sha) FILTER (WHERE g.blocking) = 0 AND h.pushed_head AND h.pushed_at >= $stale_before
             THEN 'pending'
         WHEN count(g.sha) FILTER (WHERE g.blocking) < $min_groups THEN 'no_signal'
         WHEN bool_or(g.blocking AND g.state = 'failure') THEN 'red'
         WHEN bool_or(g.blocking AND g.state = 'flaky') THEN 'flaky'
         ELSE 'green' END AS conclusion
FROM heads h LEFT JOIN group_rows g USING (sha)
GROUP BY h.sha, h.pushed_at, h.pushed_head
