-- The latest attempt of each downstream job on each upstream head (L2 and above: L1 cannot report),
-- with how many attempts it had. Self-reports (nightly, periodic) are not about a head we dispatched.
SELECT * EXCLUDE (rn) FROM (
    SELECT lower(repo) AS repo, level, event_type, head_sha, workflow_name, job_name, run_id, run_attempt,
           status, conclusion, queue_s, execution_s, callback_at, failure_kind,
           count(DISTINCT run_attempt) OVER (PARTITION BY lower(repo), head_sha, workflow_name, job_name) AS attempts,
           row_number() OVER (PARTITION BY lower(repo), head_sha, workflow_name, job_name
                              ORDER BY run_attempt DESC, callback_at DESC NULLS LAST, day DESC) AS rn
    FROM backend_ci
    WHERE level IN ('L2', 'L3', 'L4') AND head_sha IS NOT NULL
      AND coalesce(event_type, '') NOT IN ('nightly', 'periodic')
)
WHERE rn = 1
ORDER BY repo, head_sha, workflow_name, job_name
