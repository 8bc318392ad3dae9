-- Run attempts that completed failing ($failing) though every job the lake heard of for them
-- completed without failing: the failing job's deliveries were all lost, and without it the run
-- looks green on the HUD and in Dr. CI. Asked once, like a jobless run (answered_runs), since a
-- completed attempt's jobs no longer change. An attempt's age runs from its request, as in
-- sql/jobless_runs.sql: the run's created_at for the first; a re-run's created_at is the first
-- attempt's, hours before, which would ask before its own jobs' deliveries could land, so its age
-- runs from the earliest update the lake holds of it (workflow_run keeps a day's last: for a re-run
-- completed the day it was requested, its completion). Jobs are looked for in `jobs_seen` (the
-- window and the day before it); newest first, under $max_runs.
WITH r AS (
    SELECT repo, id, run_attempt, arg_max(status, updated_at) AS status,
           arg_max(conclusion, updated_at) AS conclusion,
           CASE WHEN run_attempt = 1 THEN min(created_at)
                ELSE coalesce(min(updated_at), min(created_at)) END AS requested_at
    FROM workflow_run WHERE repo IS NOT NULL GROUP BY repo, id, run_attempt
),
jobs AS (
    SELECT run_id, run_attempt,
           bool_and(done) AS all_done, bool_or(coalesce(list_contains($failing, conclusion), false)) AS any_failed
    FROM (SELECT run_id, run_attempt, id, bool_or(status = 'completed') AS done,
                 arg_max(conclusion, conclusion IS NOT NULL) AS conclusion
          FROM jobs_seen WHERE id IS NOT NULL GROUP BY run_id, run_attempt, id)
    GROUP BY run_id, run_attempt
)
SELECT r.repo, r.id AS run_id, r.run_attempt
FROM r JOIN jobs j ON j.run_id = r.id AND j.run_attempt = r.run_attempt
WHERE r.status = 'completed' AND list_contains($failing, r.conclusion) AND r.requested_at < $cutoff
  AND j.all_done AND NOT j.any_failed
  AND NOT EXISTS (SELECT 1 FROM answered_runs AS a WHERE a.run_id = r.id AND a.run_attempt = r.run_attempt)
ORDER BY r.requested_at DESC, r.repo, r.id DESC, r.run_attempt DESC
LIMIT $max_runs
