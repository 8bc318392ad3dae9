-- The jobs the lake has heard of in the run attempts that have a stale job ($run_ids): GitHub's
-- answer for such an attempt lists all its jobs, and the ones not among these had every delivery
-- lost (they ran inside the same outage), so the repair writes them too.
SELECT DISTINCT repo, run_id, run_attempt, id
FROM workflow_job
WHERE id IS NOT NULL AND repo IS NOT NULL AND run_id IN (SELECT unnest($run_ids::BIGINT[]))
