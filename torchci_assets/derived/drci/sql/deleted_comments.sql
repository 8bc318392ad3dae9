-- The ids of the comments GitHub says were deleted, from one webhook_events file's issue_comment
-- deliveries (view src): a Dr. CI comment a maintainer deleted is posted again.
SELECT TRY_CAST(json_extract(payload, '$.comment.id') AS BIGINT) AS comment_id, received_at
FROM src
WHERE event = 'issue_comment' AND action = 'deleted'
