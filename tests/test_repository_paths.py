"""The test suite reads nothing outside the repository: a clone anywhere, with nothing beside it,
passes. This guard reads every test module (and the Makefile) as text and fails on a path that
names a machine's home or work folder, the data folder the team keeps beside its checkouts, or a folder above the
repository root (a relative path or a `Path(__file__)` climb that leaves it)."""

import ast
import json
import posixpath
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A machine's own folders: nothing in them travels with a clone.
MACHINE_PATH = re.compile(r"(^|[\s\"'=:(])/(work|home|root|Users|mnt|srv)/|shared[/\\]data")


def escapes_root(text: str, folder: str) -> bool:
    """`text` as a relative path from `folder` (a repository-relative folder) climbs above the root."""
    if ".." not in text.split("/"):
        return False
    return posixpath.normpath(posixpath.join(folder or ".", text)).split("/")[0] == ".."


def parent_climb(node: ast.AST) -> int | None:
    """How many folders `Path(__file__)...parent.parent` or `...parents[n]` climbs, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int) and _from_file(node.value.value):
            return node.slice.value + 1
        return None
    climbed = 0
    while isinstance(node, ast.Attribute) and node.attr == "parent":
        climbed, node = climbed + 1, node.value
    return climbed if climbed and _from_file(node) else None


def _from_file(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(node))


def outside_paths(source: str, rel: str) -> list[str]:
    """The places in one module (at repository path `rel`) that name a path outside the repository."""
    folder = posixpath.dirname(rel)
    depth = len(Path(rel).parts) - 1  # folders between the root and the module
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if MACHINE_PATH.search(node.value) or escapes_root(node.value, folder):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
        climbed = parent_climb(node)
        if climbed is not None and climbed > depth + 1:  # depth + 1 climbs reach the root
            found.append(f"{rel}:{node.lineno}: climbs {climbed} folders from a file {depth} below the root")
    return found


# Samples of code that names paths outside the repository and inside it (data, so that this module
# does not itself name what it looks for; tests/data/path-guard/README.md).
SAMPLES = json.loads((ROOT / "tests" / "data" / "path-guard" / "samples.json").read_text())


@pytest.mark.parametrize("source, rel", SAMPLES["outside"])
def test_the_guard_finds_paths_outside_the_repository(source, rel):
    assert outside_paths(source, rel)


@pytest.mark.parametrize("source, rel", SAMPLES["inside"])
def test_the_guard_lets_paths_inside_the_repository_pass(source, rel):
    assert outside_paths(source, rel) == []


def test_no_test_reads_outside_the_repository():
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("tests/data/"):  # input the tests read, never run
            found += outside_paths(path.read_text(), rel)
    assert found == []


def test_make_test_reads_nothing_outside_the_repository():
    makefile = (ROOT / "Makefile").read_text()
    lines = [line for line in makefile.splitlines()
             if MACHINE_PATH.search(line) or any(escapes_root(word, "") for word in line.split())]
    assert lines == []
