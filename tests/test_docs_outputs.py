"""What the docs list of the lake and the published files is what the code writes: a docs table of a
lake table's columns names every column and no other, the HUD's pages are all in the list of
published files, and every hidden extract a step keeps beside a table is named where the docs say
what may be deleted. Each list was written once and then missed a column, a page or an extract
added later, so each is checked against the code here."""

import re
import sys
from pathlib import Path

from test_docs import DOCS, ROOT, repository  # noqa: F401  (the fixture)

from resources.lake_extracts import Extract
from torchci_assets.derived.hud.pages import _NAV
from torchci_assets.derived.site.site import PAGE_FOLDERS, SITE_DIR
from torchci_assets.lake_columns import table_docs


def listed_columns(cell: str) -> list[str]:
    """The column names of a docs table's `columns` cell: `a, b (what b says), c; of a kind of row: d`."""
    without_notes = re.sub(r"\([^()]*\)", "", cell)
    return [piece.rpartition(":")[2].strip() for piece in re.split(r"[,;]", without_notes) if piece.strip()]


def column_tables(text: str) -> dict[str, list[str]]:
    """Table name -> the columns listed, of each `| table | one row per | columns |` table in `text`."""
    found = {}
    for block in re.findall(r"^\| table \| one row per \| columns \|\n\|[-| ]+\|\n((?:\|.*\n?)+)", text, re.M):
        for row in block.splitlines():
            cells = [c.strip() for c in row.strip("|").split(" | ")]
            found[cells[0].strip("`")] = listed_columns(cells[-1])
    return found


def wrong_columns(text: str, described: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
    """Per table: (columns listed that it lacks, columns it has that are not listed)."""
    wrong = {}
    for table, listed in column_tables(text).items():
        has = described.get(table, [])
        extra, missing = sorted(set(listed) - set(has)), sorted(set(has) - set(listed))
        if extra or missing:
            wrong[table] = (extra, missing)
    return wrong


def test_the_column_check_reads_notes_and_kinds_of_rows():
    doc = ("| table | one row per | columns |\n|---|---|---|\n"
           "| `t` | thing | a, b (a note, with a comma; and more), c; of an `x` row: d (its note) |\n"
           "| `u` | other | e, gone |\n\nafter")
    assert column_tables(doc) == {"t": ["a", "b", "c", "d"], "u": ["e", "gone"]}
    assert wrong_columns(doc, {"t": ["a", "b", "c", "d"], "u": ["e", "f"]}) == {"u": (["gone"], ["f"])}


def test_the_column_tables_of_the_docs_list_each_tables_columns():
    described = {name: list(doc.columns) for name, doc in table_docs().items()}
    texts = [path.read_text() for path in DOCS]
    assert sum(len(column_tables(text)) for text in texts) >= 3
    assert {str(p.relative_to(ROOT)): w for p, t in zip(DOCS, texts) if (w := wrong_columns(t, described))} == {}


def test_every_page_of_the_hud_is_in_the_list_of_published_files():
    outputs = (ROOT / "docs" / "outputs.md").read_text()
    row = next(line for line in outputs.splitlines() if line.startswith(f"| `{SITE_DIR}/index.html`"))
    named = set(re.findall(rf"`{SITE_DIR}/([^`]+)`", row.split(" | ")[0]))
    pages = {page.partition("#")[0] for page, _ in _NAV}
    assert {"index.html", "autorevert.html"} <= pages
    assert sorted(pages - named) == []
    assert sorted(f for f in PAGE_FOLDERS if not any(n.startswith(f"{f}/") for n in named)) == []


def test_every_extract_kept_beside_a_table_is_named_in_the_docs(repository):
    """`repository` loads every module of the code location, so every Extract is defined by then."""
    extracts = {value for module in list(sys.modules.values())
                if (getattr(module, "__name__", "") or "").startswith("torchci_assets")
                for value in vars(module).values() if isinstance(value, Extract)}
    assert {"test_failures", "rerun_results"} <= {e.name for e in extracts}
    shown = " ".join(path.read_text() for path in DOCS)
    assert sorted(f"{e.home}: _{e.name}" for e in extracts if f"`_{e.name}-<digest>.pq`" not in shown
                  and f"/_{e.name}-<digest>.pq`" not in shown) == []
