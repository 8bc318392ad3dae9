-- test_sha_outcomes, from the day's test_results.
WITH base AS (
    SELECT *, hash(file, classname, name, build_env, test_config, platform, branch_class, head_sha) AS group_hash
    FROM test_results WHERE NOT infra_suspect AND head_sha IS NOT NULL
)
SELECT file, classname, name, build_env, test_config, platform, branch_class, head_sha,
    count(*) AS runs,
    count(*) FILTER (WHERE status = 'passed') AS passed,
    count(*) FILTER (WHERE status = 'failed') AS failed,
    count(*) FILTER (WHERE status = 'error') AS errors,
    count(*) FILTER (WHERE status = 'skipped') AS skipped,
    count(*) FILTER (WHERE status = 'passed' AND rerun_count > 0) AS rerun_passed,
    sum(rerun_count)::BIGINT AS rerun_count,
    count(DISTINCT job_id) AS jobs,
    list(DISTINCT job_id ORDER BY job_id) FILTER (WHERE status IN ('failed', 'error') OR rerun_count > 0) AS failing_job_ids,
    min(job_completed_at) AS first_at,
    max(job_completed_at) AS last_at
FROM base
WHERE group_hash IN (SELECT group_hash FROM base WHERE status IN ('failed', 'error') OR rerun_count > 0)
GROUP BY file, classname, name, build_env, test_config, platform, branch_class, head_sha
HAVING failed + errors > 0 OR sum(rerun_count) > 0
ORDER BY build_env, test_config, platform, file, classname, name, head_sha
