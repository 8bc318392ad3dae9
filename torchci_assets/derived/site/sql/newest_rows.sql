-- The rows of the chosen keys, each from its newest day only.
CREATE OR REPLACE TEMP TABLE {{newest}} AS
SELECT w.* FROM {{source}} w JOIN {{keys}} k ON w.{{key}} = k.{{key}} AND w.day = k.day
