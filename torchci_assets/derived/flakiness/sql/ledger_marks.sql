-- Per issue, when the disabled_issues ledger (view `l`) last recorded each change that sets what
-- its evidence is counted from: this project reopening it, widening its platforms on a new flake,
-- narrowing them (re-enabling on some platforms), and closing it (or seeing it closed).
SELECT issue_number,
       max("at") FILTER (WHERE detail LIKE 'reopened%') AS reopened,
       max("at") FILTER (WHERE detail LIKE 'added platforms%') AS widened,
       max("at") FILTER (WHERE action = 'narrowed') AS narrowed,
       max("at") FILTER (WHERE action IN ('reenabled', 'closed') OR issue_state = 'closed') AS closed
FROM l
WHERE issue_number IS NOT NULL
GROUP BY issue_number
