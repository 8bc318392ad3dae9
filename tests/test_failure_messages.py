"""What the on-call engineer reads when a night's run meets a real failure: a folder it may not write,
a disk that fills up mid-write (a file size limit, which fails writes the same way without root), an
archive it cannot list, GitHub refusing the credentials of Dr. CI's posts and the relay's dispatches.
Each message names what failed and what to do, and nothing already published is lost or left
half-written."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import free_port

from resources import Store
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import staging_owner
from torchci_assets.derived.drci.comment import MARKER_END, MARKER_START
from torchci_assets.derived.drci.publish import publish
from torchci_assets.partitions import first_day
from torchci_assets.relay.dispatch import RepoOutcome, refusal_line
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

NOBODY = 65534


def _staged(folder) -> list[str]:
    return [p.name for p in folder.iterdir() if staging_owner(p.name)[0]]


@contextlib.contextmanager
def _unwritable(folder):
    """`folder` made read-only, as a chmod by an operator leaves it; root ignores modes, so root
    also acts as nobody for the block (who cannot even reach a root-owned temporary folder)."""
    mode = folder.stat().st_mode
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    as_root = os.geteuid() == 0
    try:
        if as_root:
            os.seteuid(NOBODY)
        yield
    finally:
        if as_root:
            os.seteuid(0)
        folder.chmod(mode)


def test_a_folder_it_may_not_write_is_named_with_what_to_do_and_the_file_is_kept(tmp_path):
    outputs = tmp_path / "outputs"
    store = Store(str(outputs))
    store.write_bytes("stats/slow-tests.json", b'{"published": "yesterday"}')

    with _unwritable(outputs / "stats"), pytest.raises(OSError) as raised:
        store.write_bytes("stats/slow-tests.json", b'{"published": "today"}')

    message = str(raised.value)
    assert raised.value.errno == errno.EACCES
    assert str(outputs / "stats" / "slow-tests.json") in message
    assert "Permission denied" in message
    assert f"make {outputs} writable" in message and "run again" in message
    assert "tmp-" not in message  # the staging file that was never made is no part of the story
    assert (outputs / "stats" / "slow-tests.json").read_bytes() == b'{"published": "yesterday"}'
    assert _staged(outputs / "stats") == []


_FILL = textwrap.dedent("""
    import sys
    from resources import Store
    try:
        Store(sys.argv[1]).write_bytes("stats/test-times.json", b"x" * (1 << 20))
    except OSError as exc:
        print(exc)
        sys.exit(1)
""")


def _limited_file_size() -> None:
    """A child whose files cannot grow past 64 KiB: its writes then fail as on a full disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_a_write_that_runs_out_of_room_says_to_free_space_and_keeps_the_last_version(tmp_path):
    outputs = tmp_path / "outputs"
    Store(str(outputs)).write_bytes("stats/test-times.json", b'{"times": "of yesterday"}')

    child = subprocess.run([sys.executable, "-c", _FILL, str(outputs)], capture_output=True, text=True,
                           preexec_fn=_limited_file_size, timeout=120)

    assert child.returncode == 1, child.stderr
    message = child.stdout.strip()
    assert str(outputs / "stats" / "test-times.json") in message
    assert "File too large" in message
    assert f"free space under {outputs}" in message and "run again" in message
    assert "previous version is kept" in message
    assert (outputs / "stats" / "test-times.json").read_bytes() == b'{"times": "of yesterday"}'
    assert _staged(outputs / "stats") == []


_MATERIALIZE = textwrap.dedent("""
    import sys
    import dagster as dg
    from resources.configured import OutputsResource

    @dg.asset
    def test_times(outputs: OutputsResource) -> None:
        outputs.store().write_bytes("stats/test-times.json", b"x" * (1 << 20))

    result = dg.materialize([test_times], resources={"outputs": OutputsResource(uri=sys.argv[1])},
                            raise_on_error=False)
    for event in result.all_events:
        if event.is_step_failure:
            print(event.step_failure_data.error.cause.message)
""")


