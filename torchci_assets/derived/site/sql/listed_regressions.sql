-- Test files that got slower (view ttr over test_time_regressions), largest jump first, up to $limit.
SELECT * FROM ttr ORDER BY after_s - before_s DESC, file LIMIT $limit
