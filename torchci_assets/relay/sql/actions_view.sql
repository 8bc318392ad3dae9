-- The relay_actions ledger as sql/zombie_check_runs.sql reads it: parts written before `heard_at`
-- was kept have none, and a window of only such parts has no such column at all.

-- step: with_heard_at
CREATE OR REPLACE TEMP VIEW actions AS SELECT * FROM relay_actions

-- step: without_heard_at
CREATE OR REPLACE TEMP VIEW actions AS SELECT *, NULL::TIMESTAMPTZ AS heard_at FROM relay_actions
