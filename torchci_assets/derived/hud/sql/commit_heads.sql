-- The commits pushed to $branch (the main branch) of $upstream_repo in the window (w_push), up to
-- $as_of, each with its first push. A push event of an older GitHub may lack the repository: kept.

-- step: pushes
-- (view {{source}}: the push table's partitions) the columns read, with the commits each push
-- lists; a partition written before the table kept them reads them as NULL
CREATE OR REPLACE TEMP VIEW {{view}} AS
SELECT {{columns}} FROM (SELECT * FROM {{source}} UNION ALL BY NAME SELECT {{added}} WHERE false)

-- step: no_pushes
CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT {{columns}} WHERE false

-- step: heads
-- Every commit a push lists is on the line, not only its head: a merge bot lands a stack of pull
-- requests in one push. They are in the order GitHub lists them (oldest first), the head last,
-- each a microsecond before the next, so that ordering by pushed_at orders a push's commits too;
-- the head keeps the push's arrival. A push listing none (a partition written before the table
-- kept them) puts its head alone on the line. `pushed_head`: the commit was the head of a push,
-- which GitHub runs the push's workflows on (a commit under a stack's head gets none).
CREATE TEMP TABLE heads AS
WITH pushes AS (
    SELECT received_at,
           list_append(list_filter(coalesce(commits, []), lambda c: c IS NOT NULL AND c <> after), after) AS line
    FROM w_push
    WHERE ref = $branch AND (repo IS NULL OR lower(repo) = lower($upstream_repo))
      AND NOT coalesce(deleted, false) AND after IS NOT NULL AND after <> '0000000000000000000000000000000000000000'
      AND received_at <= $as_of
),
listed AS (
    SELECT unnest(line) AS sha, unnest(range(len(line))) AS i, len(line) AS n, received_at FROM pushes
)
SELECT sha, min(received_at - to_microseconds(n - 1 - i)) AS pushed_at, bool_or(i = n - 1) AS pushed_head
FROM listed
GROUP BY sha
