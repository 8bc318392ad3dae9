-- The failed jobs of one workflow_job file (view src), with their conclusion: main's failures near a
-- merge base are told apart by it (a cancelled job is the same failure only as another cancelled one).
SELECT id, run_id, run_attempt, head_sha, name, conclusion
FROM src
WHERE conclusion IN ('failure', 'timed_out', 'cancelled', 'startup_failure')
