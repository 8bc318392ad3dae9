-- The latest time these credentials ($credentials, a digest) were found to post as another account
-- than $author (GitHub logins ignore case), from the ledger's `wrong_author` rows (view lp over drci_posts).
SELECT pr, answered_as, error, day
FROM lp
WHERE action = 'wrong_author' AND lower(author) = lower($author) AND credentials = $credentials
ORDER BY "at" DESC, day DESC
LIMIT 1
