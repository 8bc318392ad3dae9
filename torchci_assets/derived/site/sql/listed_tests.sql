-- Flaky and broken tests for tests.html (view ft over flaky_tests), up to $limit.
SELECT * FROM ft WHERE verdict IN ('flaky', 'broken')
ORDER BY verdict DESC, flake_rate DESC NULLS LAST, file, classname, name LIMIT $limit
