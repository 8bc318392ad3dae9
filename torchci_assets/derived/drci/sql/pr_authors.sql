-- pr -> the login of its author (lower case), from the window's pull_request webhooks of $repo
-- (view pr): the latest delivery that names one. Rows written before the lake kept authors have none.
SELECT number, lower(arg_max(author, received_at)) AS author
FROM pr
WHERE number IS NOT NULL AND author IS NOT NULL AND lower(coalesce(repo, $repo)) = lower($repo)
GROUP BY number
