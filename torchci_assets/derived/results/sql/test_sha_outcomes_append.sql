-- test_sha_outcomes after an append: one row per test, configuration and commit, so the rows of the
-- (commit, configuration) keys that moved (touched) are recomputed from all their rows (outcomes_a)
-- and the others kept.
SELECT * FROM previous_outcomes
WHERE hash(head_sha, build_env, test_config, platform, branch_class) NOT IN (SELECT k FROM touched)
UNION ALL BY NAME
SELECT * FROM outcomes_a
ORDER BY build_env, test_config, platform, file, classname, name, head_sha
