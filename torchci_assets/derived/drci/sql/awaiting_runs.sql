-- The workflow runs of the heads (temp table head_shas(sha)) that wait for approval: each workflow's
-- newest run on the head (by run id, as PyTorch's Dr. CI keeps a workflow's newest run), its latest state
-- (view wr over workflow_run) a conclusion of $conclusions, and no job of it in pr_jobs (view pj): once
-- approved, its jobs speak for it. A workflow is its id (two workflow files may share a name); a run
-- read from a partition written before workflow_id was kept has none, and is known by its name.
WITH runs AS (
    SELECT head_sha, id AS run_id, any_value(name) AS name, max(workflow_id) AS workflow_id,
           arg_max(coalesce(conclusion, ''), (updated_at, status_rank(status))) AS conclusion
    FROM wr
    WHERE head_sha IN (SELECT sha FROM head_shas) AND lower(coalesce(repo, $repo)) = lower($repo)
    GROUP BY head_sha, id
),
newest AS (
    SELECT head_sha, workflow_id, CASE WHEN workflow_id IS NULL THEN coalesce(name, '') END AS workflow_name,
           max(run_id) AS run_id
    FROM runs GROUP BY ALL
)
SELECT r.head_sha, r.run_id, r.name, r.conclusion
FROM runs r JOIN newest n USING (head_sha, run_id)
WHERE list_contains($conclusions, r.conclusion)
  AND r.run_id NOT IN (SELECT run_id FROM pj WHERE run_id IS NOT NULL)
ORDER BY r.head_sha, r.name, r.run_id
