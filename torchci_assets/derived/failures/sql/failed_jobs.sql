-- The jobs of the day's logs (table wanted) at their highest state in the window (view j over
-- workflow_job): run attempt, name, and the conclusion once completed.
SELECT id,
       arg_max(run_attempt, (rank, received_at, day)) FILTER (WHERE run_attempt IS NOT NULL),
       arg_max(name, (rank, received_at, day)) FILTER (WHERE name IS NOT NULL),
       arg_max(conclusion, (rank, received_at, day)) FILTER (WHERE status = 'completed')
FROM (SELECT *, status_rank(status) AS rank
      FROM j SEMI JOIN wanted USING (id))
GROUP BY id
