-- backend_health: one row per downstream repo and window ($window_days, each starting on the
-- matching day of $first_days), from ci_result and ci_callback_minutes, with the jobs judged as of
-- $as_of_ms (macros: ingest/sql/callback_macros.sql). A job that never completed is timed out, as
-- the relay's sweeper reports it and the HUD shows it (downstream_timed_out), $zombie_timeout_s after
-- its first callback reached the receiver (the relay's clock, not the runner's); a completed job is
-- judged as the ingest judges it, a completion arriving after the timeout included. Nightly and periodic self-reports
-- ($self_report_events) are left out of the job measures. A repository is one whatever the letter
-- case of its name (GitHub's names are case-insensitive, and the OIDC claim follows a rename): rows
-- are keyed by lower(repo) and shown under the spelling seen last.
WITH windows AS (SELECT unnest($window_days) AS window_days, unnest($first_days) AS first_day),
rows AS (
    SELECT w.window_days, r.* EXCLUDE (day, repo), lower(r.repo) AS repo, CAST(r.day AS DATE) AS day,
        callback_state_rank(status) AS state_rank
    FROM ci_result r JOIN windows w ON CAST(r.day AS DATE) >= w.first_day
    WHERE NOT list_contains($self_report_events, coalesce(r.event_type, ''))
),
merged AS (
    SELECT * REPLACE (merged_started_at(any_started_at, execution_s, completed_at) AS started_at,
                      coalesce(queue_s, any_queue_s) AS queue_s)
    FROM (
        SELECT *,
            row_number() OVER (PARTITION BY window_days, delivery_id, repo, run_id, run_attempt, job_name
                               ORDER BY state_rank DESC, callback_at DESC NULLS LAST, day DESC) AS rn,
            min(started_at) OVER (PARTITION BY window_days, delivery_id, repo, run_id, run_attempt, job_name)
                AS any_started_at,
            min(callback_at) OVER (PARTITION BY window_days, delivery_id, repo, run_id, run_attempt, job_name)
                AS first_callback_at,
            max(queue_s) OVER (PARTITION BY window_days, delivery_id, repo, run_id, run_attempt, job_name) AS any_queue_s
        FROM rows
    ) WHERE rn = 1
),
timed AS (
    SELECT *, downstream_timeout_ms(first_callback_at, started_at, $zombie_timeout_s) AS timed_out_ms,
        downstream_timed_out(status, first_callback_at, started_at, $as_of_ms, $zombie_timeout_s) AS timed_out
    FROM merged
),
judged AS (
    SELECT *,
        CASE WHEN status = 'completed'
                 THEN failure_kind(status, conclusion, started_at, completed_at, callback_at, passed, failed,
                                   skipped, $as_of_ms, $lost_after_ms, $success_conclusions)
             WHEN timed_out THEN 'infrastructure'
             ELSE 'pending' END AS kind
    FROM timed
),
job_stats AS (
    SELECT window_days, repo,
        count(*) FILTER (WHERE kind <> 'pending') AS jobs,
        count(*) FILTER (WHERE kind <> 'pending' AND status = 'completed') AS completed_jobs,
        count(*) FILTER (WHERE kind = 'none') AS successes,
        count(*) FILTER (WHERE kind = 'test') AS test_failures,
        count(*) FILTER (WHERE kind = 'infrastructure') AS infra_failures,
        count(*) FILTER (WHERE conclusion = 'timed_out' AND status = 'completed'
                            OR kind = 'infrastructure' AND status <> 'completed') AS timeouts,
        count(*) FILTER (WHERE kind = 'infrastructure' AND status <> 'completed') AS lost,
        count(*) FILTER (WHERE kind = 'pending') AS pending,
        quantile_cont(queue_s, 0.5) FILTER (WHERE kind <> 'pending') AS queue_p50_s,
        quantile_cont(queue_s, 0.9) FILTER (WHERE kind <> 'pending') AS queue_p90_s
    FROM judged GROUP BY window_days, repo
),
commit_times AS (
    SELECT window_days, repo, delivery_id,
        (max(CASE WHEN status = 'completed' THEN epoch_ms(completed_at) ELSE timed_out_ms END)
         - min(epoch_ms(coalesce(started_at, callback_at)) - coalesce(queue_s, 0) * 1000)) / 1000.0 AS commit_s
    FROM judged GROUP BY window_days, repo, delivery_id
    HAVING count(*) FILTER (WHERE kind = 'pending') = 0
),
commit_stats AS (
    SELECT window_days, repo, count(*) AS commits, quantile_cont(commit_s, 0.95) AS commit_time_p95_s
    FROM commit_times GROUP BY window_days, repo
),
per_minute AS (
    SELECT w.window_days, lower(m.repo) AS repo, m.minute, sum(m.callbacks) AS n
    FROM ci_callback_minutes m JOIN windows w ON CAST(m.day AS DATE) >= w.first_day
    GROUP BY w.window_days, lower(m.repo), m.minute
),
peaks AS (
    SELECT window_days, repo, sum(n) AS callbacks, max(n) AS callback_peak_per_minute
    FROM per_minute GROUP BY window_days, repo
),
repos AS (SELECT window_days, repo FROM job_stats UNION SELECT window_days, repo FROM peaks),
spellings AS (
    SELECT lower(repo) AS repo, repo AS spelling, callback_at AS seen_at FROM ci_result
    UNION ALL SELECT lower(repo), repo, minute FROM ci_callback_minutes
),
names AS (
    SELECT repo, coalesce(arg_max(spelling, seen_at), min(spelling)) AS display
    FROM spellings GROUP BY repo
)
SELECT names.display AS repo, repos.window_days,
    coalesce(jobs, 0) AS jobs, coalesce(completed_jobs, 0) AS completed_jobs,
    coalesce(successes, 0) AS successes, coalesce(test_failures, 0) AS test_failures,
    coalesce(infra_failures, 0) AS infra_failures, coalesce(timeouts, 0) AS timeouts,
    coalesce(lost, 0) AS lost, coalesce(pending, 0) AS pending,
    successes / nullif(jobs, 0)::DOUBLE AS success_rate,
    (jobs - infra_failures) / nullif(jobs, 0)::DOUBLE AS infra_availability,
    test_failures / nullif(jobs, 0)::DOUBLE AS test_failure_rate,
    queue_p50_s, queue_p90_s,
    coalesce(commits, 0) AS commits, commit_time_p95_s,
    coalesce(callbacks, 0) AS callbacks, callback_peak_per_minute
FROM repos
JOIN names USING (repo)
LEFT JOIN job_stats USING (window_days, repo)
LEFT JOIN commit_stats USING (window_days, repo)
LEFT JOIN peaks USING (window_days, repo)
ORDER BY lower(names.display), repos.window_days
