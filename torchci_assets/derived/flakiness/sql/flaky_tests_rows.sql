-- flaky_tests' rows: one per test, with the window they were judged over.
SELECT *, $window_start AS window_start, $window_end AS window_end FROM verdicts
