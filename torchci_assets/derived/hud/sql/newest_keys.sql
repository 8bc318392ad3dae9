-- The $limit keys ({{key}}) of view {{source}} latest by {{order}}, each with the newest day that holds it.
CREATE OR REPLACE TEMP TABLE {{keys}} AS
SELECT {{key}}, max(day) AS day, max({{order}}) AS latest FROM {{source}} GROUP BY {{key}}
ORDER BY latest DESC, {{key}} DESC LIMIT $limit
