-- Open pull requests whose latest head has no job at all in pr_jobs (view pj), from the
-- pull_request webhooks of the window (view people, from day $since on): their jobs' deliveries may
-- all have been lost.
WITH latest AS (
    SELECT number, arg_max(head_sha, received_at) AS head_sha, arg_max(state, received_at) AS state,
           arg_max(head_ref, received_at) AS head_ref, arg_max(base_ref, received_at) AS base_ref,
           arg_max(labels, received_at) FILTER (WHERE labels IS NOT NULL) AS labels, max(received_at) AS updated_at
    FROM people
    WHERE day >= $since AND number IS NOT NULL AND head_sha IS NOT NULL AND lower(coalesce(repo, $repo)) = lower($repo)
    GROUP BY number
)
SELECT * FROM latest
WHERE state = 'open' AND number NOT IN (SELECT number FROM pj WHERE source IS NOT NULL)
ORDER BY number
