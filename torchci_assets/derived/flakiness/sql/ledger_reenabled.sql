-- The tests the disabled_issues ledger (view `l`) records this project re-enabling: an issue closed
-- or narrowed on rerun evidence, closed as deleted, or a test dropped from an aggregate's list.
SELECT DISTINCT test FROM l WHERE action IN ('reenabled', 'closed', 'dropped')
