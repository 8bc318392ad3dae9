-- How many distinct tests (KEY_COLUMNS of reports.py) staged by an increment (view stage) the
-- partition already holds (view existing). The job ids bound the scan: a part is sorted by job,
-- so only its row groups of those jobs are read.
WITH staged AS (
    SELECT DISTINCT workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name FROM stage
)
SELECT count(*) FROM staged s
SEMI JOIN (SELECT * FROM existing
           WHERE job_id BETWEEN (SELECT min(job_id) FROM staged) AND (SELECT max(job_id) FROM staged)) e
USING (workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name)
