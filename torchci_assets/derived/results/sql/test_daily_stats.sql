-- test_daily_stats, from the day's test_results.
-- Per test and configuration. Infra-suspect rows are left out of every counter but the two
-- infra ones. Times are over clean passes (passed at the first attempt), so a flaky test's
-- retries do not inflate its time. The clean passes and time of jobs of PyTorch's periodic
-- workflow ($periodic_workflow, by workflow name) are also counted apart (included in clean_passes
-- and pass_time): PyTorch's slow-test list leaves that workflow out (flakiness/sql/slow_tests.sql).
-- Times are summed by seconds_sum (seconds_sum.sql: in whole microseconds), as the append sums
-- them, so a day appended refresh by refresh equals the day built at once, bit for bit.
-- The three DISTINCT counts are taken per group number (gid), not per the seven text columns of
-- the key: DuckDB hashes each DISTINCT count's key and joins it back on that key, which on text
-- columns cost more than all the other counters together. The key is matched NULL-safe (any of
-- its columns may be NULL).
WITH groups AS (
    SELECT file, classname, name, build_env, test_config, platform, branch_class, row_number() OVER () AS gid
    FROM (SELECT DISTINCT file, classname, name, build_env, test_config, platform, branch_class FROM test_results)
), rows AS (
    SELECT g.gid, t.* EXCLUDE (file, classname, name, build_env, test_config, platform, branch_class)
    FROM test_results t JOIN groups g
      ON t.file IS NOT DISTINCT FROM g.file AND t.classname IS NOT DISTINCT FROM g.classname
     AND t.name IS NOT DISTINCT FROM g.name AND t.build_env IS NOT DISTINCT FROM g.build_env
     AND t.test_config IS NOT DISTINCT FROM g.test_config AND t.platform IS NOT DISTINCT FROM g.platform
     AND t.branch_class IS NOT DISTINCT FROM g.branch_class
), agg AS (
    SELECT gid,
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
    FROM rows GROUP BY gid
)
SELECT g.* EXCLUDE (gid), a.* EXCLUDE (gid)
FROM agg a JOIN groups g USING (gid)
ORDER BY build_env, test_config, platform, branch_class, file, classname, name
