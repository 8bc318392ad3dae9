-- How many pull requests the window's pr_jobs partitions hold (w_pr_jobs): index.html says so when
-- its list shows fewer.
SELECT count(DISTINCT number) AS active FROM w_pr_jobs
