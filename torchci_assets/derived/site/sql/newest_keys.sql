-- The $limit keys ({{key}}) of view {{source}} latest by {{order}}, and those of $also, each with the
-- newest day that holds it.
CREATE OR REPLACE TEMP TABLE {{keys}} AS
SELECT {{key}}, max(day) AS day, max({{order}}) AS latest FROM {{source}} GROUP BY {{key}}
QUALIFY row_number() OVER (ORDER BY latest DESC, {{key}} DESC) <= $limit OR list_contains($also, {{key}})
