-- Every wrong-author stop the ledger holds (view lp over all of drci_posts' days): the newest per
-- author (GitHub logins ignore case) and credentials digest, found when those credentials posted as
-- another account than the author.
SELECT lower(author) AS author, credentials, pr, answered_as, error, day, "at"
FROM lp
WHERE action = 'wrong_author' AND author IS NOT NULL AND credentials IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY lower(author), credentials ORDER BY "at" DESC, day DESC) = 1
