"""The `torchci` command at its edges: empty input, days the archive does not have, a build
environment no file knows, a log no rule explains (tests/test_job_failure.py), the version, and
help text on every option."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchci_assets.cli import SUBCOMMANDS

TORCHCI = str(Path(sys.executable).parent / "torchci")


def torchci(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_"))}
    return subprocess.run([TORCHCI, *args], env={**clean, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment", ";"])
def test_query_without_a_statement_says_so(tmp_path, sql):
    out = torchci("query", sql, "--lake", str(tmp_path), cwd=tmp_path)
    assert (out.returncode, out.stderr.strip()) == (
        2, "torchci query: no SQL statement to run (the text is empty or only comments)")
    assert "Traceback" not in out.stderr


def test_run_outside_the_archive_s_days_names_the_days_it_has(tmp_path):
    for day in ("2026-11-20", "2026-11-22"):
        (tmp_path / "archive" / "webhooks" / f"day={day}").mkdir(parents=True)
    out = torchci("run", "--from", "2099-01-01", cwd=tmp_path, TORCHCI_ARCHIVE_URI=str(tmp_path / "archive"),
                  TORCHCI_LAKE_URI=str(tmp_path / "lake"), TORCHCI_OUTPUTS_URI=str(tmp_path / "outputs"))
    assert out.returncode == 1
    assert out.stderr.strip() == (f"torchci run: no archive day from 2099-01-01: {tmp_path / 'archive'} has "
                                  "2 day(s), 2026-11-20..2026-11-22")


def test_shard_plan_names_the_known_build_envs_for_an_unknown_one_and_refuses_an_empty_list(tmp_path):
    """A build_env without times is planned from estimates (a new one has none yet), so the plan
    succeeds, but the warning names the build environments the files do have: a typo shows."""
    times = tmp_path / "test-times.json"
    times.write_text(json.dumps({"linux-jammy-py3.10-gcc11": {"default": {"test_ops": 600.0, "test_nn": 300.0}},
                                 "default": {"default": {"test_ops": 500.0}}}))
    (tmp_path / "tests.txt").write_text("test_ops\ntest_nn\n")
    (tmp_path / "none.txt").write_text("# nothing\n\n")
    base = ["shard-plan", "--test-times", str(times), "--test-config", "default", "--shards", "2"]
    typo = torchci(*base, "--build-env", "linux-jammy-py3.10-gcc1", "--tests", str(tmp_path / "tests.txt"),
                   cwd=tmp_path)
    assert typo.returncode == 0 and "shard 1:" in typo.stdout
    assert typo.stderr.strip().endswith("No file has build_env 'linux-jammy-py3.10-gcc1'; they have: "
                                        "linux-jammy-py3.10-gcc11")
    known = torchci(*base, "--build-env", "linux-jammy-py3.10-gcc11", "--test-config", "distributed",
                    "--tests", str(tmp_path / "tests.txt"), cwd=tmp_path)  # a new config of a known build_env
    assert known.returncode == 0 and "No file has build_env" not in known.stderr
    empty = torchci(*base, "--build-env", "linux-jammy-py3.10-gcc11", "--tests", str(tmp_path / "none.txt"),
                    cwd=tmp_path)
    assert (empty.returncode, empty.stdout, empty.stderr.strip()) == (
        2, "", f"torchci shard-plan: --tests {tmp_path / 'none.txt'}: no test file listed")


def test_version(tmp_path):
    out = torchci("--version", cwd=tmp_path)
    assert out.returncode == 0
    name, version, dagster = out.stdout.split(maxsplit=2)
    assert name == "torchci" and version[0].isdigit() and dagster.strip() == "(dagster 1.13.27)"


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_option_of_every_command_has_help(command, monkeypatch):
    """The parser each subcommand builds, caught as it parses: each option says what it is for."""
    def capture(self, args=None, namespace=None):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(SUBCOMMANDS[command][0]).main(["--help"])
    missing = [a.dest for a in parsed.value.parser._actions if not a.help and a.dest != "help"]
    assert missing == [], f"torchci {command}: options without help: {missing}"
