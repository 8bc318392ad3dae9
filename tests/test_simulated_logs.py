"""The simulator's job logs: realistic noise around the planted failure, consistent with the job's
webhooks and report, deterministic, and classified as planted by the default rules; then through
`torchci run` into job_failure and test_jobs."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import DEFAULT_INFRA_RULES
from torchci_assets.derived.failures.job_failure import classify_log
from torchci_assets.derived.failures.rules import load_ruleset
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

D1, D2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)
SMALL = dict(commits_per_day=8, prs_per_day=6, configs=12, test_files=16, tests_per_file=10, backends=1, seed=2)
# what a correct classifier reports for each planted kind, with this project's default rules
EXPECTED_RULE = {"test": "pytest failure", "runner_lost": "runner lost", "cuda_error": "CUDA device error",
                 "timeout": "job timeout", "lint": "lint failure", "build": "compile error"}
TIMESTAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z ", re.M)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("archive")
    generate_archive(out, [D1, D2], Options(**SMALL), log=lambda _: None)
    return out


@pytest.fixture(scope="module")
def truth(archive) -> dict:
    return json.loads((archive / "ground-truth.json").read_text())


def read(archive: Path, rec: dict) -> bytes:
    data = (archive / "logs" / f"day={rec['log_day']}" / rec["path"]).read_bytes()
    return gzip.decompress(data) if rec["path"].endswith(".gz") else data


def test_every_kind_is_planted_and_every_log_file_is_in_the_truth(archive, truth):
    kinds = Counter(r["kind"] for r in truth["job_logs"])
    assert set(kinds) == set(EXPECTED_RULE), kinds
    files = {(p.parent.name[4:], p.name) for p in (archive / "logs").glob("day=*/*")}
    assert files == {(r["log_day"], r["path"]) for r in truth["job_logs"]}
    assert {p.rsplit(".log", 1)[1] for _, p in files} == {"", ".gz"}


def test_logs_land_after_their_job_some_a_day_later(archive, truth):
    lag = Counter((dt.date.fromisoformat(r["log_day"]) - dt.date.fromisoformat(r["completed_at"][:10])).days
                  for r in truth["job_logs"])
    assert set(lag) <= {0, 1} and lag[0] > 0 and lag[1] > 0, lag


def test_logs_carry_github_actions_noise(archive, truth):
    for rec in truth["job_logs"][:40]:
        data = read(archive, rec)
        lines = data.split(b"\n")[:-1]
        assert lines[0].startswith("\ufeff".encode())  # GitHub's logs start with a BOM
        assert len(TIMESTAMP.findall(data)) == len(lines) - 1  # every line but the BOM'd first one
        assert b"\x1b[" in data and b"##[group]" in data and b"##[endgroup]" in data


def test_logs_agree_with_the_planted_infra_failures_and_webhook_conclusions(archive, truth):
    infra = {r["job_id"]: r["kind"] for r in truth["infra_failed_jobs"]}
    kinds = {"runner_lost": "runner_lost", "cuda_illegal_memory_access": "cuda_error", "timeout": "timeout"}
    for rec in truth["job_logs"]:
        if rec["job_id"] in infra:
            assert rec["kind"] == kinds[infra[rec["job_id"]]]
        else:
            assert rec["kind"] in ("test", "lint", "build")
        assert rec["conclusion"] in ("failure", "cancelled")
    logged_infra = {r["job_id"] for r in truth["job_logs"] if r["kind"] in kinds.values()}
    assert logged_infra <= set(infra)


def test_test_failure_logs_name_the_tests_the_report_failed(archive, truth):
    rec = next(r for r in truth["job_logs"] if r["kind"] == "test")
    summary = re.findall(rb"^\S+ FAILED \[[\d.]+s\] (\S+) - ", read(archive, rec), re.M)
    assert summary and rec["line"].split(" - ")[0].endswith(summary[-1].decode())


def test_generation_is_deterministic(archive, tmp_path):
    again = tmp_path / "again"
    generate_archive(again, [D1], Options(**SMALL), log=lambda _: None)
    first = sorted((archive / "logs" / f"day={D1}").iterdir())
    assert [p.name for p in first] == sorted(p.name for p in (again / "logs" / f"day={D1}").iterdir())
    assert all(p.read_bytes() == (again / "logs" / f"day={D1}" / p.name).read_bytes() for p in first)


def test_default_rules_find_the_planted_line_of_every_log(archive, truth):
    rules = load_ruleset()
    store = Store(str(archive))
    for rec in truth["job_logs"]:
        got = classify_log(store, f"logs/day={rec['log_day']}/{rec['path']}", rules)
        assert (got.rule, got.line_number, got.line) == (EXPECTED_RULE[rec["kind"]], rec["line_number"], rec["line"]), rec
        assert (got.rule in DEFAULT_INFRA_RULES) == (rec["kind"] in ("runner_lost", "cuda_error", "timeout"))


def test_pytorchs_rules_report_a_cuda_error_as_the_test_it_hit(archive, truth):
    """The difference the configurable infra rules make: with PyTorch's ruleset the same logs name
    the test, so only our default rules keep a GPU fault from counting against it."""
    theirs = load_ruleset(Path(__file__).parent / "data" / "log-classifier" / "pytorch-ruleset.toml")
    store = Store(str(archive))
    for rec in (r for r in truth["job_logs"] if r["kind"] in ("cuda_error", "runner_lost", "build")):
        got = classify_log(store, f"logs/day={rec['log_day']}/{rec['path']}", theirs)
        if rec["kind"] == "runner_lost":
            assert (got.rule, got.line_number) == ("GHA cancellation", rec["line_number"])
        elif rec["kind"] == "build":
            assert (got.rule, got.line_number) == ("Compile error", rec["line_number"])
        else:
            assert got.rule in ("pytest failure", "pytest test error", "Python Test SIG Code")


def test_torchci_run_classifies_the_archive_and_flags_infra_jobs(archive, truth, tmp_path):
    """The user's path: `torchci run` over the archive (a fresh process: resources come from the environment),
    of the two tables read here and what they are built from: the other two thirds of the graph (the
    windows, the published lists, the HUD) read them and change nothing in them."""
    lake = tmp_path / "lake"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_"))}
    env.update(TORCHCI_ARCHIVE_URI=str(archive), TORCHCI_LAKE_URI=str(lake), TORCHCI_OUTPUTS_URI=str(tmp_path / "out"))
    run = subprocess.run([str(Path(sys.executable).parent / "torchci"), "run", "--select",
                          "+key:job_failure or +key:test_jobs"], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    con = connect()
    Lake.at(str(lake)).register(con, "job_failure")
    Lake.at(str(lake)).register(con, "test_jobs")
    rows = {r[0]: r[1:] for r in con.execute("SELECT job_id, rule, infra, day::VARCHAR FROM job_failure").fetchall()}
    assert {(r["job_id"], r["log_day"]) for r in truth["job_logs"]} == {(j, v[2]) for j, v in rows.items()}
    for rec in truth["job_logs"]:
        assert rows[rec["job_id"]][:2] == (EXPECTED_RULE[rec["kind"]], rec["kind"] in ("runner_lost", "cuda_error",
                                                                                      "timeout"))
    flagged = dict(con.execute("SELECT job_id, infra_reason FROM test_jobs WHERE failure_rule IS NOT NULL").fetchall())
    for rec in truth["job_logs"]:
        if rec["kind"] in ("runner_lost", "cuda_error") and rec["job_id"] in flagged:
            assert flagged[rec["job_id"]] == "log-infra", rec
    assert "log-infra" in flagged.values()
