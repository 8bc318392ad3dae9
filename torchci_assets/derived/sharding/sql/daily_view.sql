-- View daily over the window's test_time_daily files (view daily_files), in today's columns.
-- step: current
-- Some partition has the run columns (a mix gets NULLs in the older ones).
CREATE TEMP VIEW daily AS SELECT * FROM daily_files
-- step: summed_only
-- Every partition predates the run columns: all its rows are runs summed on their day.
CREATE TEMP VIEW daily AS
SELECT *, NULL::BIGINT AS workflow_id, NULL::INTEGER AS shard, NULL::INTEGER AS num_shards,
       NULL::BIGINT AS attempt, NULL::BOOLEAN AS clean
FROM daily_files
