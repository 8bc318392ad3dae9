-- The build_envs with a job (test or build, whatever its outcome) in view month, workflow_job
-- over the month ending on the day computed: PyTorch's job_names_past_month.
SELECT DISTINCT build_env FROM month WHERE build_env IS NOT NULL
