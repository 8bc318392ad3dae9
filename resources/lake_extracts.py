"""Small extracts of a lake table's big files, made once per file and kept beside their reader's
partitions, so that a query over a window of days scans only the files that are new or rewritten.

Why: some readers want a few thousand rows of a big table over a window of days, at every refresh:
Dr. CI the failures of `test_results` (millions of rows a day), the disabled tests' lifecycle the
rows of PyTorch's rerun_disabled_tests jobs and when each test last reported (`test_daily_stats`,
over five weeks). Scanning the window costs what the window holds, at every refresh, though only
today's files changed.

An extract's file of one source file is `<home>/day=<the source's day>/_<name>-<digest>.pq`: under
the reading asset's own table (`home`), hidden from that table's readers (a leading `_` and not
`.parquet`), named by a digest of the source file and of the extract's query (`Lake.files_digest`:
the file's place and Parquet footer, which every rewrite changes; a new version of the query makes
its own extracts, never reads an older one's). A file already extracted is not read again, a
rewritten or new one is, and extracts whose source is gone are removed. A reader of the extracts
gets what it would get from the sources: an extract holds the rows its reader wants (a filter), or
their per-key maxima when those are all it takes of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.parquet as pq

from resources.lake import Lake, connect
from resources.sql import SqlFiles, relation


@dataclass(frozen=True)
class Extract:
    name: str        # its `<name>.sql` in `sql` (a query over view `src`, one source file), and its files' prefix
    table: str       # the table it is extracted from
    home: str        # the table beside whose partitions its files are kept: its reader's
    sql: SqlFiles

    @property
    def query(self) -> str:
        return self.sql[self.name]


def register_extract(con, lake: Lake, extract: Extract, days: list[str], name: str) -> int:
    """View `name` over the extract of `extract.table`'s files of `days` (extracting the files
    not extracted yet); returns the number of files (0: no view, as `Lake.register`)."""
    files = [f for day in days for f in day_extracts(lake, extract, day)]
    return lake.register_files(con, files, name)


def day_extracts(lake: Lake, extract: Extract, day: str) -> list[str]:
    """The full paths of the extracts of the source files of `day`, up to date."""
    folder = f"{extract.home}/day={day}"
    prefix = f"_{extract.name}-"
    settings = {"query": extract.query}
    wanted = {f"{prefix}{lake.files_digest([src], settings)[:32]}.pq": src
              for src in lake.files(extract.table, [day])}
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
    table = relation(con, extract.query).to_arrow_table()
    with lake.store.atomic_output(rel, lake.owner) as out:
        pq.write_table(table, out)
