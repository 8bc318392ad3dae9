-- The run attempts GitHub has already answered for: rest_runs, those of which the lake holds a
-- `rest` record (`rest-workflow_run-<id>-<attempt>-<action>`, in view `deliveries`, the window's
-- webhook_events), which a gap repair or `torchci backfill` writes when it reads the run; and
-- answered_runs, those it read completed (action `completed`), with every job GitHub listed. A
-- completed attempt's jobs do not change: asking again could only find the same answer, so gap
-- repair asks once. One GitHub showed still running without jobs waits its turn (sql/jobless_runs.sql).

-- step: rest_runs
CREATE OR REPLACE TEMP TABLE rest_runs AS
SELECT DISTINCT TRY_CAST(string_split(delivery_id, '-')[3] AS BIGINT) AS run_id,
                TRY_CAST(string_split(delivery_id, '-')[4] AS BIGINT) AS run_attempt,
                string_split(delivery_id, '-')[5] AS action
FROM deliveries
WHERE event = 'workflow_run' AND delivery_id LIKE 'rest-workflow_run-%'

-- step: no_rest_runs
-- (no webhook_events in the window: nothing was answered)
CREATE OR REPLACE TEMP TABLE rest_runs (run_id BIGINT, run_attempt BIGINT, action VARCHAR)

-- step: answered
CREATE OR REPLACE TEMP TABLE answered_runs AS
SELECT DISTINCT run_id, run_attempt FROM rest_runs WHERE action = 'completed'
