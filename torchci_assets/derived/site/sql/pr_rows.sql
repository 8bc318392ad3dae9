-- The pull requests' rows as the site reads them (after newest_pr_jobs): the columns pr_jobs gained
-- after older partitions were written, NULL when read from those (not known to be cancelled, nor
-- unstable), so the pages read one shape; and each row's `kind`, the one result the index counts
-- and the page shows.

-- step: cancelled
ALTER TABLE newest_pr_jobs ADD COLUMN IF NOT EXISTS cancelled BOOLEAN

-- step: unstable
ALTER TABLE newest_pr_jobs ADD COLUMN IF NOT EXISTS unstable BOOLEAN

-- step: kinds
-- a failure's kind in Dr. CI's order (drci/classify.py): unstable, infra, known flaky, broken on
-- main, cancelled, new; one per row, so the index never counts a job twice nor apart from its page
-- and its Dr. CI comment. A pull request's row without a job (its head has none yet) has none.
CREATE OR REPLACE TEMP VIEW pr_rows AS
SELECT *, CASE WHEN state IS DISTINCT FROM 'failure' THEN state
               WHEN coalesce(unstable, false) THEN 'unstable'
               WHEN failure_class IN ('infra', 'known_flaky', 'broken_on_main') THEN failure_class
               WHEN coalesce(cancelled, false) THEN 'cancelled'
               ELSE 'new' END AS kind
FROM newest_pr_jobs
