-- What the retirement reads (retired_tests.sql) of one test_daily_stats file (view src): per test
-- (its name and the classname's last part, of which retired_tests.sql makes PyTorch's name, as the
-- DISABLED issues say it: test_key.sql, which this query, run on a connection of its own, cannot
-- call) and file, when it last reported. A few thousand rows of the ~160,000 a day holds (one per
-- test and configuration); the retirement's maxima over these equal those over the file's rows.
SELECT name, regexp_extract(classname, '[^.]+$') AS classname, file,
    max(last_seen) AS last_seen
FROM src
GROUP BY ALL
