-- Every attempt of every job group on main's commits in the window, with when it started: the
-- HUD's job identities and attempts (hud/sql/job_identities.sql, commit_groups.sql step
-- `attempts`) over the lake's job tables, for the commits the guardians judge. commit_health keeps
-- only each group's latest attempt; the autorevert's infrastructure check needs the start of each,
-- and its flaky rule the failing tests of each.

-- step: heads
-- the commits to read: those of the main_signals rows ($shas)
CREATE OR REPLACE TEMP TABLE heads AS SELECT DISTINCT unnest($shas::VARCHAR[]) AS sha

-- step: attempt_rows
-- an attempt starts when its first job does, a job counting from the later of its start and its
-- creation (a job not started yet: its creation), as upstream's signal extraction times its events
SELECT a.sha, a.workflow, a.job_group, a.run_id, a.run_attempt, a.has_failure, a.cancelled, a.has_pending,
       a.all_skipped, a.failure_class, a.failing_tests, a.failing_test_count, s.started_at
FROM attempts a
JOIN (SELECT sha, workflow, job_group, run_id, run_attempt,
             min(greatest(coalesce(started_at, created_at), created_at)) AS started_at
      FROM identities GROUP BY ALL) s USING (sha, workflow, job_group, run_id, run_attempt)
ORDER BY a.sha, a.job_group, s.started_at, a.run_id, a.run_attempt
