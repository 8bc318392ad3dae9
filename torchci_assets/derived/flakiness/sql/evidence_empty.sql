-- Empty stand-ins for the tables evidence.py reads, when the window has no partition of one:
-- each step is named for its table and creates view {{view}} with the columns read.

-- step: flaky_test_platforms
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::VARCHAR AS file, NULL::VARCHAR AS classname, NULL::VARCHAR AS name,
       NULL::VARCHAR AS platform, 0::BIGINT AS runs, 0::BIGINT AS failures,
       0::BIGINT AS flake_events, 0::BIGINT AS rerun_passes, 0::BIGINT AS same_commit_pairs,
       0::BIGINT AS flips, NULL::TIMESTAMPTZ AS last_main_flake_at, 0::BIGINT AS main_runs,
       0::BIGINT AS main_failures, 0::BIGINT AS main_flake_events, 0::BIGINT AS main_rerun_passes,
       0::BIGINT AS main_same_commit_pairs,
       NULL::DATE AS window_start, NULL::DATE AS window_end
WHERE false

-- step: test_sha_outcomes
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::VARCHAR AS classname, NULL::VARCHAR AS name, NULL::VARCHAR AS branch_class,
       NULL::VARCHAR AS head_sha, []::BIGINT[] AS failing_job_ids, NULL::TIMESTAMPTZ AS last_at
WHERE false

-- step: test_jobs
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::BIGINT AS job_id, NULL::BIGINT AS workflow_id, NULL::VARCHAR AS job_name,
       NULL::TIMESTAMPTZ AS job_completed_at
WHERE false

-- step: workflow_job
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::BIGINT AS id, NULL::BIGINT AS run_id, NULL::VARCHAR AS repo, NULL::VARCHAR AS name,
       NULL::TIMESTAMPTZ AS completed_at
WHERE false
