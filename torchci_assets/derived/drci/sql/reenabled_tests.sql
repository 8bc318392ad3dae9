-- The tests whose DISABLED issue closed in the window (view dta over disabled_tests: a list's
-- `reenabled` rows name the tests dropped from it that day, with their issue and, when GitHub
-- said, when it closed): each with its issue, the latest day it was re-enabled and that day's
-- close time (null when unknown), unless a later list disables it again.
WITH re AS (
    SELECT test, arg_max(TRY_CAST(id AS BIGINT), day) AS number, max(day) AS day,
           arg_max(closed_at, day) AS closed_at
    FROM dta
    WHERE status = 'reenabled' AND regexp_full_match(id, '[0-9]+')
    GROUP BY test
),
again AS (SELECT test, max(day) AS day FROM dta WHERE status = 'disabled' GROUP BY test)
SELECT re.test, re.number, re.day, re.closed_at
FROM re LEFT JOIN again a USING (test)
WHERE a.day IS NULL OR a.day < re.day
ORDER BY re.test
