-- head sha -> merge base with $branch, from the compare API's answers cached in drci_merge_bases
-- (view mb); rows computed with another branch (a pull request's base, before the merge base was
-- always taken with main) are not answers to this question.
SELECT head_sha, any_value(merge_base) AS merge_base
FROM mb
WHERE merge_base IS NOT NULL AND base_ref = $branch
GROUP BY head_sha
