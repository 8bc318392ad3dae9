-- smoke_tests' rows: tests failing on a platform significantly more than elsewhere (view ev over
-- flaky_test_platforms; the macro of wilson.sql), ranked per platform by the gap between the
-- platform's lower bound and the others' upper bound. The jobs of no known platform ('unknown')
-- count elsewhere, and have no set of their own. A test broken on main for a while (verdict
-- 'broken' in view fv over flaky_tests) that failed elsewhere too is left out: its failures come
-- from the commits it was broken on, everywhere, and the platform that ran more jobs over them
-- only looks worse.
WITH t AS (
    SELECT file, classname, name, sum(runs) AS all_runs, sum(failures) AS all_failures,
           sum(flake_events) AS all_flake_events
    FROM ev GROUP BY ALL
),
c AS (
    SELECT ev.platform, ev.file, ev.classname, ev.name, ev.runs, ev.failures, ev.failing_shas,
           ev.exclusive_failing_shas, ev.flake_events,
           t.all_runs - ev.runs AS runs_elsewhere, t.all_failures - ev.failures AS failures_elsewhere,
           t.all_flake_events - ev.flake_events AS flake_events_elsewhere
    FROM ev JOIN t USING (file, classname, name)
),
s AS (
    SELECT *, failures / nullif(runs, 0) AS failure_rate,
           wilson_bound(failures, runs, $z, -1) AS failure_rate_low,
           failures_elsewhere / nullif(runs_elsewhere, 0) AS failure_rate_elsewhere,
           wilson_bound(failures_elsewhere, runs_elsewhere, $z, 1) AS failure_rate_elsewhere_high,
           failure_rate_low - failure_rate_elsewhere_high AS score
    FROM c
)
SELECT platform, row_number() OVER (PARTITION BY platform ORDER BY score DESC, file, classname, name) AS rank,
       file, classname, name, runs, failures, failure_rate, failure_rate_low, runs_elsewhere,
       failures_elsewhere, failure_rate_elsewhere, failure_rate_elsewhere_high, failing_shas,
       exclusive_failing_shas, flake_events, flake_events_elsewhere, score
FROM s
WHERE platform <> 'unknown' AND runs >= $min_runs AND runs_elsewhere > 0
  AND NOT (failures_elsewhere > 0 AND EXISTS (SELECT 1 FROM fv WHERE fv.file = s.file AND fv.classname = s.classname
                                              AND fv.name = s.name AND fv.verdict = 'broken'))
  AND exclusive_failing_shas >= $min_exclusive_shas
  AND score > 0 AND failure_rate_low >= $min_failure_rate
  AND flake_events_elsewhere < $min_flake_events
ORDER BY platform, rank
