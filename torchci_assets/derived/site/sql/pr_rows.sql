-- The pull requests' rows as the site reads them (after newest_pr_jobs): the columns pr_jobs gained
-- after older partitions were written, NULL when read from those (not known to be cancelled, nor
-- unstable), so the pages read one shape; and each row's `kind`, the one result the index counts
-- and the page shows.

-- step: cancelled
ALTER TABLE newest_pr_jobs ADD COLUMN IF NOT EXISTS cancelled BOOLEAN

-- step: unstable
ALTER TABLE newest_pr_jobs ADD COLUMN IF NOT EXISTS unstable BOOLEAN

-- step: kinds
-- a failure's kind: the class the Dr. CI comment on the same head gives the same job (view drci_kinds,
-- site/drci_verdicts.py), since the page shows that comment below its table; else pr_jobs' own, in Dr. CI's
-- order (drci/classify.py): unstable, infra, known flaky, cancelled, broken on main, new. One per row, so the
-- index never counts a job twice nor apart from its page and its Dr. CI comment. A pull request's row
-- without a job (its head has none yet) has none. A job pending here that the comment lists as failing
-- has the comment's kind: its `completed` webhook was lost and Dr. CI read its failure from GitHub's
-- REST API (drci/refresh.py) in this run; the records it wrote reach pr_jobs at the next refresh.
CREATE OR REPLACE TEMP VIEW pr_rows AS
SELECT p.*, CASE WHEN p.state = 'pending' AND d.kind IS NOT NULL THEN d.kind
                 WHEN p.state IS DISTINCT FROM 'failure' THEN p.state
                 WHEN d.kind IS NOT NULL THEN d.kind
                 WHEN coalesce(p.unstable, false) THEN 'unstable'
                 WHEN p.failure_class IN ('infra', 'known_flaky') THEN p.failure_class
                 WHEN coalesce(p.cancelled, false) THEN 'cancelled'
                 WHEN p.failure_class = 'broken_on_main' THEN p.failure_class
                 ELSE 'new' END AS kind
FROM newest_pr_jobs p
LEFT JOIN drci_kinds d ON p.source = 'github' AND d.number = p.number AND d.head_sha = p.head_sha
                      AND d.job_id = p.job_id AND d.name = p.name