def test_a_dagster_run_that_runs_out_of_room_names_the_setting_of_the_folder(tmp_path):
    outputs = tmp_path / "outputs"

    child = subprocess.run([sys.executable, "-c", _MATERIALIZE, str(outputs)], capture_output=True, text=True,
                           env={**os.environ, "TORCHCI_OUTPUTS_URI": str(outputs)}, preexec_fn=_limited_file_size,
                           timeout=180)

    assert child.returncode == 0, child.stderr[-3000:]
    message = child.stdout.strip()
    assert message.startswith("resources.storage.WriteFailed: cannot write "), message
    assert f"free space under {outputs} (or point TORCHCI_OUTPUTS_URI at a disk with room)" in message
    assert not (outputs / "stats" / "test-times.json").exists()
    assert _staged(outputs / "stats") == []


_INGEST = textwrap.dedent("""
    import sys
    from resources import Lake, Store
    from torchci_assets.ingest.webhooks import ingest_webhook_day
    try:
        ingest_webhook_day(Store(sys.argv[1]), Lake(Store(sys.argv[2])), "2026-11-02")
    except OSError as exc:
        print(f"{type(exc).__name__}: {exc}")
        sys.exit(1)
""")


def test_a_webhook_ingest_that_runs_out_of_room_says_so_and_leaves_no_part_written_file(tmp_path):
    """The ingest writes its Parquet files on a thread of its own: the failure reaches the step
    with its advice, and the step ends (a thread that died mid-queue would leave it waiting)."""
    archive, lake = tmp_path / "archive", tmp_path / "lake"
    generate_archive(archive, [dt.date(2026, 11, 2)], Options(commits_per_day=2, prs_per_day=2, test_reports=False),
                     log=lambda _: None)

    child = subprocess.run([sys.executable, "-c", _INGEST, str(archive), str(lake)], capture_output=True, text=True,
                           env={**os.environ, "TORCHCI_LAKE_URI": str(lake)}, preexec_fn=_limited_file_size,
                           timeout=300)

    assert child.returncode == 1, child.stderr[-3000:]
    assert child.stdout.startswith(f"WriteFailed: cannot write {lake}/"), child.stdout
    assert f"free space under {lake} (or point TORCHCI_LAKE_URI at a disk with room)" in child.stdout
    assert [p.name for p in lake.rglob("*") if p.is_file() and staging_owner(p.name)[0]] == []


def test_an_archive_that_cannot_be_listed_says_to_check_its_setting_and_credentials(monkeypatch, caplog):
    refused = f"http://127.0.0.1:{free_port()}"
    for name, value in {"TORCHCI_S3_ENDPOINT": refused, "AWS_ACCESS_KEY_ID": "AKIAFAILUREMESSAGES",
                        "AWS_SECRET_ACCESS_KEY": "never-printed-secret", "AWS_REGION": "us-east-1",
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    environ = {"TORCHCI_ARCHIVE_URI": "s3://torchci-archive/archive"}

    with caplog.at_level(logging.WARNING, logger="torchci_assets.partitions"):
        first_day(environ)

    message = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot list the archive s3://torchci-archive/archive" in message
    assert "check TORCHCI_ARCHIVE_URI" in message and "credentials" in message and "TORCHCI_S3_ENDPOINT" in message
    assert "never-printed-secret" not in message


TOKEN = "ghp_failuremessages000000000000000000000"


def _post_drci(httpserver, tmp_path, status: int, message: str):
    """One Dr. CI run posting on pull request 5 while GitHub answers every call with `status`."""
    httpserver.expect_request(re.compile("/.*")).respond_with_json({"message": message}, status=status)
    github = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, backoff_base_s=0.01, search_interval_s=0,
                            write_interval_s=0)
    logged: list[str] = []
    rows = [{"pr": 5, "head_sha": "ab" * 20, "pr_state": "open", "body": f"{MARKER_START}\nx\n{MARKER_END}"}]
    report = publish(Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "outputs")), github, "2026-11-02",
                     "pytorch/pytorch", rows, enabled=True, log=logged.append, today=dt.date(2026, 11, 2))
    return report, logged


