-- The view fv (flaky_tests' verdicts) when the day has none: no test is known broken.
CREATE OR REPLACE TEMP VIEW fv AS
SELECT NULL::VARCHAR AS file, NULL::VARCHAR AS classname, NULL::VARCHAR AS name, NULL::VARCHAR AS verdict
WHERE false
