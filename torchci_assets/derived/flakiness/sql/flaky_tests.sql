-- flaky_tests, step by step, each a temp table: the window's jobs, per (test, config, commit) outcomes
-- with their same-commit passes, main-branch sequences for flips and broken ranges, then per
-- (test, platform) evidence and per-test verdicts. Reads the tables w_test_stats and
-- w_config_reruns (window_stats.sql), the views w_outcomes, w_jobs and w_push (flaky.py registers
-- them) and the macros of wilson.sql and test_configs.sql. Parameters: $broken_min_commits,
-- $main_ref (the configured main branch's ref, refs/heads/main or refs/heads/master), $max_flip_gap,
-- $min_flake_events, $min_runs, $z.

-- step: jobs
CREATE OR REPLACE TEMP TABLE jobs AS
SELECT job_id, any_value(workflow_id) AS run_id, any_value(head_sha) AS head_sha,
       any_value(branch_class) AS branch_class, any_value(build_env) AS build_env,
       any_value(test_config) AS test_config, any_value(platform) AS platform,
       any_value(shard) AS shard, bool_or(infra_suspect) AS infra, sum(executed) AS executed,
       min(coalesce(job_started_at, job_completed_at)) AS started,
       max(coalesce(job_completed_at, job_started_at)) AS completed
FROM w_jobs WHERE job_id IS NOT NULL GROUP BY job_id

-- step: sha
CREATE OR REPLACE TEMP TABLE sha AS
SELECT file, classname, name, build_env, test_config, platform, branch_class, head_sha,
       sum(failed + errors) AS fails, sum(passed) AS passes, sum(rerun_passed) AS rerun_passed,
       sum(rerun_count) AS reruns, list_distinct(flatten(list(coalesce(failing_job_ids, [])))) AS job_ids
FROM w_outcomes GROUP BY ALL

-- step: sha_jobs
CREATE OR REPLACE TEMP TABLE sha_jobs AS
SELECT s.*, j.run_id, j.shard, j.completed
FROM (SELECT file, classname, name, build_env, test_config, branch_class, head_sha, unnest(job_ids) AS job_id FROM sha) s
JOIN jobs j USING (job_id)

-- step: retry_pass
-- a re-attempt of a failing job's shard (same run, config and shard) that ran tests, was
-- not infra, and has no failure or rerun row for this test on this commit: it passed it
CREATE OR REPLACE TEMP TABLE retry_pass AS
SELECT DISTINCT sj.file, sj.classname, sj.name, sj.build_env, sj.test_config, sj.head_sha
FROM sha_jobs sj
JOIN jobs j2 ON j2.run_id = sj.run_id AND j2.build_env = sj.build_env AND j2.test_config = sj.test_config
     AND j2.shard IS NOT DISTINCT FROM sj.shard AND j2.job_id <> sj.job_id
     AND NOT j2.infra AND j2.executed > 0
ANTI JOIN sha_jobs other ON other.file = sj.file AND other.classname = sj.classname AND other.name = sj.name
     AND other.head_sha = sj.head_sha AND other.job_id = j2.job_id

-- step: rerun_configs
-- configurations that rerun failing tests (any rerun in the window)
CREATE OR REPLACE TEMP TABLE rerun_configs AS
SELECT build_env, test_config FROM w_config_reruns WHERE rerun_count > 0

-- step: sha_status
CREATE OR REPLACE TEMP TABLE sha_status AS
SELECT s.file, s.classname, s.name, s.build_env, s.test_config, s.platform, s.branch_class, s.head_sha,
       s.fails, s.passes, s.rerun_passed,
       s.passes > 0 OR r.file IS NOT NULL AS has_pass,
       s.fails > 0 AND has_pass AS pair,
       s.fails > 0 AND NOT has_pass AS failed_commit,
       s.reruns > 0 OR rc.build_env IS NULL AS credible
FROM sha s LEFT JOIN retry_pass r USING (file, classname, name, build_env, test_config, head_sha)
LEFT JOIN rerun_configs rc USING (build_env, test_config)

-- step: commit_rank
-- main's commit order: when it was pushed to main (test jobs start in a different order:
-- builds and queues vary), or when its first test job started if its push is missing
CREATE OR REPLACE TEMP TABLE commit_rank AS
WITH pushed AS (
    SELECT after AS head_sha, min(received_at) AS t FROM w_push WHERE ref = $main_ref GROUP BY 1
),
ran AS (SELECT head_sha, min(started) AS t FROM jobs WHERE branch_class = 'main' AND head_sha IS NOT NULL
        GROUP BY 1)
