-- View wjob over workflow_job (view wjob_all): with its repository, or NULL where older
-- partitions have no repo column.

-- step: with_repo
CREATE TEMP VIEW wjob AS SELECT id, run_id, name, completed_at, repo FROM wjob_all

-- step: without_repo
CREATE TEMP VIEW wjob AS SELECT id, run_id, name, completed_at, NULL::VARCHAR AS repo FROM wjob_all
