-- One summary per pull request, most recently updated first, up to $limit. A cancelled job is
-- counted apart, not as new, as Dr. CI lists it (to retry).
SELECT number, any_value(head_sha) AS head_sha, any_value(pr_state) AS pr_state,
       any_value(merged) AS merged, any_value(head_ref) AS head_ref, any_value(base_ref) AS base_ref,
       any_value(labels) AS labels, max(pr_updated_at) AS pr_updated_at,
       count(*) FILTER (WHERE source = 'github') AS jobs,
       count(*) FILTER (WHERE state = 'failure' AND cancelled) AS cancelled,
       count(*) FILTER (WHERE state = 'failure' AND failure_class = 'new' AND NOT coalesce(cancelled, false)) AS new,
       count(*) FILTER (WHERE state = 'failure' AND failure_class = 'broken_on_main') AS broken_on_main,
       count(*) FILTER (WHERE state = 'failure' AND failure_class = 'known_flaky') AS known_flaky,
       count(*) FILTER (WHERE state = 'failure' AND failure_class = 'infra') AS infra,
       count(*) FILTER (WHERE state = 'pending') AS pending
FROM newest_pr_jobs GROUP BY number ORDER BY pr_updated_at DESC, number DESC LIMIT $limit
