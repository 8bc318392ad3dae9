-- The issues the disabled_issues ledger (view `l`) records this project creating: their authors
-- are this project's own accounts (issues.own_logins).
SELECT DISTINCT issue_number FROM l WHERE action = 'created' AND issue_number IS NOT NULL
