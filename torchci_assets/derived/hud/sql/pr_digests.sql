-- A digest of each listed pull request's rows ($numbers), every column but the partition's instant
-- (`as_of`, which moves at every refresh of today while the page shows nothing of it): its page is
-- rendered again only when this (or anything else it shows) changed.
SELECT number, md5(string_agg(CAST(w AS VARCHAR), chr(10) ORDER BY CAST(w AS VARCHAR))) AS digest
FROM (SELECT * EXCLUDE (as_of) FROM newest_pr_jobs) w
WHERE list_contains($numbers, number)
GROUP BY number
