-- The failing tests (and their messages) of the heads' failing jobs (temp table failing_jobs(job_id)),
-- from test_results over the window (view tr).
SELECT job_id, concat_ws('.', nullif(classname, ''), name) || ' (' || file || ')' AS test, any_value(message) AS message
FROM tr
WHERE job_id IN (SELECT job_id FROM failing_jobs) AND status IN ('failed', 'error')
GROUP BY job_id, classname, name, file
ORDER BY job_id, test
