-- Upstream check runs created in progress before $cutoff that nothing completes, or whose create was
-- left in doubt then (claimed, and no answer recorded under the claim's attempt: GitHub timed out or
-- failed on every try, and may have created it; when it did not, the job still started and never
-- completed, so a `timed_out` check run is what the pull request would have shown anyway): no completed check
-- run of the same name, run and attempt was ever tried (created, rehearsed in dry run, or claimed with
-- its answer lost: GitHub may show the job's real conclusion, which a `timed_out` would cover; a
-- withdrawn claim, which sent nothing, a sweep's own `timed_out` claim left in doubt, which the next
-- sweep looks up and sends when GitHub lacks it, and a callback's completion GitHub refused or failed
-- (a conclusion it does not take: nothing was created) do not count, but the sweep's own refused
-- `timed_out` does, so it is not sent again every ten minutes) nor decided
-- against by an earlier sweep (`not_wanted`: its repository left L3/L4), and no newer
-- check run of the name on the head supersedes it (GitHub shows the newest of a name: a re-run's or a
-- later dispatch's). One row per check run, oldest first. Its clock starts when the receiver took
-- the callback it answers (heard_at), as the relay's sweeper's does, or at its creation when the
-- ledger does not say (rows written before it did) or says later (clocks apart).
WITH runs AS (
    SELECT lower(key) AS key, sha, downstream_repo, pr_number, name, delivery_id, status, conclusion, outcome,
           attempted_at, attempt_id, heard_at
    FROM actions
    WHERE action = 'check_run'
),
answered AS (
    SELECT DISTINCT attempt_id FROM runs WHERE outcome <> 'claimed' AND attempt_id IS NOT NULL
),
refused AS (
    SELECT DISTINCT attempt_id FROM runs
    WHERE status = 'completed' AND outcome IN ('refused', 'failed') AND coalesce(conclusion, '') <> 'timed_out'
      AND attempt_id IS NOT NULL
),
opened AS (
    SELECT sha, key, any_value(downstream_repo) AS downstream_repo, any_value(pr_number) AS pr_number,
           any_value(name) AS name, any_value(delivery_id) AS delivery_id, min(attempted_at) AS opened_at,
           least(coalesce(min(heard_at), min(attempted_at)), min(attempted_at)) AS clock_from
    FROM runs
    WHERE status = 'in_progress'
      AND (outcome = 'ok'
           OR (outcome = 'claimed' AND attempt_id IS NOT NULL
               AND attempt_id NOT IN (SELECT attempt_id FROM answered)))
    GROUP BY sha, key
)
SELECT o.sha, o.key, o.downstream_repo, o.pr_number, o.name, o.delivery_id, o.opened_at
FROM opened AS o
WHERE o.clock_from < $cutoff
  AND NOT EXISTS (
      SELECT 1 FROM runs AS c
      WHERE c.sha = o.sha AND c.status = 'completed' AND coalesce(c.outcome, '') <> 'withdrawn'
        AND NOT (c.outcome IN ('refused', 'failed') AND coalesce(c.conclusion, '') <> 'timed_out')
        AND coalesce(c.attempt_id, '') NOT IN (SELECT attempt_id FROM refused)
        AND NOT (c.outcome = 'claimed' AND c.conclusion = 'timed_out'
                 AND coalesce(c.attempt_id, '') NOT IN (SELECT attempt_id FROM answered))
        AND c.key = regexp_replace(o.key, '\|in_progress$', '|completed'))
  AND NOT EXISTS (
      SELECT 1 FROM runs AS n
      WHERE n.sha = o.sha AND lower(n.name) = lower(o.name) AND n.outcome = 'ok' AND n.key <> o.key
        AND n.attempted_at > o.opened_at)
ORDER BY o.clock_from, o.key
