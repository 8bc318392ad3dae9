-- The build_envs with a job (test or build, whatever its outcome) in view month, workflow_job
-- over the month ending on the day computed: PyTorch's job_names_past_month.
-- A job named as neither of PyTorch's patterns is its own build_env, as results/sql/time_runs.sql keys it.
SELECT DISTINCT coalesce(build_env, name) AS build_env FROM month WHERE coalesce(build_env, name) IS NOT NULL
