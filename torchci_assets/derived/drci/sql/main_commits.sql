-- Main commits of the window, oldest first, from the newest commit_health partition holding each (view ch).
SELECT sha, min(pushed_at) AS pushed_at
FROM ch
GROUP BY sha
ORDER BY pushed_at, sha
