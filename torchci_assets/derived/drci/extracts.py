"""What Dr. CI reads of the day's big tables, extracted once per file: a refresh scans only the
files that are new or rewritten since the last run, not the window.

Dr. CI reads a few thousand rows of `test_results` (the failures, sql/test_failures.sql) and of
`webhook_events` (the pull requests' base shas, sql/pr_bases.sql) out of millions, over a window
of days, every few minutes. Each source file's extract is kept beside the comments, as
`drci_comments/day=<its day>/_<extract>-<digest>.pq` (not `.parquet`: no reader of the table
sees it), named by the source file's digest (its place and Parquet footer, which any rewrite
changes): a file already extracted is not read again, a rewritten or new one is, and extracts
of files no longer there are removed. Reading the extracts is exactly reading the source with
the extract's filter, which every query of inputs.py applies anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.sql import SqlFiles, relation

SQL = SqlFiles(__file__)
HOME = "drci_comments"  # the table beside whose partitions the extracts are kept


@dataclass(frozen=True)
class Extract:
    name: str   # its .sql under sql/, and the prefix of its files
    table: str  # the table it is extracted from


FAILURES = Extract("test_failures", "test_results")
PR_BASES = Extract("pr_bases", "webhook_events")


def register_extract(con, lake: Lake, extract: Extract, days: list[str], name: str) -> int:
    """View `name` over the extract of `extract.table`'s files of `days` (extracting the files
    not extracted yet); returns the number of files (0: no view, as `Lake.register`)."""
    files = [f for day in days for f in day_extracts(lake, extract, day)]
    return lake.register_files(con, files, name)


def day_extracts(lake: Lake, extract: Extract, day: str) -> list[str]:
    """The full paths of the extracts of the source files of `day`, up to date."""
    folder = f"{HOME}/day={day}"
    prefix = f"_{extract.name}-"
    wanted = {f"{prefix}{lake.file_digest(src)[:32]}.pq": src for src in lake.files(extract.table, [day])}
    present = {e.path.rsplit("/", 1)[-1] for e in lake.store.list_folder(folder)}
    missing = sorted((name, src) for name, src in wanted.items() if name not in present)
    if missing:
        con = connect()  # one connection for the day's files: a full run extracts them all
        try:
            for name, src in missing:
                _extract(con, lake, extract, src, f"{folder}/{name}")
        finally:
            con.close()
    for name in sorted(present):
        if name.startswith(prefix) and name.endswith(".pq") and name not in wanted:
            lake.store.delete(f"{folder}/{name}")  # its source was rewritten or removed
    return [lake.store.full(f"{folder}/{name}") for name in sorted(wanted)]


def _extract(con, lake: Lake, extract: Extract, source: str, rel: str) -> None:
    lake.register_files(con, [source], "src")
    table = relation(con, SQL[extract.name]).to_arrow_table()
    with lake.store.atomic_output(rel, lake.owner) as out:
        pq.write_table(table, out)
