-- The workflow run attempts of the failing jobs (temp table job_runs(run_id, run_attempt)) as the lake heard
-- them (view wr over workflow_run): each attempt's highest status, whatever order its deliveries came in (a
-- run heard `completed` stays completed), and its end: the updated_at of its first `completed` delivery. A
-- row of a partition written without run_attempt counts for every attempt of its run.
SELECT j.run_id, j.run_attempt,
       arg_max(wr.status, status_rank(wr.status)) AS status,
       min(wr.updated_at) FILTER (WHERE wr.status = 'completed') AS ended_at
FROM job_runs j JOIN wr ON wr.id = j.run_id AND coalesce(wr.run_attempt, j.run_attempt) = j.run_attempt
WHERE wr.status IS NOT NULL
GROUP BY j.run_id, j.run_attempt
