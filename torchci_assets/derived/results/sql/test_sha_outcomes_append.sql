-- test_sha_outcomes after an append: one row per commit, so the rows of the commits the new jobs
-- ran on (touched) are recomputed from all their rows (outcomes_a) and the others kept.
SELECT * FROM previous_outcomes
WHERE head_sha NOT IN (SELECT head_sha FROM touched WHERE head_sha IS NOT NULL)
UNION ALL BY NAME
SELECT * FROM outcomes_a
ORDER BY build_env, test_config, platform, file, classname, name, head_sha
