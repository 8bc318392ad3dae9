-- The day's drci_comments rows (view dc).
SELECT * FROM dc
