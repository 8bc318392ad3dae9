-- Wilson score bound for k successes in n trials at z standard deviations: sign -1 gives the lower
-- bound, +1 the upper; NULL when n = 0. (A macro, so flaky_tests and smoke_tests share one formula.)
CREATE OR REPLACE TEMP MACRO wilson_bound(k, n, z, sign) AS
    CASE WHEN n > 0 THEN greatest(0.0, least(1.0,
        (k / n + z * z / 2 / n + sign * z * sqrt(k / n * (1 - k / n) / n + z * z / 4 / (n * n)))
        / (1 + z * z / n)))
    END
