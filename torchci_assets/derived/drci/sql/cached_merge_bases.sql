-- head sha -> merge base, from the compare API's answers cached in drci_merge_bases (view mb).
SELECT head_sha, any_value(merge_base) AS merge_base
FROM mb
WHERE merge_base IS NOT NULL
GROUP BY head_sha