SELECT head_sha, row_number() OVER (ORDER BY coalesce(p.t, r.t), head_sha) AS rank
FROM ran r LEFT JOIN pushed p USING (head_sha)

-- step: seq
-- for each test and config with a main failure: every main commit where that shard ran the test.
-- A commit where each job of the shard reported the test skipped (w_skips, its test_key computed
-- as main_skips.sql does) did not run it: it is neither a pass nor a failure, so the test's
-- neighbours there are the commits around it where it ran.
CREATE OR REPLACE TEMP TABLE seq AS
WITH shards AS (
    SELECT DISTINCT file, classname, name, build_env, test_config, shard,
           ('0x' || md5(concat_ws(chr(31), file, classname, name))[:16])::UBIGINT AS test_key
    FROM sha_jobs WHERE branch_class = 'main'
),
covered AS (
    SELECT DISTINCT build_env, test_config, platform, shard, head_sha, job_id FROM jobs
    WHERE branch_class = 'main' AND NOT infra AND executed > 0
),
skips AS (  -- the window's skips of these tests only (w_skips holds every test's)
    SELECT test_key, job_id FROM w_skips SEMI JOIN (SELECT DISTINCT test_key FROM shards) USING (test_key)
),
tested AS (
    SELECT DISTINCT s.file, s.classname, s.name, c.build_env, c.test_config, c.platform, c.head_sha
    FROM shards s JOIN covered c USING (build_env, test_config, shard)
    ANTI JOIN skips k ON k.test_key = s.test_key AND k.job_id = c.job_id
)
SELECT t.*, c.rank,
       coalesce(st.failed_commit, false) AS f, coalesce(st.fails, 0) AS fails,
       coalesce(st.credible, false) AS credible
FROM tested t JOIN commit_rank c USING (head_sha)
LEFT JOIN (SELECT * EXCLUDE (platform) FROM sha_status WHERE branch_class = 'main') st
     USING (file, classname, name, build_env, test_config, head_sha)

-- step: seq_n
-- island: the commits where the test ran and did not fail, up to this one; the failed commits of a run
-- of consecutive failures share it (one window, one sort: a second ordering by failure doubled the step)
CREATE OR REPLACE TEMP TABLE seq_n AS
SELECT *, lag(f) OVER w AS prev_f, lead(f) OVER w AS next_f,
       lag(rank) OVER w AS prev_rank, lead(rank) OVER w AS next_rank,
       count(*) FILTER (WHERE NOT f) OVER (w ROWS UNBOUNDED PRECEDING) AS island
FROM seq
WINDOW w AS (PARTITION BY file, classname, name, build_env, test_config ORDER BY rank)

-- step: broken_ranges
-- consecutive failed commits on one config: [first_rank, last_rank], fixed at the next covered commit
CREATE OR REPLACE TEMP TABLE broken_ranges AS
SELECT file, classname, name, build_env, test_config, count(*) AS commits, sum(fails) AS failures,
       min(rank) AS first_rank, max(rank) AS last_rank,
       arg_min(head_sha, rank) AS from_sha,
       CASE WHEN count(next_rank) = count(*) THEN max(next_rank) END AS fixed_rank  -- null: still failing
FROM seq_n WHERE f GROUP BY file, classname, name, build_env, test_config, island
HAVING count(*) >= $broken_min_commits

-- step: commit_breaks
-- main commits where the test failed on every configuration that ran it, two or more: the commit
-- broke it (and was reverted or fixed at once), which a flake, failing one configuration at a time,
-- does not look like
CREATE OR REPLACE TEMP TABLE commit_breaks AS
SELECT file, classname, name, head_sha FROM seq
GROUP BY ALL HAVING count(*) >= 2 AND bool_and(f)

-- step: flips
CREATE OR REPLACE TEMP TABLE flips AS
SELECT s.* FROM seq_n s
WHERE s.f AND s.credible AND NOT s.prev_f AND NOT s.next_f
  AND s.rank - s.prev_rank <= $max_flip_gap AND s.next_rank - s.rank <= $max_flip_gap
  AND NOT EXISTS (SELECT 1 FROM broken_ranges b WHERE b.file = s.file AND b.classname = s.classname
                  AND b.name = s.name AND s.rank BETWEEN b.first_rank AND b.last_rank)
  AND NOT EXISTS (SELECT 1 FROM commit_breaks k WHERE k.file = s.file AND k.classname = s.classname
                  AND k.name = s.name AND k.head_sha = s.head_sha)

