-- The one way the lake's tables sum times in seconds: in whole microseconds. A sum of floats depends
-- on the order of its terms (DuckDB's threads add in any order; a refresh's day is previous - removed
-- + added), an integer sum does not, so a day's times come out the same bit for bit whichever way
-- they were added up. stats.define_seconds_sum creates it.

-- step: seconds_sum
-- seconds_sum(s): the sum of s (seconds, DOUBLE); seconds_sum(s, keep): of the rows where keep
-- holds, as `sum(...) FILTER (WHERE keep)` (a macro takes no FILTER clause of its own). NULL when
-- no row is summed, as sum().
CREATE OR REPLACE TEMP MACRO seconds_sum(s) AS sum(round(s * 1e6)::BIGINT) / 1e6,
                             (s, keep) AS sum(round(s * 1e6)::BIGINT) FILTER (WHERE keep) / 1e6