def test_dr_ci_refused_credentials_say_which_to_set(httpserver, tmp_path):
    report, logged = _post_drci(httpserver, tmp_path, 401, "Bad credentials")

    assert "HTTP 401: Bad credentials" in report.stopped
    assert "set a valid GITHUB_TOKEN, or GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY" in report.stopped
    assert any("STOPPED" in line and "GITHUB_TOKEN" in line for line in logged)
    assert not any(TOKEN in line for line in [report.stopped, *logged])


def test_dr_ci_credentials_without_access_say_which_permission_on_which_repository(httpserver, tmp_path):
    report, _ = _post_drci(httpserver, tmp_path, 403, "Resource not accessible by integration")

    assert "needs Pull requests: read and write on pytorch/pytorch" in report.stopped


def _dispatch_refused(httpserver, status: int, message: str) -> str:
    """The warning of a dispatch GitHub answered with `status`, as the relay's run logs it."""
    httpserver.expect_request(re.compile("/.*")).respond_with_json({"message": message}, status=status)
    github = GitHubResource(api_url=httpserver.url_for(""), token=TOKEN, backoff_base_s=0.01, write_interval_s=0)
    result = github.dispatch("pytorch/xla", "pytorch-upstream", {"sha": "ab" * 20})
    outcome = RepoOutcome(result.repo, "L3", "refused", result.status, result.error)
    return refusal_line(outcome, "ab" * 20)


def test_a_dispatch_refused_for_its_credentials_says_what_to_set(httpserver):
    line = _dispatch_refused(httpserver, 401, "Bad credentials")

    assert line.startswith(f"pytorch/xla refused the dispatch of {'ab' * 20} (HTTP 401): HTTP 401: Bad credentials")
    assert "set a valid GITHUB_TOKEN" in line and TOKEN not in line


def test_a_dispatch_to_a_repository_github_does_not_know_says_to_check_the_allowlist(httpserver):
    line = _dispatch_refused(httpserver, 404, "Not Found")

    assert "no repository pytorch/xla (deleted, moved" in line and "correct its name in the allowlist" in line


def test_a_dagster_home_it_cannot_write_names_dagster_home_and_what_to_do(tmp_path, monkeypatch):
    """`torchci run` on a DAGSTER_HOME whose storage it cannot make (here a file where the runs'
    folder goes; a read-only mount or another user's folder fail the same way) said to check the
    archive and lake settings, which are fine: the instance's folder is the one to fix."""
    from torchci_assets.run import UsageError, instance_for_runs

    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    (home / "history").write_text("not a folder")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with pytest.raises(UsageError) as raised:
        instance_for_runs()
    message = str(raised.value)
    assert message.startswith(f"DAGSTER_HOME={home}: File exists ({home / 'history'}/)")
    assert message.endswith("check that this user may write there, or point DAGSTER_HOME at another folder")


def test_an_instance_another_process_holds_locked_says_so_in_one_line(tmp_path):
    """A `dagster dev` or another `torchci run` writing to the same SQLite instance: SQLAlchemy's
    traceback of `database is locked` said nothing of who holds it or what to do."""
    import sqlite3

    from conftest import envelope, write_lines
    from torchci_assets.run import instance_for_runs

    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"),
           "TORCHCI_LAKE_URI": str(tmp_path / "lake"), "TORCHCI_OUTPUTS_URI": str(tmp_path / "outputs")}
    write_lines(tmp_path / "archive" / "webhooks" / "day=2026-11-01" / "a.jsonl",
                [envelope("ping", "d-1", {"zen": "Keep it logically awesome."})])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
        instance_for_runs()[0].dispose()  # the instance's files, as an earlier run left them
    holder = sqlite3.connect(tmp_path / "dagster" / "history" / "runs.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        child = subprocess.run([str(Path(sys.executable).parent / "torchci"), "run", "-q"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
    finally:
        holder.close()
    assert child.returncode == 1, child.stderr
    assert "Traceback" not in child.stderr
    assert f"the Dagster instance at {tmp_path / 'dagster'} is locked: another process" in child.stderr
    assert "wait for it or stop it, then run again" in child.stderr
