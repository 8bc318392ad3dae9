-- Per backend and window (the days the level criteria look back over, ending at $day), from the
-- judged jobs (backend_jobs.sql): completed jobs, among them those the relay timed out for want of a
-- `completed` callback, the share that succeeded, and the relay's queue time (dispatch -> first
-- in_progress). Nightly and periodic self-reports ($self_report_events) are left out, as the levels'
-- criteria (backend_health.sql) leave them out: the page shows the figures the backend is judged on.
WITH windows AS (SELECT unnest($windows::INTEGER[]) AS window_days)
SELECT c.repo, w.window_days,
       count(*) FILTER (WHERE c.status = 'completed') AS completed,
       count(*) FILTER (WHERE c.timed_out) AS timed_out,
       avg(CASE WHEN c.conclusion IN ('success', 'neutral', 'skipped') THEN 1.0 ELSE 0.0 END)
           FILTER (WHERE c.status = 'completed') AS success_rate,
       quantile_cont(c.queue_s, 0.5) AS queue_p50_s,
       quantile_cont(c.queue_s, 0.9) AS queue_p90_s
FROM backend_judged c CROSS JOIN windows w
WHERE c.day > $day::DATE - w.window_days AND NOT list_contains($self_report_events, coalesce(c.event_type, ''))
GROUP BY ALL
ORDER BY c.repo, w.window_days
