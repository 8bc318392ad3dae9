-- Empty stand-ins for the job tables of the window when it has no partition of one: each step is
-- named for its table and creates view {{view}} with the columns test_jobs.sql reads.

-- step: workflow_job
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::BIGINT AS id,
       NULL::BIGINT AS run_id,
       NULL::VARCHAR AS workflow_name,
       NULL::VARCHAR AS name,
       NULL::VARCHAR AS head_sha,
       NULL::VARCHAR AS head_branch,
       NULL::VARCHAR AS status,
       NULL::VARCHAR AS conclusion,
       NULL::VARCHAR AS build_env,
       NULL::VARCHAR AS test_config,
       NULL::INTEGER AS shard,
       NULL::INTEGER AS num_shards,
       NULL::VARCHAR AS platform,
       NULL::TIMESTAMPTZ AS started_at,
       NULL::TIMESTAMPTZ AS completed_at,
       NULL::TIMESTAMPTZ AS received_at,
       NULL::DATE AS day WHERE false

-- step: job_failure
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::BIGINT AS job_id, NULL::VARCHAR AS rule, NULL::BOOLEAN AS infra, NULL::DATE AS day WHERE false

-- step: workflow_run
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT NULL::BIGINT AS id,
       NULL::VARCHAR AS name,
       NULL::VARCHAR AS event,
       NULL::TIMESTAMPTZ AS updated_at,
       NULL::DATE AS day WHERE false
