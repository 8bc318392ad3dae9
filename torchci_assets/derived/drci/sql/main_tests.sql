-- Tests that failed on main commits near the merge bases (temp table ref_shas(sha)), per build
-- environment and test config (view so over test_sha_outcomes).
SELECT DISTINCT head_sha AS sha, coalesce(build_env, '') AS build_env, coalesce(test_config, '') AS test_config,
       classname || '.' || name || ' (' || file || ')' AS test
FROM so
WHERE head_sha IN (SELECT sha FROM ref_shas) AND failed + errors > 0
