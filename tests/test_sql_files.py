"""SQL lives in .sql files and values are bound, never formatted into SQL text.

The source check parses every module of the code location and flags an f-string, a `.format`,
a `%` or a `+` whose literal text reads as SQL: that is how a configuration value (a repository,
a day, a list of workflows) ends up pasted into a query. The one place that may build SQL text is
`resources/sql.py`'s `compose`, which admits plain identifiers only.
"""

import ast
import re
from pathlib import Path

import duckdb
import pytest

from resources.sql import Columns, Literals, SqlFiles, bind, compose, execute, identifier, parameters, relation, run_steps

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torchci_assets", "jobs", "resources")
ALLOWED = {"resources/sql.py"}

# Upper-case keywords as this code base writes SQL, and lower-case statements too.
_SQL = re.compile(
    r"\b(SELECT|FROM|WHERE|JOIN|GROUP BY|ORDER BY|HAVING|UNION|CREATE|INSERT|COPY|ATTACH|PRAGMA|"
    r"FILTER \(|CASE WHEN|INTERVAL|TIMESTAMPTZ '|DATE '|SET \w+ =)"
    r"|(?i:\bselect\b[\s\S]*\bfrom\b|\b(create|insert|copy)\b[\s\S]*\b(table|view|into|to)\b)"
)


def _literal_text(node: ast.AST) -> str | None:
    """The constant text of a string-building expression, if it builds one from a non-constant."""
    if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
        return node.func.value.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        sides = [s for s in (node.left, node.right) if isinstance(s, ast.Constant) and isinstance(s.value, str)]
        if sides and len(sides) < 2:
            return sides[0].value
    return None


