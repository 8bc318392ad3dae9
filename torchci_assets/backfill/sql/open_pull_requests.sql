-- The pull requests a `pr_jobs` partition shows open: the HUD's list and pages, Dr. CI's view.
SELECT DISTINCT number FROM pr_jobs WHERE pr_state = 'open' ORDER BY number
