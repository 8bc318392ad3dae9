-- w_skips when the window has no test_results file: empty, with the columns flaky_tests reads.
CREATE OR REPLACE TEMP VIEW w_skips AS SELECT NULL::UBIGINT AS test_key, NULL::BIGINT AS job_id WHERE false
