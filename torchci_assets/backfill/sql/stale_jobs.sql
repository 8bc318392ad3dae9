-- Jobs whose highest known state, over the days read, is not `completed` and was last heard of
-- before $cutoff: a delivery GitHub never made (or made to a collector that was down). Not those of
-- an attempt GitHub already answered for once it was completed (answered_runs): a job its completed
-- run still shows unfinished stays so, and asking every pass would only get that answer again.
--
-- `due`: whether this pass asks about the job's run attempt. It does when one of its stale jobs is
-- a certain gap: its attempt was heard completing (completed_runs), or GitHub never showed the job
-- in the state the lake has (shown_jobs: the first lookup, at the limit). Otherwise every stale job
-- of the attempt was shown so by GitHub, still running or queued: the attempt is asked again when
-- its age (from its oldest stale job's last delivery to the pass's tick $tick) reaches the limit
-- times a power of $growth, the pass whose $every_s seconds up to its tick hold that moment
-- (backoff_due, sql/known_states.sql). Due attempts first, so that $max_jobs never leaves one out
-- for jobs that wait. `run_completed`: the attempt was heard completing, so its run is read before
-- its jobs (gaps._read_attempt).
WITH ranked AS (
    SELECT id, run_attempt, run_id, repo, status, received_at,
           status_rank(status) AS rank
    FROM workflow_job
    WHERE id IS NOT NULL AND run_id IS NOT NULL AND repo IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM answered_runs AS a
                      WHERE a.run_id = workflow_job.run_id AND a.run_attempt = workflow_job.run_attempt)
),
stale AS (
    SELECT repo, run_id, run_attempt, id, arg_max(status, rank) AS status, max(received_at) AS last_heard
    FROM ranked
    GROUP BY repo, run_id, run_attempt, id
    HAVING max(rank) < 4 AND max(received_at) < $cutoff
),
heard AS (
    SELECT s.*,
           EXISTS (SELECT 1 FROM completed_runs AS c
                   WHERE c.run_id = s.run_id AND c.run_attempt = s.run_attempt) AS run_completed
    FROM stale AS s
),
judged AS (
    SELECT s.*,
           run_completed
           OR NOT EXISTS (SELECT 1 FROM shown_jobs AS g
                          WHERE g.id = s.id AND g.run_attempt = s.run_attempt AND g.status = s.status) AS certain,
           epoch($tick::TIMESTAMPTZ) - epoch(min(s.last_heard) OVER attempt) AS age
    FROM heard AS s
    WINDOW attempt AS (PARTITION BY s.repo, s.run_id, s.run_attempt)
)
SELECT repo, run_id, run_attempt, id, status, last_heard, run_completed,
       bool_or(certain) OVER attempt OR backoff_due(age, $every_s, $limit_s, $growth) AS due
FROM judged
WINDOW attempt AS (PARTITION BY repo, run_id, run_attempt)
ORDER BY due DESC, repo, run_id, run_attempt, id
LIMIT $max_jobs
