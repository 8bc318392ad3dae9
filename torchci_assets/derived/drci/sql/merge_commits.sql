-- The main commits that landed each pull request of this repository (view pm over the pr_merges
-- extracts of webhook_events; temp table pr_numbers(number) the pull requests asked about).
SELECT DISTINCT number, sha
FROM pm
WHERE repo = $repo AND number IN (SELECT number FROM pr_numbers) AND sha IS NOT NULL
