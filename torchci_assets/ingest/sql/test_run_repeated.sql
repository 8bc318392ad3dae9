-- How many distinct tests (KEY_COLUMNS of reports.py) staged by an increment (view stage) the
-- partition already holds (view existing). Only the rows of the staged jobs are compared: DuckDB
-- filters the parts' scan by that set of job ids (a range from their min to max would span jobs
-- that started hours apart, and read most of the day).
WITH staged AS (
    SELECT DISTINCT workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name FROM stage
)
SELECT count(*) FROM staged s
SEMI JOIN (SELECT * FROM existing WHERE job_id IN (SELECT DISTINCT job_id FROM staged)) e
USING (workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname, name)
