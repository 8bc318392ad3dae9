-- Per pull request, the body hash and comment id of its latest successful post (view lp over drci_posts).
SELECT pr, body_sha256, comment_id
FROM lp
WHERE action IN ('created', 'edited', 'unchanged')
QUALIFY row_number() OVER (PARTITION BY pr ORDER BY "at" DESC, comment_id DESC) = 1