def _named_strings(tree: ast.AST) -> dict[str, str]:
    """Names assigned a string constant anywhere in the module (`_QUERY = "SELECT ..."`)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def sql_formatting(source: str, filename: str = "<module>") -> list[tuple[int, str]]:
    """(line, text) of each expression that formats something into SQL text, including a
    `.format` or `%` applied to a name that holds a string."""
    tree = ast.parse(source, filename)
    named = _named_strings(tree)
    found = []
    for node in ast.walk(tree):
        text = _literal_text(node)
        if text is None and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "format" and isinstance(node.func.value, ast.Name):
            text = named.get(node.func.value.id)
        if text is None and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) \
                and isinstance(node.left, ast.Name):
            text = named.get(node.left.id)
        if text and _SQL.search(text):
            found.append((node.lineno, " ".join(text.split())[:80]))
    return found


def long_sql_strings(source: str, filename: str = "<module>") -> list[tuple[int, str]]:
    """(line, text) of each string constant of more than two lines that is a query (docstrings
    aside): a query that long belongs in a .sql file."""
    tree = ast.parse(source, filename)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, " ".join(n.value.split())[:80]) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
            and len(n.value.strip().splitlines()) > 2 and re.search(r"(?i)\bselect\b[\s\S]*\bfrom\b", n.value)]


def _modules() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]


def test_no_module_formats_values_into_sql():
    offenders = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in _modules()
                 if str(p.relative_to(ROOT)) not in ALLOWED
                 for line, text in sql_formatting(p.read_text(), str(p))]
    assert not offenders, "SQL built with formatting (bind $parameters, or compose identifiers):\n" + \
        "\n".join(offenders)


def test_queries_of_more_than_two_lines_live_in_sql_files():
    offenders = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in _modules()
                 for line, text in long_sql_strings(p.read_text(), str(p))]
    assert not offenders, "move these queries to a .sql file beside the module:\n" + "\n".join(offenders)
    assert long_sql_strings('Q = """\n  SELECT a\n  FROM t\n  WHERE b\n"""')
    assert not long_sql_strings('def f():\n    """Reads\n    SELECT a\n    FROM t."""')


@pytest.mark.parametrize("source", [
    "con.execute(f\"SELECT * FROM push WHERE lower(repo) = lower('{upstream_repo}')\")",
    "sql = f'''\n  SELECT sha\n  FROM heads WHERE ref IN {sql_list(branches)}\n'''",
    "con.execute('DELETE FROM t WHERE day = %s' % day)",
    "q = 'SELECT * FROM t WHERE a IN ({})'.format(values)",
    "q = \"select x from t where repo = '\" + repo + \"'\"",
    "con.execute(f\"SET memory_limit = '{limit}'\")",
    "q = f\"CREATE TEMP VIEW {name} AS SELECT 1\"",
    "_Q = 'SELECT * FROM t WHERE x > {limit}'\ncon.execute(_Q.format(limit=n))",
    "_Q = 'SELECT * FROM t WHERE repo = %s'\ncon.execute(_Q % repo)",
])
def test_the_check_flags_values_formatted_into_sql(source):
    assert sql_formatting(source), source


@pytest.mark.parametrize("source", [
    "msg = f'{table} has no partition for {day} in {where}: materialize it first'",
    "log.info(f'selected {n} tests from {m} files')",
    "con.execute('SELECT * FROM heads WHERE sha = $sha', {'sha': sha})",
    "path = f'{table}/day={day}/{part}.parquet'",
])
def test_the_check_lets_plain_text_and_bound_sql_through(source):
    assert not sql_formatting(source), source


def test_every_sql_file_is_utf8_and_its_steps_parse():
    files = sorted(f for package in PACKAGES for f in (ROOT / package).rglob("sql/*.sql"))
    assert files, "no .sql files found"
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert text.strip(), f
        if "-- step:" in text:
            steps = SqlFiles(str(f.parent.parent / "module.py")).steps(f.stem)
            assert steps and all(sql for _, sql in steps), f


def test_no_query_ranks_a_job_or_run_state_its_own_way():
    """Which of a job's deliveries holds its state is the lake's one rule, status_rank
    (resources/lake_sql/status_rank.sql): a query with a ranking of its own would keep another
    state of the same job than the others (ten did, in three variants, before it)."""
    own = re.compile(r"CASE\s+(\w+\.)?status\s+WHEN\s+'completed'", re.I)
    files = sorted(f for package in PACKAGES for f in (ROOT / package).rglob("*.sql"))
    assert any(f.name == "status_rank.sql" for f in files)
    offenders = [f.relative_to(ROOT) for f in files if f.name != "status_rank.sql" and own.search(f.read_text())]
    assert not offenders, offenders


def test_steps_bind_only_what_each_statement_names(tmp_path):
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "pipe.sql").write_text(
        "-- a pipeline\n-- step: a\nCREATE TEMP TABLE a AS SELECT $x::INTEGER AS v\n"
        "-- step: b\nCREATE TEMP TABLE b AS SELECT v + $y AS v FROM a WHERE list_contains($names, 'o''k')\n")
    files = SqlFiles(str(tmp_path / "module.py"))
    assert [n for n, _ in files.steps("pipe")] == ["a", "b"]
    con = duckdb.connect()
    run_steps(con, files.steps("pipe"), {"x": 1, "y": 2, "names": ["o'k"], "unused": 3})
    assert con.execute("SELECT v FROM b").fetchall() == [(3,)]
    assert relation(con, "SELECT v * $k AS w FROM b", {"k": 5}).fetchall() == [(15,)]
    with pytest.raises(KeyError, match="without a value"):
        execute(con, "SELECT $missing")


def test_a_value_that_looks_like_sql_stays_a_value():
    con = duckdb.connect()
    hostile = "x') OR 1=1 --"
    assert execute(con, "SELECT lower($repo) = lower('x')", {"repo": hostile}).fetchall() == [(False,)]


def test_parameters_ignore_dollars_that_are_not_parameters():
    assert parameters("SELECT $a, $$b$$, x$c, $d_2 FROM t") == {"a", "d_2"}
    assert parameters("-- $in_comment\nSELECT '$in_literal', 'it''s $x', $real -- $after") == {"real"}
    assert bind("SELECT 1", {"a": 1}) is None


def test_compose_quotes_identifiers():
    assert compose("SELECT {{cols}} FROM {{view}}", cols=["job_id", "run_attempt"], view="t") == \
        'SELECT "job_id", "run_attempt" FROM "t"'
    # any name is one identifier: what would end it early is doubled
    assert identifier('x"; DROP TABLE t; --') == '"x""; DROP TABLE t; --"'
    con = duckdb.connect()
    con.execute(compose("CREATE TABLE {{t}} AS SELECT 1 AS {{c}}", t='odd-"name', c="a b"))
    assert con.execute('SELECT "a b" FROM "odd-""name"').fetchall() == [(1,)]
    for bad in ["", "a\x00b"]:
        with pytest.raises(ValueError):
            identifier(bad)
    with pytest.raises(ValueError):
        compose("SELECT {{cols}} FROM t", cols=[])


def test_compose_quotes_literals_and_checks_type_names():
    con = duckdb.connect()
    paths = Literals(["a.parquet", "it's.parquet"])
    assert compose("SELECT [{{files}}]", files=paths) == "SELECT ['a.parquet', 'it''s.parquet']"
    assert con.execute(compose("SELECT [{{files}}]", files=paths)).fetchall() == [(["a.parquet", "it's.parquet"],)]
    sql = compose("SELECT {{cols}} WHERE false", cols=Columns({"job_id": "BIGINT", "tests": "VARCHAR[]"}))
    assert [d[0] for d in con.execute(sql).description] == ["job_id", "tests"]
    with pytest.raises(ValueError):
        compose("SELECT {{cols}}", cols=Columns({"x": "INT) ; DROP TABLE t; --"}))
