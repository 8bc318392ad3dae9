-- test_sha_outcomes after an append: one row per test, configuration and commit, so the rows of the
-- groups that moved (moved_groups) on the (commit, configuration) keys that moved (touched) are
-- recomputed from all their rows (outcomes_a) and the others kept. Not sorted again, as
-- test_daily_stats_append.sql.
SELECT * EXCLUDE (day) FROM previous_outcomes  -- the view's Hive column, not the table's
WHERE NOT (hash(head_sha, build_env, test_config, platform, branch_class) IN (SELECT k FROM touched)
           AND hash(file, classname, name, build_env, test_config, platform, branch_class)
               IN (SELECT g FROM moved_groups))
UNION ALL BY NAME
SELECT * FROM outcomes_a
