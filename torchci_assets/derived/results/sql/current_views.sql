-- A table's files (view {{files}}) as a view {{view}} in today's columns: a partition written
-- before a column was added (columns.py lists them) reads it as NULL.

-- step: columns
DESCRIBE {{files}}

-- step: as_is
CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT * FROM {{files}}

-- step: with_added
CREATE OR REPLACE TEMP VIEW {{view}} AS SELECT *, {{added}} FROM {{files}}
