-- test_daily_stats, from the day's test_results.
-- Per test and configuration. Infra-suspect rows are left out of every counter but the two
-- infra ones. Times are over clean passes (passed at the first attempt), so a flaky test's
-- retries do not inflate its time. The clean passes and time of jobs of PyTorch's periodic
-- workflow ($periodic_workflow, by workflow name) are also counted apart (included in clean_passes
-- and pass_time): PyTorch's slow-test list leaves that workflow out (flakiness/sql/slow_tests.sql).
-- Times are summed by seconds_sum (seconds_sum.sql: in whole microseconds), as the append sums
-- them, so a day appended refresh by refresh equals the day built at once, bit for bit.
SELECT file, classname, name, build_env, test_config, platform, branch_class,
    count(*) FILTER (WHERE NOT infra_suspect) AS runs,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed') AS passed,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'failed') AS failed,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'error') AS errors,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'skipped') AS skipped,
    coalesce(sum(rerun_count) FILTER (WHERE NOT infra_suspect), 0)::BIGINT AS rerun_count,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count > 0) AS rerun_passed,
    count(*) FILTER (WHERE NOT infra_suspect AND status IN ('failed', 'error') AND rerun_count > 0) AS rerun_failed,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count = 0) AS clean_passes,
    coalesce(seconds_sum(time, NOT infra_suspect AND status = 'passed' AND rerun_count = 0), 0) AS pass_time,
    pass_time / nullif(clean_passes, 0) AS avg_pass_time,
    max(time) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count = 0) AS max_pass_time,
    count(*) FILTER (WHERE NOT infra_suspect AND status = 'passed' AND rerun_count = 0
                     AND workflow_name = $periodic_workflow) AS periodic_clean_passes,
    coalesce(seconds_sum(time, NOT infra_suspect AND status = 'passed' AND rerun_count = 0
                               AND workflow_name = $periodic_workflow), 0) AS periodic_pass_time,
    count(DISTINCT head_sha) FILTER (WHERE NOT infra_suspect) AS shas,
    count(DISTINCT head_sha) FILTER (WHERE NOT infra_suspect AND status IN ('failed', 'error')) AS failing_shas,
    count(DISTINCT job_id) FILTER (WHERE NOT infra_suspect) AS jobs,
    count(*) FILTER (WHERE infra_suspect) AS infra_runs,
    count(*) FILTER (WHERE infra_suspect AND status IN ('failed', 'error')) AS infra_failures,
    min(job_completed_at) AS first_seen,
    max(job_completed_at) AS last_seen
FROM test_results
GROUP BY ALL
ORDER BY build_env, test_config, platform, branch_class, file, classname, name
