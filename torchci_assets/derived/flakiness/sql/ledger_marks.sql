-- Per issue and test, when the disabled_issues ledger (view `l`) last recorded each change that sets
-- what the test's evidence is counted from: this project reopening the issue, widening its
-- platforms on a new flake, narrowing them (re-enabling on some platforms; for an aggregate, also
-- dropping the test from its list), closing it (or seeing it closed), and listing the test in an
-- aggregate (filing the aggregate, or adding the test to it), or seeing a human narrow them by hand.
-- Per issue is the latest over its tests. `platforms`: the test's platforms as the latest row saw them,
-- NULL (unknown) when that row is one older versions wrote for a test of an aggregate from the
-- aggregate's body (its example's `Platforms:` line), not from the test's line: its listing, which
-- this version's rows follow with "; its line", or "listed in aggregate #<n>" alone.
SELECT issue_number, test,
       CASE WHEN NOT arg_max(coalesce(
                detail = 'listed in aggregate #' || CAST(issue_number AS VARCHAR)
                OR ((detail LIKE 'added to aggregate #%' OR detail LIKE 'aggregate of % tests of %')
                    AND detail NOT LIKE '%; its line%'), false), "at")
            THEN arg_max(platforms, "at") END AS platforms,
       max("at") FILTER (WHERE detail LIKE 'reopened%') AS reopened,
       max("at") FILTER (WHERE detail LIKE 'added platforms%') AS widened,
       max("at") FILTER (WHERE action IN ('narrowed', 'dropped') OR detail LIKE 'narrowed by hand%') AS narrowed,
       max("at") FILTER (WHERE action IN ('reenabled', 'closed') OR issue_state = 'closed') AS closed,
       max("at") FILTER (WHERE action = 'created' OR detail LIKE 'added to aggregate%') AS listed
FROM l
WHERE issue_number IS NOT NULL
GROUP BY issue_number, test