-- step: broken
-- the latest range: the one that began last; of ranges that began at one commit (two configurations
-- broken by it), the one still failing, else the one fixed last, so the same inputs always name
-- the same fix
CREATE OR REPLACE TEMP TABLE broken AS
SELECT file, classname, name, count(*) AS broken_ranges, sum(failures)::BIGINT AS broken_failures,
       arg_max({'from': from_sha, 'fixed': c.head_sha},
               (first_rank, coalesce(b.fixed_rank, 9223372036854775807))) AS latest
FROM broken_ranges b LEFT JOIN commit_rank c ON c.rank = b.fixed_rank
GROUP BY ALL

-- step: exclusive
-- commits where the test failed on one platform only, and some other platform ran tests
CREATE OR REPLACE TEMP TABLE exclusive AS
WITH fp AS (SELECT DISTINCT file, classname, name, platform, head_sha FROM sha_status WHERE fails > 0),
ran AS (SELECT DISTINCT head_sha, platform FROM jobs WHERE NOT infra AND executed > 0)
SELECT file, classname, name, platform, count(*) AS exclusive_failing_shas FROM fp
WHERE NOT EXISTS (SELECT 1 FROM fp o WHERE o.file = fp.file AND o.classname = fp.classname
                  AND o.name = fp.name AND o.head_sha = fp.head_sha AND o.platform <> fp.platform)
  AND EXISTS (SELECT 1 FROM ran r WHERE r.head_sha = fp.head_sha AND r.platform <> fp.platform)
GROUP BY ALL

-- step: main_flaked
-- the main commits and configurations where the test flaked: it passed on rerun, failed credibly
-- beside a pass, or flipped. A failure elsewhere (a pull request breaking the test) is not
-- flakiness on main, and disables, reopens or widens no DISABLED issue.
CREATE OR REPLACE TEMP TABLE main_flaked AS
SELECT file, classname, name, build_env, test_config, platform, head_sha FROM sha_status
WHERE branch_class = 'main' AND (rerun_passed > 0 OR (pair AND credible))
UNION
SELECT file, classname, name, build_env, test_config, platform, head_sha FROM flips

-- step: main_flake_times
-- when the test last flaked on main, per platform: the latest failing job of a main flake
CREATE OR REPLACE TEMP TABLE main_flake_times AS
SELECT f.file, f.classname, f.name, f.platform, max(sj.completed) AS last_main_flake_at
FROM main_flaked f JOIN sha_jobs sj USING (file, classname, name, build_env, test_config, head_sha)
WHERE sj.branch_class = 'main'
GROUP BY ALL

-- step: main_flaky_jobs
-- where the test flaked on main as PyTorch's flaky bot tells jobs apart (test_configs.sql): the
-- configurations of the dynamo and inductor jobs, and the platforms where it flaked in those jobs
-- only (the bot counts them for no OS). Which of them a DISABLED issue names is the bot's rule
-- (issue_text.flaky_bot_platforms).
CREATE OR REPLACE TEMP TABLE main_flaky_jobs AS
WITH configs AS (
    SELECT DISTINCT file, classname, name, platform, job_configs(concat_ws(' ', build_env, test_config)) AS configs
    FROM main_flaked
),
per_platform AS (
    SELECT file, classname, name, platform, bool_and(len(configs) > 0) AS configs_only,
           flatten(list(configs)) AS configs
    FROM configs GROUP BY ALL
)
SELECT file, classname, name, coalesce(list(platform) FILTER (WHERE configs_only), []) AS configs_only_platforms,
       list_sort(list_distinct(flatten(list(configs)))) AS main_flaky_configs
FROM per_platform GROUP BY ALL

