-- Run attempts the lake knows, requested before $cutoff, of which not one job was ever heard of:
-- their workflow_job deliveries were lost. A run that ended without starting a job (skipped,
-- startup_failure, action_required) has none to find. One cancelled while pending may have had
-- jobs (queued, or waiting for an approval) or none (a newer run of its concurrency group replaced
-- it before any was created): only GitHub knows, so it is asked once after the run completed, and
-- then left (answered_runs), like any completed attempt GitHub listed no job for. One GitHub showed
-- still without jobs while it waits (rest_runs: for a runner, its concurrency group) is not asked
-- on every pass until it starts: again each time its age has grown by $growth (backoff_due,
-- sql/known_states.sql), as a job GitHub showed running. An attempt's age runs from its request:
-- the run's created_at for the first; for a re-run (created_at stays the first attempt's, hours
-- before) the earliest update the lake holds of it, which is later than its request (workflow_run
-- keeps a day's last state), so a re-run is asked about late, never early. Newest first:
-- under $max_runs a recent loss is not crowded out by old ones. Jobs are looked for in `jobs_seen`:
-- the window's workflow_job and the day before it, where a run crossing midnight may have left them all.
SELECT r.repo, r.id AS run_id, r.run_attempt
FROM (SELECT repo, id, run_attempt, arg_max(status, updated_at) AS status,
             arg_max(conclusion, updated_at) AS conclusion,
             CASE WHEN run_attempt = 1 THEN min(created_at)
                  ELSE coalesce(min(updated_at), min(created_at)) END AS requested_at
      FROM workflow_run WHERE repo IS NOT NULL GROUP BY repo, id, run_attempt) AS r
WHERE r.requested_at < $cutoff
  AND coalesce(r.conclusion, '') NOT IN ('skipped', 'startup_failure', 'action_required')
  AND NOT EXISTS (SELECT 1 FROM jobs_seen AS j WHERE j.run_id = r.id AND j.run_attempt = r.run_attempt)
  AND NOT EXISTS (SELECT 1 FROM answered_runs AS a WHERE a.run_id = r.id AND a.run_attempt = r.run_attempt)
  AND (NOT EXISTS (SELECT 1 FROM rest_runs AS s WHERE s.run_id = r.id AND s.run_attempt = r.run_attempt)
       OR backoff_due(epoch($tick::TIMESTAMPTZ) - epoch(r.requested_at), $every_s, $limit_s, $growth))
ORDER BY r.requested_at DESC, r.repo, r.id DESC, r.run_attempt DESC
LIMIT $max_runs
