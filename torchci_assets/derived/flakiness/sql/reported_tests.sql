-- What the retirement reads (retired_tests.sql) of one test_daily_stats file (view src): per test
-- (PyTorch's name, as the DISABLED issues say it) and file, when it last reported. A few thousand
-- rows of the ~160,000 a day holds (one per test and configuration); the retirement's maxima over
-- these equal those over the file's rows.
SELECT name || ' (__main__.' || regexp_extract(classname, '[^.]+$') || ')' AS test, file,
    max(last_seen) AS last_seen
FROM src
GROUP BY ALL
