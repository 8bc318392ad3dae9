"""`torchci query "SQL"`: DuckDB SQL over the lake, local or on S3, printed as a table.

Every lake table is a view of the same name with its Hive `day` column (a DATE) (only those the
query names, when it names any: a view on S3 reads its files' footers), so ad-hoc slicing needs
no setup: `torchci query "SELECT platform, count(*) FROM workflow_job
WHERE day >= '2026-11-01' GROUP BY ALL"`. The connection is in memory and reads Parquet only,
so a query never takes a lock a running materialization could wait on.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import decimal
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from torchci_assets.cli_values import at_least_one, folder_problem

if TYPE_CHECKING:
    import duckdb

    from resources.lake import Lake

FETCH_ROWS = 10_000
MAX_CELL = 60
NO_STATEMENT = "torchci query: no SQL statement to run (the text is empty or only comments)"


def named_in(sql: str, table: str) -> bool:
    """Whether the SQL text names `table` as a word (bare or quoted, any case)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(table)}(?![A-Za-z0-9_])", sql, re.IGNORECASE) is not None


def register_lake(con: duckdb.DuckDBPyConnection, lake: Lake, start: str | None = None,
                  end: str | None = None, sql: str | None = None) -> list[str]:
    """Create a view per lake table over its days in [start, end]; returns the view names. With
    `sql`, only the tables it names, when it names any: on S3 a view reads every footer of its
    files, so viewing the whole lake for a query of one table cost what the lake holds (18 s on a
    4-day lake on a local S3 server). SQL naming none (`SHOW TABLES`) gets every table."""
    tables = lake.tables()
    if sql is not None and any(named_in(sql, t) for t in tables):
        tables = [t for t in tables if named_in(sql, t)]
    names = []
    for table in tables:
        days = [d for d in lake.days(table) if (start is None or d >= start) and (end is None or d <= end)]
        if days and lake.register(con, table, days):
            names.append(table)
    return names


def _json_value(value):
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, dt.timedelta)):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _cell(value) -> str:
    text = "NULL" if value is None else value.isoformat(sep=" ") if isinstance(value, dt.datetime) else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def format_table(columns: Sequence[str], rows: Sequence[Sequence], more: bool = False) -> str:
    """A fixed-width text table; numbers are right-aligned, long cells cut, NULL shown as NULL."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row[i], (int, float, decimal.Decimal)) and not isinstance(row[i], bool)
                   for row in rows if row[i] is not None) and any(row[i] is not None for row in rows)
               for i in range(len(columns))]

    def line(values):
        return " | ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(columns), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} rows shown, more not printed: use --max-rows or --format csv)" if more
               else f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _batches(cur: duckdb.DuckDBPyConnection) -> Iterable[list[tuple]]:
    while batch := cur.fetchmany(FETCH_ROWS):
        yield batch


def no_statement(sql: str) -> bool:
    """Whether the text is only whitespace, `--` and `/* */` comments and semicolons, so the usage error
    comes before DuckDB loads. Text this cannot read (a nested comment, say) is left to DuckDB, which
    runs nothing for it and gets the same answer."""
    return not re.sub(r"--[^\n]*|/\*.*?\*/|;|\s", "", sql, flags=re.DOTALL)


def _day(text: str) -> str:
    """A day as the partitions name it; anything else is a usage error (compared as text, a day
    written another way would silently select no partition)."""
    try:
        day = dt.date.fromisoformat(text).isoformat()
    except ValueError:
        day = None
    if day != text:  # Python also reads 20261128: not how a partition is named
        raise argparse.ArgumentTypeError(f"{text!r} is not a day: use YYYY-MM-DD")
    return day


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torchci query", description=__doc__.split("\n\n")[0])
    p.add_argument("sql", help="DuckDB SQL; every lake table is a view with a `day` column")
    p.add_argument("--lake", help="lake root, a path or s3://bucket/prefix (default: $TORCHCI_LAKE_URI or ./var/lake)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (default), csv with a header, or json (one object per line)")
    p.add_argument("--from", dest="start", type=_day, help="first day the views cover (YYYY-MM-DD; default: all)")
    p.add_argument("--to", dest="end", type=_day, help="last day the views cover (YYYY-MM-DD; default: all)")
    p.add_argument("--max-rows", type=at_least_one("rows"), default=100,
                   help="rows printed by --format table (default 100)")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if no_statement(args.sql):
        print(NO_STATEMENT, file=sys.stderr)
        return 2
    if args.lake and "://" in args.lake and (problem := folder_problem("--lake", args.lake)):
        print(f"torchci query: {problem}", file=sys.stderr)
        return 2
    return _query(args)


def _query(args: argparse.Namespace) -> int:
    """Run the parsed command: DuckDB, pyarrow and Dagster (for the configured lake) load only now,
    so `--help` and usage errors answer without them."""
    import duckdb

    from resources.lake import Lake, connect
    from resources.uris import resolved_uri

    lake = Lake.at(args.lake or resolved_uri("TORCHCI_LAKE_URI"))
    if lake.store.is_local and not Path(lake.store.root).is_dir():
        print(f"torchci query: no lake at {lake.store.display()} (`make run` makes one; or set --lake or "
              "TORCHCI_LAKE_URI)", file=sys.stderr)
        return 2
    con = connect()
    try:
        try:
            views = register_lake(con, lake, args.start, args.end, args.sql)
        except OSError as exc:  # e.g. an s3:// lake that cannot be listed
            print(f"torchci query: cannot read the lake at {lake.store.display()}: {exc}", file=sys.stderr)
            return 1
        try:
            cur = con.execute(args.sql)
        except duckdb.Error as exc:
            within = (f" with a partition in {args.start}..{args.end}" if args.start and args.end else
                      f" with a partition from {args.start}" if args.start else
                      f" with a partition up to {args.end}" if args.end else "")
            tables = [t for t in lake.tables() if any((args.start is None or d >= args.start)
                                                      and (args.end is None or d <= args.end) for d in lake.days(t))]
            hint = f"\ntables in {lake.store.display()}{within}: {', '.join(tables) or 'none'}"
            print(f"torchci query: {exc}{hint}", file=sys.stderr)
            return 1
        if cur is None:  # DuckDB runs nothing for empty text or only comments
            print(NO_STATEMENT, file=sys.stderr)
            return 2
        columns = [d[0] for d in cur.description]
        out = sys.stdout
        if args.format == "table":
            rows = cur.fetchmany(args.max_rows + 1)
            print(format_table(columns, rows[: args.max_rows], more=len(rows) > args.max_rows), file=out)
        elif args.format == "csv":
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(columns)
            for batch in _batches(cur):
                writer.writerows(batch)
        else:
            for batch in _batches(cur):
                for row in batch:
                    out.write(json.dumps(dict(zip(columns, row)), default=_json_value) + "\n")
        return 0
    finally:
        con.close()
