-- Tests that failed on main commits near the merge bases (temp table ref_shas(sha)), with their
-- messages, per build environment and test config (view tr over test_results).
SELECT DISTINCT head_sha AS sha, coalesce(build_env, '') AS build_env, coalesce(test_config, '') AS test_config,
       concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' AS test, message
FROM tr
WHERE head_sha IN (SELECT sha FROM ref_shas) AND status IN ('failed', 'error')
