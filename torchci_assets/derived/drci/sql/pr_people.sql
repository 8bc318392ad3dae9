-- pr -> the login of its author (lower case) and the issues its body says it closes, from the
-- pull_request webhooks of $repo (view people): each from the latest delivery that has it (arg_max
-- skips NULLs: a body is edited; rows written before the lake kept these columns have neither).
SELECT number, lower(arg_max(author, received_at)) AS author, arg_max(closes, received_at) AS closes
FROM people
WHERE number IS NOT NULL AND lower(coalesce(repo, $repo)) = lower($repo)
GROUP BY number