-- step: platform_evidence
-- flake_events counts every branch (Dr. CI and the verdict want to know a test is flaky anywhere);
-- main_flake_events counts main's only: rerun passes and credible pairs on main commits, and flips
-- (main-only by nature). Only main's disable a test, as PyTorch's flaky bot reads main's jobs only:
-- a pull request that makes its own test flaky must not get it disabled for everyone. Main's runs,
-- failures and same-commit pairs (main_*) are what a new DISABLED issue reports.
CREATE OR REPLACE TEMP TABLE platform_evidence AS
WITH st AS (FROM w_test_stats),
sc AS (
    SELECT file, classname, name, platform, count(*) FILTER (WHERE pair) AS same_commit_pairs,
           count(*) FILTER (WHERE pair AND branch_class = 'main') AS main_same_commit_pairs,
           coalesce(sum(fails) FILTER (WHERE pair AND credible), 0)::BIGINT AS pair_failures,
           coalesce(sum(fails) FILTER (WHERE pair AND credible AND branch_class = 'main'), 0)::BIGINT
               AS main_pair_failures,
           count(DISTINCT head_sha) FILTER (WHERE fails > 0) AS failing_shas
    FROM sha_status GROUP BY ALL
),
fl AS (SELECT file, classname, name, platform, count(*) AS flips, sum(fails)::BIGINT AS flip_failures FROM flips GROUP BY ALL)
SELECT st.*, coalesce(sc.same_commit_pairs, 0) AS same_commit_pairs,
       coalesce(sc.main_same_commit_pairs, 0) AS main_same_commit_pairs,
       coalesce(sc.pair_failures, 0) AS pair_failures, coalesce(fl.flips, 0) AS flips,
       coalesce(fl.flip_failures, 0) AS flip_failures, coalesce(sc.failing_shas, 0) AS failing_shas,
       coalesce(ex.exclusive_failing_shas, 0) AS exclusive_failing_shas,
       st.rerun_passes + coalesce(sc.pair_failures, 0) + coalesce(fl.flip_failures, 0) AS flake_events,
       st.main_rerun_passes + coalesce(sc.main_pair_failures, 0) + coalesce(fl.flip_failures, 0) AS main_flake_events,
       mt.last_main_flake_at
FROM st LEFT JOIN sc USING (file, classname, name, platform) LEFT JOIN fl USING (file, classname, name, platform)
LEFT JOIN exclusive ex USING (file, classname, name, platform)
LEFT JOIN main_flake_times mt USING (file, classname, name, platform)

-- step: verdicts
CREATE OR REPLACE TEMP TABLE verdicts AS
WITH t AS (
    SELECT file, classname, name, sum(runs)::BIGINT AS runs, sum(failures)::BIGINT AS failures,
           sum(rerun_passes)::BIGINT AS rerun_passes, sum(rerun_failures)::BIGINT AS rerun_failures,
           sum(same_commit_pairs)::BIGINT AS same_commit_pairs, sum(flips)::BIGINT AS flips,
           sum(flake_events)::BIGINT AS flake_events, sum(main_flake_events)::BIGINT AS main_flake_events,
           sum(infra_runs)::BIGINT AS infra_runs, sum(infra_failures)::BIGINT AS infra_failures,
           list(platform ORDER BY platform) FILTER (WHERE runs > 0) AS platforms,
           coalesce(list(platform ORDER BY platform) FILTER (WHERE flake_events > 0), []) AS flaky_platforms,
           coalesce(list(platform ORDER BY platform) FILTER (WHERE main_flake_events > 0), [])
               AS main_flaky_platforms,
           max(last_main_flake_at) AS last_main_flake_at,
           min(first_seen) AS first_seen, max(last_seen) AS last_seen
    FROM platform_evidence GROUP BY ALL
)
-- main_flaky_os_platforms: main_flaky_platforms but those where it flaked in dynamo or inductor jobs only
SELECT t.*,
       list_filter(t.main_flaky_platforms, lambda p: NOT list_contains(coalesce(j.configs_only_platforms, []), p))
           AS main_flaky_os_platforms,
       coalesce(j.main_flaky_configs, []) AS main_flaky_configs,
       flake_events / nullif(runs, 0) AS flake_rate,
       wilson_bound(flake_events, runs, $z, -1) AS flake_rate_low,
       wilson_bound(flake_events, runs, $z, 1) AS flake_rate_high,
       coalesce(b.broken_ranges, 0) AS broken_ranges, coalesce(b.broken_failures, 0) AS broken_failures,
       b.latest['from'] AS broken_from_sha, b.latest['fixed'] AS broken_fixed_sha,
       CASE WHEN flake_events >= $min_flake_events THEN 'flaky'
            WHEN b.broken_ranges > 0 THEN 'broken'
            WHEN runs < $min_runs OR flake_events > 0 THEN 'insufficient_data'
            ELSE 'healthy' END AS verdict
FROM t LEFT JOIN broken b USING (file, classname, name) LEFT JOIN main_flaky_jobs j USING (file, classname, name)
ORDER BY verdict, flake_rate DESC NULLS LAST, file, classname, name
