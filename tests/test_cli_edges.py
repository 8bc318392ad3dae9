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


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment", ";", "/* a /* nested */ comment */"])
def test_query_without_a_statement_says_so(tmp_path, sql):
    """The nested comment is one the text check leaves to DuckDB: the answer is the same."""
    out = torchci("query", sql, "--lake", str(tmp_path), cwd=tmp_path)
    assert (out.returncode, out.stderr.strip()) == (
        2, "torchci query: no SQL statement to run (the text is empty or only comments)")
    assert "Traceback" not in out.stderr


def test_the_text_check_for_no_statement_never_contradicts_duckdb():
    """`torchci query` answers empty text before DuckDB loads: only text DuckDB would run nothing for
    may be taken as empty, or a query would be refused."""
    import duckdb

    from torchci_assets.query import no_statement

    texts = ["", " \n\t", "-- c", ";", ";; -- c\n;", "/* c */", "/* c */ ; -- d\n", "select 1", "select 1 -- c",
             "select '--'", "select '/*' */", "/* c */ select 1", "-- c\nselect 1", "/* unterminated"]
    con = duckdb.connect()
    try:
        for text in texts:
            try:
                runs_nothing = con.execute(text) is None
            except duckdb.Error:
                runs_nothing = False
            assert not no_statement(text) or runs_nothing, text
        assert [t for t in texts if no_statement(t)] == ["", " \n\t", "-- c", ";", ";; -- c\n;", "/* c */",
                                                         "/* c */ ; -- d\n"]
    finally:
        con.close()


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


def _parser_of(command: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser a subcommand builds, caught as it parses."""
    def capture(self, args=None, namespace=None):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(SUBCOMMANDS[command][0]).main(["--help"])
    return parsed.value.parser


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_option_of_every_command_has_help(command, monkeypatch):
    """Each option says what it is for."""
    missing = [a.dest for a in _parser_of(command, monkeypatch)._actions if not a.help and a.dest != "help"]
    assert missing == [], f"torchci {command}: options without help: {missing}"


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_option_with_a_default_says_it(command, monkeypatch):
    """An option that takes a value and has one when left out says which in `--help`: a user
    choosing `--commits-per-day` must not read the code to learn what they get without it."""
    silent = [a.option_strings[0] for a in _parser_of(command, monkeypatch)._actions
              if a.option_strings and a.nargs != 0 and a.default is not None and a.default is not False
              and a.default != argparse.SUPPRESS and "default" not in (a.help or "").lower()]
    assert silent == [], f"torchci {command}: options that do not say their default: {silent}"


def _one_line_error(out: subprocess.CompletedProcess, code: int) -> str:
    """The last stderr line of a command that stopped with `code` and no traceback."""
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == code, out.stderr
    return out.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_serve_refuses_a_port_no_socket_can_have(tmp_path, port):
    """99999 listened on 34463 (the number modulo 65536), -1 started the receiver then failed."""
    out = subprocess.run([TORCHCI, "serve", "--port", port], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_"))})
    assert _one_line_error(out, 2) == (f"torchci serve: error: argument --port: {port!r}: "
                                       "expected a port number from 1 to 65535")


def test_simulate_into_a_file_says_so_and_writes_nothing(tmp_path):
    (tmp_path / "notes").write_text("keep me\n")
    for out_dir, what in ((tmp_path / "notes", "is a file"), (tmp_path / "notes" / "archive",
                                                             f"is below {tmp_path / 'notes'}, which is a file")):
        out = torchci("simulate", "--out", str(out_dir), "--days", "1", cwd=tmp_path)
        assert _one_line_error(out, 2) == f"torchci simulate: error: --out={str(out_dir)!r}: {what}; expected a folder"
    assert (tmp_path / "notes").read_text() == "keep me\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


@pytest.mark.parametrize("rows", ["0", "-3"])
def test_query_max_rows_below_one_is_a_usage_error(tmp_path, rows):
    out = torchci("query", "select 1", "--lake", str(tmp_path), "--max-rows", rows, cwd=tmp_path)
    assert _one_line_error(out, 2) == (f"torchci query: error: argument --max-rows: {rows!r}: "
                                       "expected a number of rows, 1 or more")


def test_query_names_a_lake_of_an_unknown_scheme(tmp_path):
    """It was taken for a relative folder: 'no lake at <cwd>/foo:/bar'."""
    out = torchci("query", "select 1", "--lake", "foo://bar", cwd=tmp_path)
    assert _one_line_error(out, 2) == ("torchci query: --lake='foo://bar': expected a local folder or "
                                       "s3://bucket/prefix")


@pytest.mark.parametrize("since", ["2026-13-01", "yesterday"])
def test_backfill_names_a_day_it_cannot_read(tmp_path, since):
    out = torchci("backfill", "--repo", "a/b", "--since", since, cwd=tmp_path)
    assert _one_line_error(out, 2) == f"torchci backfill: error: argument --since: {since!r} is not a day (YYYY-MM-DD)"


@pytest.mark.parametrize("archive", ["notes", "foo://x"])
def test_backfill_checks_its_archive_before_calling_github(tmp_path, archive):
    """It called GitHub first (half a minute of retries with no network) and failed writing after."""
    (tmp_path / "notes").write_text("keep me\n")
    out = torchci("backfill", "--repo", "a/b", "--days", "1", "--archive", archive, cwd=tmp_path,
                  GITHUB_API_URL="http://127.0.0.1:9")
    expected = "is a file; expected a folder" if archive == "notes" else "expected a local folder or s3://bucket/prefix"
    assert _one_line_error(out, 2) == f"torchci backfill: error: --archive={archive!r}: {expected}"
    assert "GitHub" not in out.stderr and out.stdout == ""


def test_classify_log_says_when_it_cannot_reach_the_log_or_is_given_a_folder(tmp_path):
    out = torchci("classify-log", "s3://bucket/job.log", cwd=tmp_path, TORCHCI_S3_ENDPOINT="http://127.0.0.1:9")
    line = _one_line_error(out, 1)
    assert line.startswith("torchci classify-log: s3://bucket/job.log: cannot read: ") and "127.0.0.1:9" in line
    folder = torchci("classify-log", str(tmp_path), cwd=tmp_path)
    assert _one_line_error(folder, 1) == f"torchci classify-log: {tmp_path}: a folder, not a log file"


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--test-files", "0", "--test-files must be at least 1, got 0"),
    ("--tests-per-file", "-5", "--tests-per-file must be at least 1, got -5"),
    ("--torn-lines-per-day", "-4", "--torn-lines-per-day must be at least 0, got -4"),
    ("--platform-failures", "-4", "--platform-failures must be at least 0, got -4")])
def test_simulate_refuses_a_count_below_what_it_can_plant(tmp_path, option, value, expected):
    """-5 tests per file and -4 torn lines wrote an archive; -4 platform failures said 'Sample larger
    than population or is negative'."""
    out = torchci("simulate", "--out", str(tmp_path / "archive"), "--days", "1", option, value, cwd=tmp_path)
    assert _one_line_error(out, 2) == f"torchci simulate: error: {expected}"
    assert not (tmp_path / "archive").exists()


def test_simulate_into_a_folder_it_cannot_create_says_so(tmp_path):
    out = torchci("simulate", "--out", "/proc/no-such-archive", "--days", "1", cwd=tmp_path)
    line = _one_line_error(out, 1)
    assert line.startswith("torchci simulate: cannot write /proc/no-such-archive: ")
