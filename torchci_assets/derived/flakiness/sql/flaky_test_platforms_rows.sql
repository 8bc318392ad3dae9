-- flaky_test_platforms' rows: one per test and platform, with the window they were judged over.
SELECT *, $window_start AS window_start, $window_end AS window_end FROM platform_evidence
ORDER BY file, classname, name, platform
