-- The job rows of the listed pull requests ($numbers).
SELECT * FROM newest_pr_jobs WHERE list_contains($numbers, number)
