"""What `torchci run` says when a day meets a real failure, and what it finds before any run starts.

Under `--quiet` a failed step is one line under its day, with its cause and what to do: Dagster's
own error events (a traceback per failed step, a line per step skipped after it) stay in the run's
log, for the UI. An S3 store whose credentials S3 refuses, or that does not answer, is found by the
preflight, with one request per store: one line naming the setting, no secret, and no run (one that
does not answer: tests/test_run_cli.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import S3_BUCKET
from counting_s3 import serving
from test_run_cli import D1, TORCHCI, instance_at, octokit_archive, run_cli

from torchci_assets import preflight

ENGINE_NOISE = ("Stack Trace", "Traceback", "STEP_FAILURE", "DagsterExecutionStepExecutionError", "Not executing")


@contextlib.contextmanager
def _unwritable(folder: Path):
    """`folder` made one this user may not write in, as an operator's chmod leaves it; root ignores
    modes, so for root the folder is made immutable (`chattr +i`), which refuses root's writes too."""
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
    try:
        yield
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def _run_with_an_unwritable_lake_folder(root: Path, *args: str):
    """`torchci run` of a day whose lake folder of ci_metrics_daily this user may not write."""
    octokit = json.loads((Path(__file__).parent / "data" / "octokit" / "examples.json").read_text())
    octokit_archive(root / "archive", octokit, days=(D1,))
    (root / "lake" / "ci_metrics_daily").mkdir(parents=True)
    with _unwritable(root / "lake" / "ci_metrics_daily"):
        return run_cli(root, *args, DAGSTER_HOME=str(root / "home"))


@pytest.fixture(scope="module")
def unwritable_lake_run(tmp_path_factory):
    """The quiet run of that day; (root, completed process)."""
    root = tmp_path_factory.mktemp("unwritable")
    return root, _run_with_an_unwritable_lake_folder(root, "--quiet")


def test_quiet_says_a_failed_step_in_one_line_with_what_to_do_and_no_traceback(unwritable_lake_run):
    root, done = unwritable_lake_run
    lake = root / "lake"
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    reason = "Operation not permitted" if os.geteuid() == 0 else "Permission denied"
    failed = [line.strip() for line in done.stdout.splitlines() if line.startswith("      ")]
    assert failed[:2] == [
        f"ci_metrics_daily: WriteFailed: cannot write {lake}/ci_metrics_daily/day={D1}/data.parquet: {reason}; "
        f"make {lake} writable for this user (or point TORCHCI_LAKE_URI at a writable folder), then run again "
        "(the file's previous version is kept)",
        "not run, as a step they need failed: hud_site"]
    out = done.stdout + done.stderr
    assert [noise for noise in ENGINE_NOISE if noise in out] == []
    # the steps' own warnings are still said (the DRY RUN details among them), once each
    warnings = [line for line in done.stderr.splitlines() if "DRY RUN: " in line]
    assert len(warnings) == len(set(warnings)) >= 2, done.stderr[-3000:]


def test_quiet_says_where_the_failed_step_s_traceback_is_and_the_instance_has_it(unwritable_lake_run):
    root, done = unwritable_lake_run
    [run] = instance_at(root / "home").get_runs()
    assert f"the full log, tracebacks included: run {run.run_id} in the Dagster UI" in done.stdout
    [failure] = [e for e in instance_at(root / "home").all_logs(run.run_id)
                 if e.dagster_event and e.dagster_event.is_step_failure]
    error = failure.dagster_event.step_failure_data.error
    assert error.cause.cls_name == "WriteFailed" and "raise WriteFailed" in "".join(error.cause.stack)


def test_without_quiet_dagster_s_log_is_printed_as_it_goes_traceback_included(tmp_path):
    done = _run_with_an_unwritable_lake_folder(tmp_path)
    assert done.returncode == 1
    assert "STEP_FAILURE" in done.stderr and "Stack Trace" in done.stderr and " - INFO - " in done.stderr
    failed = [line.strip() for line in done.stdout.splitlines() if line.startswith("      ")]
    assert [line.split(":")[:2] for line in failed] == [["ci_metrics_daily", " WriteFailed"]]
    # the steps' warnings are in Dagster's log, not said again
    assert [line for line in done.stderr.splitlines() if line.startswith("      ") and ": warning: " in line] == []


