-- Per issue and test, when the disabled_issues ledger (view `l`) last recorded each change that sets
-- what the test's evidence is counted from: this project reopening the issue, widening its
-- platforms on a new flake, narrowing them (re-enabling on some platforms; for an aggregate, also
-- dropping the test from its list), closing it (or seeing it closed), and listing the test in an
-- aggregate (filing the aggregate, or adding the test to it), or seeing a human narrow them by hand.
-- Per issue is the latest over its tests. `platforms`: the test's platforms as the latest row saw them.
SELECT issue_number, test, arg_max(platforms, "at") AS platforms,
       max("at") FILTER (WHERE detail LIKE 'reopened%') AS reopened,
       max("at") FILTER (WHERE detail LIKE 'added platforms%') AS widened,
       max("at") FILTER (WHERE action IN ('narrowed', 'dropped') OR detail LIKE 'narrowed by hand%') AS narrowed,
       max("at") FILTER (WHERE action IN ('reenabled', 'closed') OR issue_state = 'closed') AS closed,
       max("at") FILTER (WHERE action = 'created' OR detail LIKE 'added to aggregate%') AS listed
FROM l
WHERE issue_number IS NOT NULL
GROUP BY issue_number, test
