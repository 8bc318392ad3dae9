-- Up to five keys of view t that appear more than once, most repeated first.
SELECT {{key}}, count(*) AS n FROM t GROUP BY ALL HAVING n > 1 ORDER BY n DESC LIMIT 5
