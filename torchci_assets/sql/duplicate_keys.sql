-- Rows of view t, and how many of them repeat a key ({{key}}: the key's columns).
SELECT count(*), count(*) - (SELECT count(*) FROM (SELECT DISTINCT {{key}} FROM t)) FROM t
