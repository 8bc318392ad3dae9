-- ci_metrics_daily's rows for one day: the `day` headline row (commits pushed on $commits_day,
-- judged once settled; the day's jobs, tests and backends), then per platform, runner label, job
-- group (main-branch successes on $branch_names) and backend. Views: see metrics.py.
WITH jobs AS (
    SELECT j.* REPLACE (coalesce(j.platform, 'unknown') AS platform),
           coalesce(j.workflow_name, r.name, 'unknown') AS workflow, coalesce(runner_machine(labels), 'unknown') AS label
    -- a job counts on the day its completion arrived, once: jobs_before holds the days an earlier
    -- copy of it may be in (the day before, and back to the day it completed: see metrics.py). A job
    -- id belongs to one attempt: a rerun's completion that arrived after midnight without run_attempt
    -- (written as attempt 1) takes the attempt its deliveries of the days before named.
    FROM (SELECT t.* REPLACE (greatest(t.run_attempt, coalesce(b.run_attempt, 1)) AS run_attempt)
          FROM jobs_today t
          LEFT JOIN (SELECT id, max(run_attempt) AS run_attempt, bool_or(status = 'completed') AS completed
                     FROM jobs_before GROUP BY id) b ON b.id = t.id
          WHERE t.status = 'completed' AND coalesce(t.conclusion, '') <> 'skipped'
            AND NOT coalesce(b.completed, false)) j
    LEFT JOIN (SELECT id, any_value(name) AS name FROM runs GROUP BY id) r ON r.id = j.run_id
),
failed AS (
    SELECT j.id, j.run_attempt,
           coalesce(bool_or(tj.infra_suspect), false) OR coalesce(bool_or(jf.infra), false)
               OR (count(tj.job_id) = 0 AND any_value(j.test_config) IS NOT NULL) AS infra
    FROM jobs j
    LEFT JOIN tjobs tj ON tj.job_id = j.id AND tj.workflow_run_attempt = j.run_attempt
    LEFT JOIN jfail jf ON jf.job_id = j.id AND jf.run_attempt = j.run_attempt
    WHERE list_contains($failing_conclusions, j.conclusion)
    GROUP BY j.id, j.run_attempt
),
commits AS (
    SELECT DISTINCT sha, conclusion, time_to_signal_s FROM health
    WHERE pushed_day = $commits_day AND conclusion <> 'no_signal'
),
pushed AS (
    -- every commit a push lists (a stack landed in one push is several), its head when it lists none
    SELECT count(DISTINCT sha) AS main_commits
    FROM (SELECT unnest(list_append(coalesce(commits, []), after)) AS sha, * EXCLUDE (commits) FROM pushes)
    WHERE list_contains($branches, ref) AND (repo IS NULL OR lower(repo) = lower($upstream_repo))
      AND NOT coalesce(deleted, false) AND after <> '0000000000000000000000000000000000000000'
),
c AS (
    SELECT count(*) AS commits, count(*) FILTER (WHERE conclusion = 'red') AS red,
           count(*) FILTER (WHERE conclusion = 'flaky') AS flaky,
           count(*) FILTER (WHERE conclusion = 'green') AS green,
           count(*) FILTER (WHERE conclusion = 'pending') AS pending,
           quantile_cont(time_to_signal_s, 0.5) AS tts_p50_s, quantile_cont(time_to_signal_s, 0.9) AS tts_p90_s,
           count(time_to_signal_s) AS tts_commits
    FROM commits
),
q AS (
    SELECT count(*) AS jobs, quantile_cont(queue_s, 0.5) AS queue_p50_s,
           quantile_cont(queue_s, 0.9) AS queue_p90_s, max(queue_s) AS queue_max_s
    FROM jobs
),
f AS (SELECT count(*) AS failed_jobs, count(*) FILTER (WHERE infra) AS infra_failed_jobs FROM failed),
t AS (SELECT count(*) FILTER (WHERE verdict = 'flaky') AS flaky_tests,
             count(*) FILTER (WHERE verdict = 'broken') AS broken_tests FROM flaky),
d AS (SELECT count(*) FILTER (WHERE status = 'disabled') AS disabled_tests FROM disabled),
day_row AS (
    SELECT 'day' AS dimension, $commits_day AS commits_day, *,
           100.0 * red / nullif(commits, 0) AS red_pct, 100.0 * flaky / nullif(commits, 0) AS flaky_pct,
           100.0 * infra_failed_jobs / nullif(failed_jobs, 0) AS infra_failure_pct
    FROM pushed, c, q, f, t, d
),
runner_rows AS (
    SELECT CASE WHEN grouping(label) = 1 THEN 'platform' ELSE 'runner' END AS dimension, platform, label,
           count(*) AS jobs, quantile_cont(queue_s, 0.5) AS queue_p50_s, quantile_cont(queue_s, 0.9) AS queue_p90_s,
           max(queue_s) AS queue_max_s
    FROM jobs GROUP BY GROUPING SETS ((platform, label), (platform))
),
group_rows AS (
    SELECT 'job_group' AS dimension, workflow || ' / ' || regexp_replace(name, ', \d+, \d+(,|\))', '\1')
               AS job_group,
           count(*) AS jobs, quantile_cont(duration_s, 0.5) AS duration_p50_s,
           quantile_cont(duration_s, 0.9) AS duration_p90_s
    FROM jobs WHERE list_contains($branch_names, head_branch)
        AND conclusion = 'success'
    GROUP BY ALL
),
-- the day's downstream jobs judged as of $as_of_ms as the backend pages judge them (downstream_macros.sql)
ci_judged AS (
    SELECT * REPLACE (downstream_kind(status, failure_kind,
                                      downstream_timed_out(status, callback_at, started_at, $as_of_ms,
                                                           $zombie_timeout_s))
                      AS failure_kind)
    FROM ci
),
backend_rows AS (
    SELECT 'backend' AS dimension, repo,
           count(*) FILTER (WHERE failure_kind <> 'pending') AS jobs,
           count(*) FILTER (WHERE failure_kind = 'none') / nullif(count(*) FILTER (WHERE failure_kind <> 'pending'), 0)
               AS success_rate,
           (SELECT coalesce(sum(callbacks), 0) FROM callbacks c WHERE c.repo = r.repo)::BIGINT AS callbacks
    FROM ci_judged r GROUP BY repo
    UNION ALL BY NAME
    SELECT 'backend' AS dimension, repo, 0 AS jobs, NULL AS success_rate, sum(callbacks)::BIGINT AS callbacks
    FROM callbacks WHERE repo NOT IN (SELECT repo FROM ci) GROUP BY repo
)
SELECT * FROM day_row
UNION ALL BY NAME SELECT * FROM runner_rows
UNION ALL BY NAME SELECT * FROM group_rows
UNION ALL BY NAME SELECT * FROM backend_rows
ORDER BY dimension, platform, label, job_group, repo
