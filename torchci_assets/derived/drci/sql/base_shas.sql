-- The base sha and base ref each pull request head's webhooks carried (view we over webhook_events):
-- the estimate of the merge base when the compare API cannot be asked.
SELECT json_extract_string(payload, '$.pull_request.head.sha') AS head_sha,
       arg_max(json_extract_string(payload, '$.pull_request.base.sha'), received_at) AS base_sha,
       arg_max(json_extract_string(payload, '$.pull_request.base.ref'), received_at) AS base_ref
FROM we
WHERE event = 'pull_request'
GROUP BY 1
HAVING head_sha IS NOT NULL
