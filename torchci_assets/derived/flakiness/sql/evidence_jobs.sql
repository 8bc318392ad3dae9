-- A DISABLED issue's most recent failing jobs, main-branch jobs first, up to $max_job_links per test:
-- from the window's test_sha_outcomes (view o), linked through workflow_job (view wjob: run id and
-- repository) with test_jobs (view j) as the fallback for jobs whose webhooks never arrived.
WITH failing AS (
    SELECT w.test, x.branch_class = 'main' AS on_main, x.head_sha, x.last_at, unnest(x.failing_job_ids) AS job_id
    FROM o x JOIN wanted w ON w.name = x.name AND string_split(x.classname, '.')[-1] = w.cls
),
per_job AS (
    SELECT test, job_id, bool_or(on_main) AS on_main, any_value(head_sha) AS head_sha, max(last_at) AS last_at
    FROM failing GROUP BY ALL
),
tj AS (
    SELECT job_id, any_value(workflow_id) AS run_id, any_value(job_name) AS job_name,
           max(job_completed_at) AS completed_at
    FROM j WHERE job_id IN (SELECT job_id FROM per_job) GROUP BY job_id
),
wj AS (
    SELECT id, any_value(run_id) AS run_id, any_value(repo) AS repo, any_value(name) AS name,
           max(completed_at) AS completed_at
    FROM wjob WHERE id IN (SELECT job_id FROM per_job) GROUP BY id
)
SELECT f.test, f.job_id, coalesce(wj.run_id, tj.run_id) AS run_id, wj.repo,
       coalesce(wj.name, tj.job_name, '') AS job_name, f.head_sha, f.on_main,
       coalesce(wj.completed_at, tj.completed_at, f.last_at) AS failed_at,
       count(*) OVER (PARTITION BY f.test) AS failing_jobs,
       max(coalesce(wj.completed_at, tj.completed_at, f.last_at)) OVER (PARTITION BY f.test) AS last_failure_at
FROM per_job f LEFT JOIN tj USING (job_id) LEFT JOIN wj ON wj.id = f.job_id
QUALIFY row_number() OVER (PARTITION BY f.test ORDER BY f.on_main DESC, failed_at DESC NULLS LAST, f.job_id DESC)
        <= $max_job_links
ORDER BY f.test, f.on_main DESC, failed_at DESC NULLS LAST, f.job_id DESC
