-- Upstream check runs created in progress before $cutoff that nothing completes: no completed check
-- run of the same name, run and attempt was ever tried (created, refused, rehearsed in dry run,
-- failed, or claimed with its answer lost: GitHub may show the job's real conclusion, which a
-- `timed_out` would cover; only a withdrawn claim, which sent nothing, does not count) nor decided
-- against by an earlier sweep (`not_wanted`: its repository left L3/L4), and no newer
-- check run of the name on the head supersedes it (GitHub shows the newest of a name: a re-run's or a
-- later dispatch's). One row per check run, oldest first.
WITH runs AS (
    SELECT lower(key) AS key, sha, downstream_repo, pr_number, name, delivery_id, status, outcome, attempted_at
    FROM relay_actions
    WHERE action = 'check_run'
),
opened AS (
    SELECT sha, key, any_value(downstream_repo) AS downstream_repo, any_value(pr_number) AS pr_number,
           any_value(name) AS name, any_value(delivery_id) AS delivery_id, min(attempted_at) AS opened_at
    FROM runs
    WHERE status = 'in_progress' AND outcome = 'ok'
    GROUP BY sha, key
)
SELECT o.sha, o.key, o.downstream_repo, o.pr_number, o.name, o.delivery_id, o.opened_at
FROM opened AS o
WHERE o.opened_at < $cutoff
  AND NOT EXISTS (
      SELECT 1 FROM runs AS c
      WHERE c.sha = o.sha AND c.status = 'completed' AND coalesce(c.outcome, '') <> 'withdrawn'
        AND c.key = regexp_replace(o.key, '\|in_progress$', '|completed'))
  AND NOT EXISTS (
      SELECT 1 FROM runs AS n
      WHERE n.sha = o.sha AND lower(n.name) = lower(o.name) AND n.outcome = 'ok' AND n.key <> o.key
        AND n.attempted_at > o.opened_at)
ORDER BY o.opened_at, o.key