# ---- an S3 store the preflight finds unusable -------------------------------------------------------

@pytest.fixture(scope="module")
def refusing_s3(tmp_path_factory):
    """An S3 server that checks credentials, counting requests: the bucket is made by the two requests
    it takes unauthenticated; every later one, signed with keys it does not know, is refused."""
    with serving(tmp_path_factory.mktemp("s3") / "requests.log", S3_BUCKET, unauthenticated=2) as s3:
        yield s3


BAD_KEYS = {"AWS_ACCESS_KEY_ID": "AKIAWRONGKEY12345678", "AWS_SECRET_ACCESS_KEY": "wrong/secret+KEY"}


@pytest.mark.parametrize("setting", ["TORCHCI_LAKE_URI", "TORCHCI_ARCHIVE_URI", "TORCHCI_OUTPUTS_URI"])
def test_an_s3_store_whose_credentials_s3_refuses_stops_the_run_before_it_starts(refusing_s3, tmp_path, octokit,
                                                                                setting):
    octokit_archive(tmp_path / "archive", octokit, days=(D1,))
    uri = f"s3://{S3_BUCKET}/{uuid.uuid4().hex[:8]}"
    since = time.time()
    done = run_cli(tmp_path, **{setting: uri}, TORCHCI_S3_ENDPOINT=refusing_s3.endpoint, AWS_REGION="us-east-1",
                   AWS_EC2_METADATA_DISABLED="true", DAGSTER_HOME=str(tmp_path / "home"), **BAD_KEYS)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"torchci run: {setting}={uri!r}: S3 refused the credentials (InvalidAccessKeyId: The AWS Access Key Id you "
        "provided does not exist in our records); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the profile "
        "or role the AWS SDK takes them from) and that they may read and write the bucket"]
    assert not (tmp_path / "home").exists() and not (tmp_path / "lake").exists()
    assert [op for _, op, _ in refusing_s3.requests(since)] == ["ListObjects"]


@pytest.mark.parametrize("option", [True, False])
def test_a_backfill_into_an_s3_archive_whose_credentials_s3_refuses_stops_before_asking_github(
        refusing_s3, httpserver, tmp_path, option):
    """`--archive` or TORCHCI_ARCHIVE_URI: one line naming it, and not one request to GitHub, whose
    history would be read for nothing."""
    uri = f"s3://{S3_BUCKET}/{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHCI_", "DAGSTER_", "GITHUB_"))}
    env.update(TORCHCI_S3_ENDPOINT=refusing_s3.endpoint, AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
               GITHUB_API_URL=httpserver.url_for(""), **BAD_KEYS, **({} if option else {"TORCHCI_ARCHIVE_URI": uri}))
    since = time.time()
    done = subprocess.run([TORCHCI, "backfill", "--repo", "octo-org/widgets", "--days", "1",
                           *(["--archive", uri] if option else [])],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    setting = "--archive" if option else "TORCHCI_ARCHIVE_URI"
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"torchci backfill: {setting}={uri!r}: S3 refused the credentials (InvalidAccessKeyId: The AWS Access Key Id "
        "you provided does not exist in our records); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the "
        "profile or role the AWS SDK takes them from) and that they may read and write the bucket"]
    assert [op for _, op, _ in refusing_s3.requests(since)] == ["ListObjects"]
    assert httpserver.log == []


@pytest.fixture(scope="module")
def counting_s3(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("s3") / "requests.log", S3_BUCKET) as s3:
        yield s3


def test_usable_stores_cost_one_listing_each_on_s3_and_no_request_when_local(counting_s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHCI_ARCHIVE_URI", f"s3://{S3_BUCKET}/archive")
    monkeypatch.setenv("TORCHCI_LAKE_URI", f"s3://{S3_BUCKET}/lake")
    monkeypatch.setenv("TORCHCI_OUTPUTS_URI", str(tmp_path / "outputs"))
    since = time.time()
    assert preflight.store_problems() == []
    assert sorted(where for _, _, where in counting_s3.requests(since)) == [
        f"{S3_BUCKET}/archive/", f"{S3_BUCKET}/lake/"]
    for name in ("TORCHCI_ARCHIVE_URI", "TORCHCI_LAKE_URI"):
        monkeypatch.setenv(name, str(tmp_path / name))
    since = time.time()
    assert preflight.store_problems() == []
    assert counting_s3.requests(since) == []
