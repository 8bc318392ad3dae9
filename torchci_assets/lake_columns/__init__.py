"""What each lake table and column means, for the Dagster UI's Columns view and docs/tables.md.

One source: the YAML files beside this module, one per group of tables, each mapping a table to
`about` (what one row is, its key, what writes it) and `columns` (column -> its meaning). They are
read once per process. A table written by two groups' files would have two meanings, so it is an
error, as is an entry of another shape (a misspelt key would otherwise leave a table undescribed
without a word).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

FOLDER = Path(__file__).parent


@dataclass(frozen=True)
class TableDoc:
    about: str
    columns: dict[str, str]


class LakeColumnsError(ValueError):
    """A lake_columns YAML file that is not in the expected shape."""


@functools.cache
def table_docs(folder: Path = FOLDER) -> dict[str, TableDoc]:
    """Every described table, from all the folder's YAML files (in file name order)."""
    docs: dict[str, TableDoc] = {}
    for path in sorted(folder.glob("*.yaml")):
        for table, entry in _load(path).items():
            if table in docs:
                raise LakeColumnsError(f"{path.name}: table {table} is described in another file too")
            docs[table] = _table_doc(f"{path.name}: {table}", entry)
    return docs


def _load(path: Path) -> dict:
    try:
        # libyaml's parser when PyYAML has it: ~12x less CPU than the pure-Python one, a step's
        # first reading of the descriptions (~0.05 CPU-s)
        loaded = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except yaml.YAMLError as exc:  # a description with ": " in it wants quotes
        raise LakeColumnsError(f"{path.name}: not YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise LakeColumnsError(f"{path.name}: expected tables, each with about and columns")
    return loaded


def _table_doc(where: str, entry) -> TableDoc:
    if not isinstance(entry, dict) or set(entry) != {"about", "columns"}:
        raise LakeColumnsError(f"{where}: expected the keys about and columns")
    about, columns = entry["about"], entry["columns"]
    if not isinstance(about, str) or not about.strip():
        raise LakeColumnsError(f"{where}: about is empty")
    if not isinstance(columns, dict) or not columns:
        raise LakeColumnsError(f"{where}: columns is empty")
    empty = [c for c, text in columns.items() if not isinstance(text, str) or not text.strip()]
    if empty:
        raise LakeColumnsError(f"{where}: no meaning for {', '.join(map(str, empty))}")
    return TableDoc(about.strip(), {str(c): text.strip() for c, text in columns.items()})


def column_description(table: str, column: str) -> str | None:
    """What `column` of lake table `table` means; None when no file describes it."""
    doc = table_docs().get(table)
    return doc.columns.get(column) if doc else None
