-- test_daily_stats after an append: previous - agg(B) + agg(A) for the groups that moved (the
-- others kept as they are), per test and configuration
-- (increments.py says why that equals aggregating the whole day). The extremes combine the
-- previous result with A (exact unless a changed row held one: `lost_extremes`), or are A's alone
-- when every row the previous result counted in the group is in B (not in `outside_groups`). A group left
-- without rows (its only job moved to another configuration) is gone. Same columns, types and
-- order as test_daily_stats.sql. No ORDER BY: sorting the whole day's rows again at every refresh
-- cost ~0.4 CPU-s of a ~5 CPU-s refresh; a full build sorts them, an append leaves the moved groups'
-- rows first (no reader depends on the order of rows).
WITH previous AS (
    SELECT *, hash(file, classname, name, build_env, test_config, platform, branch_class) AS g,
           g IN (SELECT g FROM moved_groups) AS moved
    FROM previous_stats
),
signed AS (
    SELECT * EXCLUDE (moved, day, g), 1 AS sign, true AS counted, g IN (SELECT g FROM outside_groups) AS in_outside_group
    FROM previous WHERE moved
    UNION ALL BY NAME SELECT *, -1 AS sign, false AS counted, false AS in_outside_group FROM agg_b
    UNION ALL BY NAME SELECT *, 1 AS sign, false AS counted, false AS in_outside_group FROM agg_a
),
summed AS (
    SELECT file, classname, name, build_env, test_config, platform, branch_class,
        bool_or(in_outside_group) AS outside,
        sum(sign * runs)::BIGINT AS runs,
        sum(sign * passed)::BIGINT AS passed,
        sum(sign * failed)::BIGINT AS failed,
        sum(sign * errors)::BIGINT AS errors,
        sum(sign * skipped)::BIGINT AS skipped,
        sum(sign * rerun_count)::BIGINT AS rerun_count,
        sum(sign * rerun_passed)::BIGINT AS rerun_passed,
        sum(sign * rerun_failed)::BIGINT AS rerun_failed,
        sum(sign * clean_passes)::BIGINT AS clean_passes,
        seconds_sum(sign * pass_time) AS pass_time,
        CASE WHEN outside
             THEN max(max_pass_time) FILTER (WHERE sign = 1) ELSE max(max_pass_time) FILTER (WHERE sign = 1 AND NOT counted)
        END AS max_pass_time,
        sum(sign * periodic_clean_passes)::BIGINT AS periodic_clean_passes,
        seconds_sum(sign * periodic_pass_time) AS periodic_pass_time,
        sum(sign * shas)::BIGINT AS shas,
        sum(sign * failing_shas)::BIGINT AS failing_shas,
        sum(sign * jobs)::BIGINT AS jobs,
        sum(sign * infra_runs)::BIGINT AS infra_runs,
        sum(sign * infra_failures)::BIGINT AS infra_failures,
        CASE WHEN outside
             THEN min(first_seen) FILTER (WHERE sign = 1) ELSE min(first_seen) FILTER (WHERE sign = 1 AND NOT counted)
        END AS first_seen,
        CASE WHEN outside
             THEN max(last_seen) FILTER (WHERE sign = 1) ELSE max(last_seen) FILTER (WHERE sign = 1 AND NOT counted)
        END AS last_seen
    FROM signed
    GROUP BY file, classname, name, build_env, test_config, platform, branch_class
    HAVING sum(sign * (runs + infra_runs)) > 0
)
SELECT file, classname, name, build_env, test_config, platform, branch_class, runs, passed, failed, errors,
    skipped, rerun_count, rerun_passed, rerun_failed, clean_passes, pass_time,
    pass_time / nullif(clean_passes, 0) AS avg_pass_time, max_pass_time, periodic_clean_passes,
    periodic_pass_time, shas, failing_shas, jobs, infra_runs,
    infra_failures, first_seen, last_seen
FROM summed
UNION ALL BY NAME
SELECT * EXCLUDE (moved, day, g) FROM previous WHERE NOT moved
