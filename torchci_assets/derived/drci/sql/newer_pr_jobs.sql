-- Each pull request's head and state in a newer pr_jobs partition (view nh).
SELECT DISTINCT number AS pr, head_sha, coalesce(pr_state, 'open') AS pr_state FROM nh
