-- Per disabled test ($tests, each counted from its own $since on: runs before its issue was filed or
-- reopened say nothing of it now) and platform, what PyTorch's rerun_disabled_tests jobs saw over the
-- window (r_results: those jobs' rows of test_results over the window's days, rerun_results.sql),
-- as tools/stats/check_disabled_tests.py counts it: a pass is one green; a failure or error one
-- red; a test that failed some of its reruns is reported skipped with a JSON message carrying
-- num_green and num_red. Other skips (a test skipped in code, an enabled test the mode skips) are
-- not in the extract: they count nothing. A red counts even in a job suspected of infrastructure
-- trouble; a green does not (re-enabling needs clean evidence). A job counts for its platform and
-- for each test configuration its name puts it in where the runner would skip the test listed for
-- it (runner_configs of test_configs.sql: a dynamo_wrapped job for dynamo, an inductor job for
-- inductor and dynamo), so that a test disabled under dynamo is judged on the reruns that ran it
-- disabled, never on plain jobs' runs.
WITH wanted AS (
    SELECT unnest($tests::VARCHAR[]) AS test, unnest($since::TIMESTAMPTZ[]) AS since
),
runs AS (
    SELECT pytorch_key(name, classname) AS test,
        unnest(list_prepend(platform, runner_configs(job_name))) AS platform, job_id, job_completed_at, infra_suspect,
        CASE WHEN status = 'skipped' AND json_valid(message) THEN coalesce(TRY_CAST(message ->> '$.num_green' AS BIGINT), 0)
             WHEN status = 'passed' THEN 1 ELSE 0 END AS green,
        CASE WHEN status = 'skipped' AND json_valid(message) THEN coalesce(TRY_CAST(message ->> '$.num_red' AS BIGINT), 0)
             WHEN status IN ('failed', 'error') THEN 1 ELSE 0 END AS red
    FROM r_results
)
SELECT test, platform,
    sum(green) FILTER (WHERE NOT infra_suspect)::BIGINT AS green,
    sum(red)::BIGINT AS red,
    count(DISTINCT job_id) FILTER (WHERE NOT infra_suspect) AS jobs,
    count(DISTINCT job_completed_at::DATE) FILTER (WHERE NOT infra_suspect) AS days,
    min(job_completed_at) AS first_run,
    max(job_completed_at) AS last_run
FROM runs JOIN wanted USING (test)
WHERE job_completed_at >= wanted.since
GROUP BY ALL
ORDER BY test, platform
