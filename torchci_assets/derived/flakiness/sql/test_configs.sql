-- The test configurations of a `Platforms:` line that a job's name puts the job in. PyTorch's flaky
-- bot (test-infra utils.ts getPlatformsAffected) reads them off the name, case-sensitive: a job
-- whose name includes "dynamo" or "inductor" is such a job, and counts for no OS (job_configs, of a
-- job's build_env and test_config, or its whole name). PyTorch's runner skips a test listed for
-- dynamo where TEST_WITH_TORCHDYNAMO holds, which TEST_WITH_TORCHINDUCTOR implies: in inductor
-- jobs too (runner_configs). Macros, so the verdict and the rerun evidence read names alike.

-- step: job_configs
CREATE OR REPLACE TEMP MACRO job_configs(job) AS
    list_filter(['dynamo', 'inductor'], lambda c: contains(coalesce(job, ''), c))

-- step: runner_configs
CREATE OR REPLACE TEMP MACRO runner_configs(job) AS
    list_distinct(job_configs(job) || CASE WHEN contains(coalesce(job, ''), 'inductor') THEN ['dynamo'] ELSE [] END)
