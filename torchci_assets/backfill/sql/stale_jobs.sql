-- Jobs whose highest known state, over the days read, is not `completed` and was last heard of
-- before $cutoff: a delivery GitHub never made (or made to a collector that was down). Not those of
-- an attempt GitHub already answered for once it was completed (answered_runs): a job its completed
-- run still shows unfinished stays so, and asking every pass would only get that answer again.
WITH ranked AS (
    SELECT id, run_attempt, run_id, repo, status, received_at,
           CASE status WHEN 'completed' THEN 4 WHEN 'in_progress' THEN 3 WHEN 'waiting' THEN 2 ELSE 1 END AS rank
    FROM workflow_job
    WHERE id IS NOT NULL AND run_id IS NOT NULL AND repo IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM answered_runs AS a
                      WHERE a.run_id = workflow_job.run_id AND a.run_attempt = workflow_job.run_attempt)
)
SELECT repo, run_id, run_attempt, id, arg_max(status, rank) AS status, max(received_at) AS last_heard
FROM ranked
GROUP BY repo, run_id, run_attempt, id
HAVING max(rank) < 4 AND max(received_at) < $cutoff
ORDER BY repo, run_id, run_attempt, id
LIMIT $max_jobs
