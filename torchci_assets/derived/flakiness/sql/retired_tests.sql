-- Of the disabled tests ($tests), those absent from every report of the window (w_stats, the
-- window's test_daily_stats), with the file each was last seen in before it (h_stats) and whether
-- that file still reported in the window's last days ($recent_from on).
WITH seen AS (
    SELECT DISTINCT name || ' (__main__.' || regexp_extract(classname, '[^.]+$') || ')' AS test
    FROM w_stats
),
running_files AS (
    SELECT DISTINCT file FROM w_stats WHERE last_seen >= $recent_from::TIMESTAMPTZ
),
last_file AS (
    SELECT name || ' (__main__.' || regexp_extract(classname, '[^.]+$') || ')' AS test,
        arg_max(file, last_seen) AS file,
        max(last_seen) AS last_seen
    FROM h_stats
    GROUP BY 1
)
SELECT t.test, l.file, l.last_seen,
    CASE WHEN l.file IS NULL THEN 'unknown'
         WHEN r.file IS NULL THEN 'file_gone'
         ELSE 'retired' END AS status
FROM unnest($tests::VARCHAR[]) AS t(test)
LEFT JOIN last_file l USING (test)
LEFT JOIN running_files r ON r.file = l.file
WHERE t.test NOT IN (SELECT test FROM seen)
ORDER BY t.test
