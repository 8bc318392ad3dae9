-- test_run: one row per test run (KEY_COLUMNS of reports.py) from the rows staged for the day
-- (view stage). A test found in several report files of a job (see reports.py) is one run: its
-- times add up, its status is the best one seen, each extra entry counts as a rerun, and its
-- message is the first one staged.
SELECT workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name,
       sum(time) AS time,
       CASE WHEN bool_or(status = 'passed') THEN 'passed'
            WHEN bool_or(status = 'skipped') THEN 'skipped'
            WHEN bool_or(status = 'failed') THEN 'failed'
            ELSE 'error' END AS status,
       sum(rerun_count) + count(*) - 1 AS rerun_count,
       arg_min(message, seq) FILTER (WHERE message IS NOT NULL) AS message
FROM stage
GROUP BY ALL
ORDER BY job_id, workflow_run_attempt, invoking_file, file, classname, name
