-- newest_pr_jobs read only from partitions written before pr_jobs had `cancelled`: the column, NULL
-- (not known to be cancelled), so the pages read one shape.
ALTER TABLE newest_pr_jobs ADD COLUMN IF NOT EXISTS cancelled BOOLEAN
