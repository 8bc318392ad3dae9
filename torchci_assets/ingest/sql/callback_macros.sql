-- Expressions ci_result's ingest, the backends' health windows and the HUD share, so all judge a job alike.

-- step: downstream_timeout_ms
-- When a downstream job that never completed times out, as the relay's sweeper reports it
-- (cleanup_handler.py): zombie_timeout_s (the config's zombie_timeout_seconds) after its first callback
-- reached the receiver (the relay's clock, not the runner's); for rows written before that arrival was
-- kept, after its start.
CREATE OR REPLACE TEMP MACRO downstream_timeout_ms(first_callback_at, started_at, zombie_timeout_s) AS
    epoch_ms(coalesce(first_callback_at, started_at)) + zombie_timeout_s * 1000

-- step: downstream_timed_out
-- Whether the job is timed out as of as_of_ms (downstream_timeout_ms). A `completed` callback that
-- arrives later wins: the job has its real result.
CREATE OR REPLACE TEMP MACRO downstream_timed_out(status, first_callback_at, started_at, as_of_ms, zombie_timeout_s) AS
    coalesce(status <> 'completed'
             AND downstream_timeout_ms(first_callback_at, started_at, zombie_timeout_s) <= as_of_ms, false)

-- step: callback_state_rank
-- how far a callback's job got: a job's row is its furthest callback
CREATE OR REPLACE TEMP MACRO callback_state_rank(status) AS
    CASE status WHEN 'requested' THEN 0 WHEN 'pending' THEN 0 WHEN 'queued' THEN 0
                WHEN 'waiting' THEN 1 WHEN 'in_progress' THEN 2 WHEN 'completed' THEN 3 ELSE 0 END

-- step: merged_started_at
-- A merged job's start: the earliest reported by any of its rows (any_started_at), else the
-- relay's measure, completed_at - execution_time. A completed callback alone has no started_at
-- (report_callback.py sends it only with in_progress, which may have been lost or landed on
-- another day), and the relay's execution_time runs from the in_progress callback to the
-- completed one. An absurd execution time (negative, over 30 years) is ignored.
CREATE OR REPLACE TEMP MACRO merged_started_at(any_started_at, execution_s, completed_at) AS
    coalesce(any_started_at, CASE WHEN execution_s BETWEEN 0 AND 1e9
                                  THEN completed_at - to_milliseconds(CAST(round(execution_s * 1000) AS BIGINT))
                             END)

-- step: failure_kind
-- A job row's kind as of as_of_ms (see ci_results.py): none, test, infrastructure or pending.
-- A job running longer than lost_after_ms, or silent that long, is lost: infrastructure.
CREATE OR REPLACE TEMP MACRO failure_kind(status, conclusion, started_at, completed_at, callback_at,
                                          passed, failed, skipped, as_of_ms, lost_after_ms,
                                          success_conclusions) AS
    CASE
        WHEN status = 'completed' AND epoch_ms(completed_at) - epoch_ms(started_at) > lost_after_ms
            THEN 'infrastructure'
        WHEN status = 'completed' AND conclusion = 'timed_out' THEN 'infrastructure'
        WHEN status = 'completed' AND list_contains(success_conclusions, conclusion) THEN 'none'
        WHEN status = 'completed' AND coalesce(passed, 0) + coalesce(failed, 0) + coalesce(skipped, 0) = 0
            THEN 'infrastructure'
        WHEN status = 'completed' THEN 'test'
        WHEN epoch_ms(coalesce(started_at, callback_at)) + lost_after_ms <= as_of_ms
            THEN 'infrastructure'
        ELSE 'pending'
    END
