-- What the finished GitHub jobs (success, skipped) of each pull request's latest head in the day's
-- pr_jobs (view pj) tell, without a row each: the head, the first start among them (when CI saw the
-- head), how many, and the latest end of each run's (a run's end when its own delivery is late).
WITH runs AS (
    SELECT number, run_id, any_value(head_sha) AS head_sha, any_value(pr_state) AS pr_state,
           any_value(head_ref) AS head_ref, any_value(base_ref) AS base_ref, any_value(pr_updated_at) AS pr_updated_at,
           any_value(labels) AS labels, min(started_at) AS first_start, max(completed_at) AS ended, count(*) AS jobs
    FROM pj
    WHERE source = 'github' AND state IN ('success', 'skipped')
    GROUP BY number, run_id
)
SELECT number, any_value(head_sha) AS head_sha, any_value(pr_state) AS pr_state, any_value(head_ref) AS head_ref,
       any_value(base_ref) AS base_ref, any_value(pr_updated_at) AS pr_updated_at, any_value(labels) AS labels,
       min(first_start) AS first_start, sum(jobs)::BIGINT AS jobs,
       list({'run_id': run_id, 'ended': ended}) FILTER (WHERE run_id IS NOT NULL AND ended IS NOT NULL) AS run_ends
FROM runs
GROUP BY number
ORDER BY number
