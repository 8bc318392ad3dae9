-- Which of the ledger's comments (temp table posted_comments(comment_id)) were deleted on GitHub
-- (view dw over the deleted_comments extracts of webhook_events).
SELECT DISTINCT comment_id FROM dw WHERE comment_id IN (SELECT comment_id FROM posted_comments)
