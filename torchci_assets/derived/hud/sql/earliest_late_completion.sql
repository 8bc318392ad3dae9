-- The UTC day the earliest completion of view jobs_today completed on, when before $before (the day
-- before the day built): an earlier copy of it may be in any day's partition from that one on. NULL
-- when every completion is of a job completed since $before began.
SELECT min(timezone('UTC', completed_at))::DATE
FROM jobs_today
WHERE status = 'completed' AND timezone('UTC', completed_at)::DATE < $before
