"""SQL lives in `.sql` files beside the domain that runs it; this module reads them and binds values.

Why files: a query reads as SQL (an editor highlights it, a reviewer diffs it) and a value never
becomes SQL text. Values (days, repositories, thresholds, lists of workflows) are bound as DuckDB
parameters, `$name` in the file. What parameters cannot express (a table or column name, a list
of columns chosen at run time) fills a `{{slot}}` through `compose`, which accepts only quoted
identifiers, type names and quoted literals; `tests/test_sql_files.py` fails if a module formats anything into SQL itself.

A file may hold several statements, each after a `-- step: <name>` line; `steps` returns them
in order (a pipeline of temp tables, each reading the ones before).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# a string literal, a comment, or a parameter: only the last counts
_TOKENS = re.compile(r"'(?:[^']|'')*'|--[^\n]*|(?<![\w$])\$([A-Za-z_]\w*)")
_STEP = re.compile(r"^-- step: (\w+)\s*$", re.MULTILINE)
# a string literal or a quoted identifier (kept as written), else a run of comments and white space
_LAYOUT = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|((?:--[^\n]*|\s)+)")
_SLOT = re.compile(r"\{\{(\w+)\}\}")
_TYPE = re.compile(r"[A-Z]+(\[\])?")


@functools.cache
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


class SqlFiles:
    """The `sql/` folder beside a module (`SqlFiles(__file__)`); each file is read once per process."""

    def __init__(self, module_file: str, folder: str = "sql"):
        self.folder = Path(module_file).resolve().parent / folder

    def __getitem__(self, name: str) -> str:
        return _read(self.folder / f"{name}.sql")

    def steps(self, name: str) -> list[tuple[str, str]]:
        """The `-- step: <name>` statements of a file, in order."""
        parts = _STEP.split(self[name])
        if parts[0].strip() and not parts[0].strip().startswith("--"):
            raise ValueError(f"{name}.sql: text before its first '-- step:' line")
        return [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts), 2)]


def statements_only(sql: str) -> str:
    """The SQL without its comments and with one space for each run of white space (not inside a
    quoted literal or identifier): what a digest of what the SQL does should be taken of, so that
    rewording a comment or re-indenting does not make results look written by other SQL."""
    return _LAYOUT.sub(lambda m: " " if m.group(1) is not None else m.group(0), sql).strip()


def parameters(sql: str) -> set[str]:
    """The `$name` parameters a statement reads (not those in its comments or string literals)."""
    return {m.group(1) for m in _TOKENS.finditer(sql) if m.group(1)}


def bind(sql: str, values: Mapping[str, object] | None) -> dict[str, object] | None:
    """The values the statement names, and only those (DuckDB refuses extra ones); a missing one
    is an error here rather than a NULL."""
    names = parameters(sql)
    missing = names - set(values or {})
    if missing:
        raise KeyError(f"SQL parameters without a value: {sorted(missing)}")
    return {n: values[n] for n in names} if names else None


def execute(con, sql: str, values: Mapping[str, object] | None = None):
    """Run one statement with its parameters bound; returns DuckDB's cursor."""
    params = bind(sql, values)
    return con.execute(sql, params) if params else con.execute(sql)


def relation(con, sql: str, values: Mapping[str, object] | None = None):
    """A DuckDB relation over one query with its parameters bound."""
    params = bind(sql, values)
    return con.sql(sql, params=params) if params else con.sql(sql)


def run_steps(con, steps: Iterable[tuple[str, str]], values: Mapping[str, object] | None = None) -> None:
    for _, sql in steps:
        execute(con, sql, values)


def identifier(name: str) -> str:
    """`name` as one quoted identifier (a lake table may be any folder name, `odd-name` too): its
    double quotes doubled, so it can never end the identifier early; an empty name is refused."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"not an SQL identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


class Literals(tuple):
    """Strings to write as quoted SQL literals where DuckDB takes no parameter (a view's file list)."""


class Columns(dict):
    """Column name -> DuckDB type name, for a typed empty relation (`NULL::TYPE AS name, ...`)."""


def literal(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _typed_null(name: str, type_name: str) -> str:
    if not _TYPE.fullmatch(type_name):
        raise ValueError(f"not a plain DuckDB type name: {type_name!r}")
    return f"NULL::{type_name} AS {identifier(name)}"


def compose(sql: str, **slots: str | Iterable[str]) -> str:
    """Fill the `{{slot}}`s of `sql`: a name or names (quoted identifiers, joined by commas),
    `Literals` (quoted string literals) or `Columns` (typed NULL columns).

    The one place SQL text is built at run time: it admits identifiers, type names and quoted
    literals, never raw text."""
    def fill(match: re.Match) -> str:
        value = slots[match.group(1)]
        if isinstance(value, Columns):
            parts = [_typed_null(n, t) for n, t in value.items()]
        elif isinstance(value, Literals):
            parts = [literal(v) for v in value]
        else:
            parts = [identifier(n) for n in ([value] if isinstance(value, str) else value)]
        if not parts:
            raise ValueError(f"slot {match.group(1)} is empty")
        return ", ".join(parts)
    return _SLOT.sub(fill, sql)
