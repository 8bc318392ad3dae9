-- The head, base sha and base ref each pull_request webhook of one webhook_events file (view src)
-- carried, with when it was received: the merge base estimate's input.
SELECT json_extract_string(payload, '$.pull_request.head.sha') AS head_sha,
       json_extract_string(payload, '$.pull_request.base.sha') AS base_sha,
       json_extract_string(payload, '$.pull_request.base.ref') AS base_ref,
       received_at
FROM src
WHERE event = 'pull_request'
