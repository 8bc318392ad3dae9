-- The commits pushed to $branch (the main branch) of $upstream_repo in the window (w_push), up to
-- $as_of, each with its first push. A push event of an older GitHub may lack the repository: kept.
CREATE TEMP TABLE heads AS
SELECT after AS sha, min(received_at) AS pushed_at FROM w_push
WHERE ref = $branch AND (repo IS NULL OR lower(repo) = lower($upstream_repo))
  AND NOT coalesce(deleted, false) AND after IS NOT NULL AND after <> '0000000000000000000000000000000000000000'
  AND received_at <= $as_of
GROUP BY after
