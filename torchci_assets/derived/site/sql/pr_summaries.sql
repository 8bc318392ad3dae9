-- One summary per pull request of newest_pr_jobs, most recently updated first: its GitHub jobs and how
-- many of them are of each kind (pr_rows.sql), as its page and Dr. CI count them. The downstream
-- backends' rows have their own section on the page: counted here, a backend's failure would look
-- like one of the pull request's jobs.
SELECT number, any_value(head_sha) AS head_sha, any_value(pr_state) AS pr_state,
       any_value(merged) AS merged, any_value(head_ref) AS head_ref, any_value(base_ref) AS base_ref,
       any_value(labels) AS labels, max(pr_updated_at) AS pr_updated_at,
       count(*) FILTER (WHERE source = 'github') AS jobs,
       count(*) FILTER (WHERE source = 'github' AND kind = 'new') AS new,
       count(*) FILTER (WHERE source = 'github' AND kind = 'broken_on_main') AS broken_on_main,
       count(*) FILTER (WHERE source = 'github' AND kind = 'known_flaky') AS known_flaky,
       count(*) FILTER (WHERE source = 'github' AND kind = 'infra') AS infra,
       count(*) FILTER (WHERE source = 'github' AND kind = 'unstable') AS unstable,
       count(*) FILTER (WHERE source = 'github' AND kind = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE source = 'github' AND kind = 'pending') AS pending
FROM pr_rows GROUP BY number ORDER BY pr_updated_at DESC, number DESC
