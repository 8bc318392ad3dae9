-- The base sha and base ref each pull request head's webhooks carried (view we over the
-- pr_bases extracts of webhook_events): the estimate of the merge base when the compare API
-- cannot be asked.
SELECT head_sha, arg_max(base_sha, received_at) AS base_sha, arg_max(base_ref, received_at) AS base_ref
FROM we
GROUP BY 1
HAVING head_sha IS NOT NULL
