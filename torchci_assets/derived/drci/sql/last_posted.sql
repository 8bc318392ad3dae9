-- Per pull request, the body hash of its latest successful post (view lp over drci_posts).
SELECT pr, arg_max(body_sha256, "at") AS body_sha256
FROM lp
WHERE action IN ('created', 'edited', 'unchanged')
GROUP BY pr
