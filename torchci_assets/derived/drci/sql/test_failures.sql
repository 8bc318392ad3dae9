-- The rows of one test_results file (view src) that Dr. CI reads: final failures and errors, and
-- passes after a failed try (their message is the failed try's): head jobs' failing tests, flaky
-- sightings and main's failures near a merge base are all among them.
SELECT classname, name, file, message, status, rerun_count, head_sha, head_branch, job_id, workflow_id,
       build_env, test_config
FROM src
WHERE status IN ('failed', 'error') OR (status = 'passed' AND rerun_count > 0 AND message IS NOT NULL)
