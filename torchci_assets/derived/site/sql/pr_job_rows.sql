-- The job rows of the listed pull requests ($numbers), with their kind (pr_rows.sql); not the row of
-- a head without jobs.
SELECT * FROM pr_rows WHERE list_contains($numbers, number) AND source IS NOT NULL
