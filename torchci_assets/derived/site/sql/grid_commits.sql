-- The grid's commits, newest first: up to $commits of them.
SELECT sha, any_value(pushed_at) AS pushed_at, any_value(conclusion) AS conclusion,
       any_value(time_to_signal_s) AS time_to_signal_s
FROM newest_commit_health GROUP BY sha ORDER BY pushed_at DESC, sha LIMIT $commits
