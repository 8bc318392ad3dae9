-- The run attempts GitHub has already answered for once they were completed: those whose completion
-- the lake holds as a `rest` record (`rest-workflow_run-<id>-<attempt>-completed`, in view
-- `deliveries`, the window's webhook_events), which a gap repair or `torchci backfill` writes, with
-- every job GitHub listed, when it reads an attempt GitHub shows completed. A completed attempt's
-- jobs do not change: asking again could only find the same answer, so gap repair asks once.

-- step: answered
CREATE OR REPLACE TEMP TABLE answered_runs AS
SELECT DISTINCT TRY_CAST(string_split(delivery_id, '-')[3] AS BIGINT) AS run_id,
                TRY_CAST(string_split(delivery_id, '-')[4] AS BIGINT) AS run_attempt
FROM deliveries
WHERE event = 'workflow_run' AND delivery_id LIKE 'rest-workflow_run-%-completed'

-- step: none
-- (no webhook_events in the window: nothing was answered)
CREATE OR REPLACE TEMP TABLE answered_runs (run_id BIGINT, run_attempt BIGINT)
