"""What Dr. CI reads of the day's big tables, extracted once per file (`resources.lake_extracts`):
a refresh scans only the files that are new or rewritten since the last run, not the window.

Dr. CI reads a few thousand rows of `test_results` (the failures, sql/test_failures.sql), of
`webhook_events` (the pull requests' base shas, sql/pr_bases.sql; the comments deleted on GitHub,
sql/deleted_comments.sql) and of `workflow_job` (the failed jobs' conclusions, sql/job_failures.sql)
out of millions, over a window of days, every few minutes. Their extracts are kept beside the
comments, under `drci_comments`.
"""

from __future__ import annotations

from resources.lake_extracts import Extract
from resources.sql import SqlFiles

SQL = SqlFiles(__file__)
HOME = "drci_comments"  # the table beside whose partitions the extracts are kept

FAILURES = Extract("test_failures", "test_results", HOME, SQL)
PR_BASES = Extract("pr_bases", "webhook_events", HOME, SQL)
JOB_FAILURES = Extract("job_failures", "workflow_job", HOME, SQL)
DELETED_COMMENTS = Extract("deleted_comments", "webhook_events", HOME, SQL)
