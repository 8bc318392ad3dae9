-- test_jobs: one row per job attempt with test rows (test_run), joined with its job's latest
-- webhook fields (job_window, run_window), its log's verdict (failure_window) and the infrastructure
-- rule that applies to it, if any (see stats.py). Parameters: $main_branches,
-- $pull_request_events, $died_conclusions, $infra_min_failures, $infra_failing_share.
-- step: job_tests
-- Each job attempt's test counts and its most shared failure message, from the view test_run.
-- Its time is summed by seconds_sum: a float sum's last bits differ between two builds of the same
-- day, and a rebuild keeps test_jobs' file only when its rows come out the same (parts._same_jobs).
CREATE OR REPLACE TEMP TABLE job_tests AS
WITH tests AS (
    SELECT workflow_id, workflow_run_attempt, job_id,
           count(*) AS tests,
           count(*) FILTER (WHERE status <> 'skipped') AS executed,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           count(*) FILTER (WHERE status = 'error') AS errors,
           count(*) FILTER (WHERE status = 'skipped') AS skipped,
           count(*) FILTER (WHERE status = 'passed' AND rerun_count > 0) AS rerun_passed,
           seconds_sum(time) AS time
    FROM test_run GROUP BY ALL
),
messages AS (
    SELECT job_id, workflow_run_attempt, max(n) AS top_message_failures
    FROM (SELECT job_id, workflow_run_attempt, message, count(*) AS n FROM test_run
          WHERE status IN ('failed', 'error') AND message IS NOT NULL GROUP BY ALL)
    GROUP BY ALL
)
SELECT t.*, coalesce(m.top_message_failures, 0) AS top_message_failures
FROM tests t LEFT JOIN messages m USING (job_id, workflow_run_attempt)

-- step: test_jobs
-- job_tests joined with the jobs' webhooks and logs over the window.
CREATE OR REPLACE TEMP TABLE test_jobs AS
WITH job AS (  -- each job's latest fields: from its highest-ranked delivery that has them
    -- (arg_max skips the rows whose value is NULL), each column named as in job_window
    SELECT id,
           arg_max(COLUMNS(['run_id', 'name', 'workflow_name', 'head_sha', 'head_branch', 'status', 'conclusion',
                            'build_env', 'test_config', 'shard', 'num_shards', 'platform', 'started_at',
                            'completed_at']), (rank, received_at, day))
    FROM (SELECT *, status_rank(status) AS rank
          FROM job_window)
    GROUP BY id
),
run AS (
    SELECT id, arg_max(event, (updated_at, day)) AS event,
           arg_max(name, (updated_at, day)) AS name
    FROM run_window GROUP BY id
),
failure AS (  -- a log archived twice (a re-upload on a later day): the latest copy
    SELECT job_id, arg_max(rule, day) AS failure_rule, arg_max(infra, day) AS failure_infra
    FROM failure_window GROUP BY job_id
),
joined AS (
    SELECT t.*,
           job.id IS NOT NULL AS job_found, job.name AS job_name, job.head_sha, job.head_branch,
           -- the workflow as PyTorch's queries name it (workflow_run.name), else the job's own
           -- workflow_name (the run's webhooks missing from the window)
           coalesce(run.name, job.workflow_name) AS workflow_name,
           CASE WHEN job.id IS NULL THEN 'unknown'
                WHEN list_contains($main_branches, job.head_branch)
                     AND NOT list_contains($pull_request_events, coalesce(run.event, ''))
                THEN 'main' ELSE 'other' END AS branch_class,
           job.build_env, job.test_config, job.shard, job.num_shards, job.platform,
           job.status AS job_status, job.conclusion AS job_conclusion,
           job.started_at AS job_started_at, job.completed_at AS job_completed_at,
           f.failure_rule, coalesce(f.failure_infra, false) AS failure_infra
    FROM job_tests t
    LEFT JOIN failure f USING (job_id)
    LEFT JOIN job ON job.id = t.job_id
    LEFT JOIN run ON run.id = job.run_id
)
SELECT *,
    CASE WHEN list_contains($died_conclusions, job_conclusion) THEN 'job-died'
         WHEN failure_infra THEN 'log-infra'
         WHEN job_conclusion = 'failure' AND failed + errors = 0 THEN 'failed-outside-tests'
         WHEN failed + errors >= $infra_min_failures
              AND failed + errors >= $infra_failing_share * executed THEN 'mass-failure'
         WHEN top_message_failures >= $infra_min_failures THEN 'shared-message'
    END AS infra_reason,
    infra_reason IS NOT NULL AS infra_suspect
FROM joined
ORDER BY job_id, workflow_run_attempt
