-- Each pull request's head and state in a newer drci_comments partition (view nh).
SELECT DISTINCT pr, head_sha, coalesce(pr_state, 'open') AS pr_state FROM nh
