-- The start and end of each job of temp table grid_jobs(job_id) as view ends_jobs (workflow_job) holds
-- them, its latest word over the days read.
SELECT j.id AS job_id, min(j.started_at) AS started_at, max(j.completed_at) AS completed_at
FROM ends_jobs j JOIN grid_jobs g ON g.job_id = j.id
GROUP BY j.id
