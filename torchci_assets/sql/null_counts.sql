-- The number of NULLs in each of {{columns}} of view t, in that order.
SELECT count(*) - count(COLUMNS(*)) FROM (SELECT {{columns}} FROM t)
