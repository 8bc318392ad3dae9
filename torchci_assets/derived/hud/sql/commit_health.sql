-- commit_health's rows: one per commit and job group, newest commit first (after commit_groups.sql).
SELECT h.sha, h.pushed_at, h.pushed_at::DATE AS pushed_day, $as_of AS as_of,
       g.workflow, g.job_group, g.blocking, g.unstable, g.attempts, g.jobs, g.state, g.failure_class, g.failing_jobs,
       g.job_id, g.run_id, g.run_attempt, g.job_name, g.duration_s, g.infra_reason, g.failure_line,
       g.failing_tests, g.failing_test_count,
       c.conclusion, c.blocking_groups, s.time_to_signal_s, s.signal_at, g.cancelled,
       g.failing_kinds, g.failed_attempt
FROM heads h JOIN commit_conclusion c USING (sha)
LEFT JOIN group_rows g USING (sha)
LEFT JOIN signal s USING (sha)
ORDER BY h.pushed_at DESC, h.sha, g.workflow, g.job_group
