-- What flip detection reads (flaky_tests.sql, step seq) of one test_results file (view src): per
-- test, the main-branch jobs that reported it skipped and never ran it (a disabled test, a skip
-- decorator, PyTorch's rerun_disabled_tests mode skipping every other test). Such a job's commit
-- is neither a pass nor a failure of the test: only its reported skips say so, as the daily
-- aggregates keep no commit without a failure. Infra-suspect jobs are left out, as they are of
-- the commits flips look at.
-- A test is kept as test_key, the first 64 bits of the MD5 of its file, classname and name (seq
-- computes the same): a window holds millions of skips on PyTorch's scale, and one integer per
-- skip costs a fifth of what scanning three strings does at every refresh. MD5 and hex are the
-- same in every DuckDB version, so extracts made by an older one still match.
SELECT ('0x' || md5(concat_ws(chr(31), file, classname, name))[:16])::UBIGINT AS test_key, job_id
FROM src
WHERE branch_class = 'main' AND NOT infra_suspect AND job_id IS NOT NULL
GROUP BY file, classname, name, job_id
HAVING bool_and(status = 'skipped')
ORDER BY test_key, job_id
