-- The tests the published disabled list of $day (view dta over the window's disabled_tests) disables
-- through an issue: test, the issue's number and URL, and its platforms (empty: every platform).
-- Entries with a local id (a list decided from the verdicts alone, no issue) are left out: no issue
-- says they are disabled.
SELECT test, TRY_CAST(id AS BIGINT) AS number, url, platforms
FROM dta
WHERE day = $day AND status = 'disabled' AND regexp_full_match(id, '[0-9]+')
ORDER BY test, number
