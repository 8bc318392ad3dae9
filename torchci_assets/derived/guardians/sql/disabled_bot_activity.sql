-- The disabled-issue bot's last action in the window.
SELECT max("at") AS last_at, count(*) AS actions FROM disabled_issues WHERE "at" >= $since
