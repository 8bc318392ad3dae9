-- Per test, the issue number its latest disabled_issues ledger row (view `l`) with a number names.
SELECT test, arg_max(issue_number, "at") FROM l WHERE issue_number IS NOT NULL GROUP BY test
