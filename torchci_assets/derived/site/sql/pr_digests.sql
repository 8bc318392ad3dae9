-- A digest of each listed pull request's rows ($numbers), every column but the partition's instant
-- (`as_of`, which moves at every refresh of today while the page shows nothing of it): its page is
-- rendered again only when this (or anything else it shows) changed. Each row is hashed first and
-- the short hashes combined in order: one aggregate of every row's whole text, sorted, ran DuckDB
-- out of memory once the listed pull requests held ~90k job rows.
SELECT number, md5(string_agg(h, ',' ORDER BY h)) AS digest
FROM (SELECT number, md5(CAST(w AS VARCHAR)) AS h FROM (SELECT * EXCLUDE (as_of) FROM newest_pr_jobs) w
      WHERE list_contains($numbers, number))
GROUP BY number
