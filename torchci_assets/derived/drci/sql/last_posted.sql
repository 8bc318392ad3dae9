-- Per pull request, the action, body hash, comment id, node id and time of its latest successful post (view lp over
-- drci_posts), or of the latest look that found the comment showing it (`verified`); a `raced` post (another
-- run posted at once) is one too, and wins a tie: its body is not vouched for.
SELECT pr, action, body_sha256, comment_id, "at", node_id
FROM lp
WHERE action IN ('created', 'edited', 'unchanged', 'raced', 'verified')
QUALIFY row_number() OVER (PARTITION BY pr ORDER BY "at" DESC, (action = 'raced') DESC, comment_id DESC) = 1
