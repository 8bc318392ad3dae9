-- The pull requests of $upstream_repo seen in the window (w_pr) up to $as_of, each with its latest
-- fields, and their heads (temp table heads, which job_identities.sql reads).

-- step: prs
CREATE TEMP TABLE prs AS
SELECT number,
       arg_max(head_sha, latest) FILTER (WHERE head_sha IS NOT NULL) AS head_sha,
       arg_max(state, latest) FILTER (WHERE state IS NOT NULL) AS state,
       arg_max(merged, latest) FILTER (WHERE merged IS NOT NULL) AS merged,
       arg_max(head_ref, latest) FILTER (WHERE head_ref IS NOT NULL) AS head_ref,
       arg_max(base_ref, latest) FILTER (WHERE base_ref IS NOT NULL) AS base_ref,
       arg_max(labels, latest) FILTER (WHERE labels IS NOT NULL) AS labels,
       max(coalesce(updated_at, received_at)) AS pr_updated_at
FROM (SELECT *, (coalesce(updated_at, received_at), received_at) AS latest FROM w_pr
      WHERE (repo IS NULL OR lower(repo) = lower($upstream_repo)) AND number IS NOT NULL
        AND received_at <= $as_of)
GROUP BY number

-- step: heads
CREATE TEMP TABLE heads AS SELECT DISTINCT head_sha AS sha FROM prs WHERE head_sha IS NOT NULL
