"""A `torchci` command answers `--help` and a usage error before it loads Dagster or the data
libraries (about 1.5 CPU-s of imports): a user who mistypes an option is told at once. Each
case runs the real entry point in a fresh interpreter and lists the heavy packages it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchci_assets.cli import SUBCOMMANDS

HEAVY = ("dagster", "pandas", "pyarrow", "duckdb", "uvicorn", "sqlalchemy")
MARK = "LOADED "

# Calls the entry point as the `torchci` script does, then prints the heavy packages it loaded.
PROBE = f"""
import sys
from torchci_assets.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print({MARK!r} + __import__("json").dumps([code, loaded]), file=sys.stderr)
"""


def probe(tmp_path: Path, *args: str, **settings: str) -> tuple[int, list[str], str, str]:
    """(exit status, heavy packages loaded, stdout, stderr without the probe's line) of `torchci ARGS`,
    with the settings of a fresh checkout (none set: the preflight passes) and `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_", "GITHUB_"))}
    env.update(settings)
    out = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    lines = out.stderr.splitlines()
    assert lines and lines[-1].startswith(MARK), out.stderr
    code, loaded = json.loads(lines[-1].removeprefix(MARK))
    return code, loaded, out.stdout, "\n".join(lines[:-1])


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_help_prints_the_usage_without_loading_dagster_or_the_data_libraries(tmp_path, command):
    code, loaded, out, err = probe(tmp_path, command, "--help")
    assert (code, loaded, err) == (0, [], "")
    assert out.startswith(f"usage: torchci {command} ")


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_a_bad_option_is_a_usage_error_without_loading_dagster_or_the_data_libraries(tmp_path, command):
    code, loaded, out, err = probe(tmp_path, command, "--no-such-option")
    assert (code, loaded, out) == (2, [], "")
    assert err.startswith(f"usage: torchci {command} ") and f"torchci {command}: error: " in err


@pytest.mark.parametrize("args,message", [
    pytest.param(("simulate", "--out", "sample", "--days", "0"), "torchci simulate: error: --days must be >= 1",
                 id="simulate-days"),
    pytest.param(("backfill", "--repo", "no-slash", "--days", "1"), "torchci backfill: error: ", id="backfill-repo"),
    pytest.param(("backfill", "--repo", "pytorch/pytorch", "--days", "0"),
                 "torchci backfill: error: --days must be at least 1", id="backfill-days"),
    pytest.param(("shard-plan", "--test-times", "t.json", "--build-env", "e", "--test-config", "c", "--shards", "0",
                  "--tests", "list.txt"), "torchci shard-plan: --shards must be at least 1, got 0", id="shard-plan"),
    pytest.param(("query", "SELECT 1", "--from", "20261128"),
                 "torchci query: error: argument --from: '20261128' is not a day", id="query-from"),
    pytest.param(("serve", "--port", "http"), "torchci serve: error: argument --port: ", id="serve-port"),
    pytest.param(("simulate", "--out", "sample", "--test-files", "0"),
                 "torchci simulate: error: --test-files must be at least 1, got 0", id="simulate-counts"),
    pytest.param(("query", " -- nothing but a comment;\n"),
                 "torchci query: no SQL statement to run (the text is empty or only comments)", id="query-empty"),
])
def test_a_usage_error_that_needs_no_data_is_said_without_loading_them(tmp_path, args, message):
    code, loaded, out, err = probe(tmp_path, *args)
    assert (code, loaded, out) == (2, [], "")
    assert message in err


def test_the_command_list_and_the_version_load_none_of_them(tmp_path):
    assert probe(tmp_path, "--help")[:2] == (0, [])
    assert probe(tmp_path, "--version")[:2] == (0, [])
    assert probe(tmp_path, "no-such-command")[:2] == (2, [])


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_first_day_that_is_no_day_is_said_without_loading_them(tmp_path, command):
    code, loaded, out, err = probe(tmp_path, command, TORCHCI_FIRST_DAY="yesterday")
    assert (code, loaded) == (2, [])
    assert "TORCHCI_FIRST_DAY='yesterday' is not a day: use YYYY-MM-DD" in err


def test_a_range_with_no_archive_day_is_said_without_loading_dagster(tmp_path):
    """`torchci run --from DAY` past the archive's last day: the archive is listed (pyarrow's file
    system) and nothing else is loaded to say so."""
    (tmp_path / "archive" / "webhooks" / "day=2026-11-02").mkdir(parents=True)
    code, loaded, out, err = probe(tmp_path, "run", "--from", "2026-12-01",
                                   TORCHCI_ARCHIVE_URI=str(tmp_path / "archive"))
    assert (code, out) == (1, "")
    assert set(loaded) <= {"pyarrow"}, loaded
    assert err.strip() == (f"torchci run: no archive day from 2026-12-01: {tmp_path / 'archive'} has 1 day(s), "
                           "2026-11-02..2026-11-02")


def test_an_archive_folder_simulate_cannot_make_is_said_without_loading_them(tmp_path):
    code, loaded, out, err = probe(tmp_path, "simulate", "--out", "/proc/no-such-archive", "--days", "1")
    assert (code, loaded, out) == (1, [], "")
    assert err.startswith("torchci simulate: cannot write /proc/no-such-archive: "), err
