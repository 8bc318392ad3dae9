-- Disabled tests for tests.html (view dt over disabled_tests), up to $limit.
SELECT * FROM dt WHERE status = 'disabled' ORDER BY test LIMIT $limit
