-- Of the disabled tests ($tests), those absent from every report of the window (w_seen, the
-- window's test_daily_stats as reported_tests.sql extracts them), with the file each was last
-- seen in before it (h_seen, the same of the days before) and whether that file still reported in
-- the window's last days ($recent_from on). Tests are keyed as the issues name them (test_key.sql).
WITH running_files AS (
    SELECT DISTINCT file FROM w_seen WHERE last_seen >= $recent_from::TIMESTAMPTZ
),
last_file AS (
    SELECT pytorch_key(name, classname) AS test, arg_max(file, last_seen) AS file, max(last_seen) AS last_seen
    FROM h_seen
    GROUP BY 1
)
SELECT t.test, l.file, l.last_seen,
    CASE WHEN l.file IS NULL THEN 'unknown'
         WHEN r.file IS NULL THEN 'file_gone'
         ELSE 'retired' END AS status
FROM unnest($tests::VARCHAR[]) AS t(test)
LEFT JOIN last_file l USING (test)
LEFT JOIN running_files r ON r.file = l.file
WHERE t.test NOT IN (SELECT pytorch_key(name, classname) FROM w_seen)
ORDER BY t.test
