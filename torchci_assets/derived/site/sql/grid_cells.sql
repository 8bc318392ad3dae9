-- The job groups of the grid's commits ($shas).
SELECT * FROM newest_commit_health WHERE list_contains($shas, sha) AND job_group IS NOT NULL
