"""No function of the code location is over 60 lines: a longer one is doing several things, and
each of them deserves a name (SQL text lives in .sql files, so it does not count here)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torchci_assets", "jobs", "resources")
MAX_LINES = 60


def long_functions(source: str, filename: str = "<module>") -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function or method longer than MAX_LINES."""
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source, filename))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_LINES]


def test_no_function_is_over_60_lines():
    offenders = [f"{p.relative_to(ROOT)}:{line} {name} ({length} lines)"
                 for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
                 for name, line, length in long_functions(p.read_text(), str(p))]
    assert not offenders, "split these functions:\n" + "\n".join(offenders)


def test_the_check_counts_a_long_function_and_its_decorators_not():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert long_functions(f"@decorator\ndef f():\n{body}\n") == [("f", 2, MAX_LINES + 1)]
    short = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    assert long_functions(f"class C:\n    def m(self):\n    {short.replace(chr(10), chr(10) + '    ')}\n") == []
