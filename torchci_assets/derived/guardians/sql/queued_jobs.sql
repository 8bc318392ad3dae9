-- Jobs waiting for a runner now, per machine (runner_machine: its first label other than GitHub's
-- default ones): how many, and the oldest wait.
-- A job's state is the highest it reached (queued < waiting < in_progress < completed).
-- A job is its id (an id belongs to one attempt): a completion written as attempt 1 on the next day,
-- from an older GitHub without run_attempt, ends the rerun's wait.
WITH latest AS (
    SELECT id, arg_max(status, status_rank(status)) AS status,
           min(created_at) AS created_at, any_value(labels) AS labels
    FROM workflow_job
    GROUP BY id
    HAVING min(created_at) >= $since  -- (the completion's own created_at may be missing, as run_attempt)
)
SELECT coalesce(runner_machine(labels), 'unlabelled') AS machine, count(*) AS jobs,
       max(epoch($now) - epoch(created_at)) AS max_wait_s
FROM latest
WHERE status IN ('queued', 'waiting')
GROUP BY ALL
ORDER BY machine
