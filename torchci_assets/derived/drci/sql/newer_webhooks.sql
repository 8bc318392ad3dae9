-- Each pull request's head and state as its latest pull_request webhook received after the partition says
-- (view nw: the later days' webhooks).
SELECT number AS pr, arg_max(head_sha, received_at) AS head_sha, arg_max(state, received_at) AS pr_state
FROM nw
WHERE number IS NOT NULL AND head_sha IS NOT NULL AND lower(coalesce(repo, $repo)) = lower($repo)
GROUP BY number
