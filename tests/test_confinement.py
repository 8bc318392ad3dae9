"""Nothing outside the archive root is ever read: a symbolic link (to a file or a folder, in the
day folder or as the day folder), or a FIFO named like an archive file, is one reject that names
the path, never the content. Every archive reader is checked: webhooks, test-reports, test-runs,
ci-results, and the relay sensor's scan."""

import json
import os
import threading
from pathlib import Path

import pytest

from conftest import envelope
from resources.lake import Lake
from resources.storage import RefusedPath, Store
from torchci_assets.config import load_config
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.relay.pushes import scan_archive

DAY = "2026-11-01"
SECRET = "SECRET-d41d8cd98f"  # in every file outside the root: it must appear in no row and no reject


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the archive holding perfectly readable records of every kind."""
    folder = tmp_path / "outside"
    folder.mkdir()
    push = envelope("push", f"{SECRET}-1", {"ref": "refs/heads/main", "after": "a" * 40, "before": "b" * 40,
                                            "repository": {"full_name": "pytorch/pytorch"}, "note": SECRET},
                    received_at=f"{DAY}T01:00:00Z")
    (folder / "hooks.jsonl").write_text(json.dumps(push) + "\n")
    callback = {"trusted": {"verified_repo": "acme-ai/torch-npu"}, "untrusted": {"callback_payload": {
        "delivery_id": SECRET, "workflow": {"status": "completed", "run_id": 1, "job_name": SECRET}}}}
    (folder / "results.jsonl").write_text(json.dumps(callback) + "\n")
    (folder / "runs.jsonl").write_text(json.dumps({"name": SECRET, "job_id": 1, "workflow_id": 1,
                                                   "workflow_run_attempt": 1}) + "\n")
    (folder / "report.xml").write_text(f'<testsuite><testcase classname="t" name="{SECRET}"/></testsuite>')
    (folder / "sub").mkdir()
    (folder / "sub" / "more.jsonl").write_text(json.dumps(push) + "\n")
    return folder


def link(archive: Path, rel: str, target: Path) -> str:
    path = archive / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return rel


def assert_refused(rejects, rel: str) -> None:
    mine = [r for r in rejects if r.location.startswith(rel)]
    assert mine, (rel, rejects)
    for r in mine:
        assert "symbolic link" in r.reason and rel in r.reason
        assert r.sample is None
    for r in rejects:
        assert SECRET not in (r.reason + (r.sample or "")) and "root:" not in (r.sample or "")


def test_webhooks_never_follow_a_link_out_of_the_archive(tmp_path, outside):
    archive = tmp_path / "archive"
    good = envelope("push", "inside", {"ref": "refs/heads/main"}, received_at=f"{DAY}T02:00:00Z")
    (archive / "webhooks" / f"day={DAY}").mkdir(parents=True)
    (archive / "webhooks" / f"day={DAY}" / "good.jsonl").write_text(json.dumps(good) + "\n")
    passwd = link(archive, f"webhooks/day={DAY}/evil.jsonl", Path("/etc/passwd"))
    to_file = link(archive, f"webhooks/day={DAY}/hooks.jsonl", outside / "hooks.jsonl")
    to_folder = link(archive, f"webhooks/day={DAY}/linked", outside / "sub")
    report = ingest_webhook_day(Store(str(archive)), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.deliveries == 1  # only the file inside
    for rel in (passwd, to_file, to_folder):
        assert_refused(report.rejects, rel)
    assert len(report.rejects) == 3


def test_a_linked_day_folder_is_refused(tmp_path, outside):
    archive = tmp_path / "archive"
    day_link = link(archive, f"webhooks/day={DAY}", outside)
    report = ingest_webhook_day(Store(str(archive)), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.deliveries == 0
    assert_refused(report.rejects, day_link)


def test_test_reports_and_test_runs_never_follow_a_link(tmp_path, outside):
    archive = tmp_path / "archive"
    report_link = link(archive, f"test-reports/day={DAY}/1/1/1/report.xml", outside / "report.xml")
    folder_link = link(archive, f"test-reports/day={DAY}/1/1/2", outside)
    runs_link = link(archive, f"test-runs/day={DAY}/runs.jsonl", outside / "runs.jsonl")
    report = ingest_test_run_day(Store(str(archive)), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows == 0
    assert_refused(report.rejects["test-reports"], report_link)
    assert_refused(report.rejects["test-reports"], folder_link)
    assert_refused(report.rejects["test-runs"], runs_link)
    assert all(r.reason.startswith("refused: ") for rs in report.rejects.values() for r in rs)


def test_ci_results_never_follow_a_link(tmp_path, outside):
    archive = tmp_path / "archive"
    rel = link(archive, f"ci-results/day={DAY}/results.jsonl", outside / "results.jsonl")
    report = ingest_ci_results_day(Store(str(archive)), Lake.at(str(tmp_path / "lake")), DAY)
    assert report.rows == 0 and report.callbacks == 0
    assert_refused(report.rejects, rel)


def test_the_relay_scan_never_follows_a_link(tmp_path, outside):
    archive = tmp_path / "archive"
    (archive / "webhooks" / f"day={DAY}").mkdir(parents=True)
    config = load_config()
    _, cursor = scan_archive(Store(str(archive)), None, config)
    rel = link(archive, f"webhooks/day={DAY}/hooks.jsonl", outside / "hooks.jsonl")
    report, _ = scan_archive(Store(str(archive)), cursor, config)
    assert report.commits == [] and report.push_events == 0
    assert_refused(report.rejects, rel)


def test_a_fifo_named_like_an_archive_file_is_refused_not_waited_on(tmp_path):
    archive = tmp_path / "archive"
    (archive / "ci-results" / f"day={DAY}").mkdir(parents=True)
    os.mkfifo(archive / "ci-results" / f"day={DAY}" / "pipe.jsonl")
    done = []
    worker = threading.Thread(target=lambda: done.append(
        ingest_ci_results_day(Store(str(archive)), Lake.at(str(tmp_path / "lake")), DAY)), daemon=True)
    worker.start()
    worker.join(30)
    assert done, "the reader blocked on a FIFO"
    [reject] = done[0].rejects
    assert "not a regular file" in reject.reason


def test_a_link_swapped_in_after_the_listing_is_refused_at_open(tmp_path, outside):
    store = Store(str(tmp_path / "archive"))
    (tmp_path / "archive" / "d").mkdir(parents=True)
    (tmp_path / "archive" / "d" / "f.jsonl").write_text("{}\n")
    [entry] = store.list_files("d", (".jsonl",))
    assert entry.refused is None
    (tmp_path / "archive" / "d" / "f.jsonl").unlink()
    (tmp_path / "archive" / "d" / "f.jsonl").symlink_to(outside / "hooks.jsonl")
    with pytest.raises(RefusedPath, match="d/f.jsonl: a symbolic link"):
        store.open_raw(entry.path)
    # a folder on the way swapped for a link, too
    (tmp_path / "archive" / "d" / "f.jsonl").unlink()
    (tmp_path / "archive" / "d").rmdir()
    (tmp_path / "archive" / "d").symlink_to(outside)
    with pytest.raises(RefusedPath, match="refused d: a symbolic link"):
        store.read_bytes("d/hooks.jsonl")
    with pytest.raises(RefusedPath, match="not a plain path"):
        store.read_bytes("../outside/hooks.jsonl")


def test_the_lake_never_reads_a_link_either(tmp_path, outside):
    lake = Lake.at(str(tmp_path / "lake"))
    link(tmp_path / "lake", f"t/day={DAY}/data.parquet", outside / "report.xml")
    assert lake.files("t") == []


def write_named(folder: Path, name: bytes, data: bytes, sub: bytes = b"") -> None:
    """A file whose name (or `sub` folder's) is raw bytes (Linux allows any but '/' and NUL)."""
    path = os.path.join(os.fsencode(folder), sub) if sub else os.fsencode(folder)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


def test_a_name_that_is_not_utf8_is_one_reject_and_the_rest_of_the_day_lands(tmp_path):
    """Such a name reaches Python as lone surrogates, which the lake, the manifest and the
    sensor's hash cannot store: it is refused at listing, under a readable name."""
    archive = tmp_path / "archive"
    push = envelope("push", "ok", {"ref": "refs/heads/main"}, received_at=f"{DAY}T02:00:00Z")
    hook = json.dumps(push).encode() + b"\n"
    write_named(archive / "webhooks" / f"day={DAY}", b"good.jsonl", hook)
    write_named(archive / "webhooks" / f"day={DAY}", b"b\xff.jsonl", hook.replace(b'"ok"', b'"latin"'))
    xml = b'<testsuite><testcase classname="TestA" name="test_ok" time="1"/></testsuite>'
    write_named(archive / "test-reports" / f"day={DAY}" / "100" / "1" / "200", b"r.xml", xml)
    write_named(archive / "test-reports" / f"day={DAY}" / "100" / "1" / "201", b"caf\xe9.xml", xml)
    write_named(archive / "test-reports" / f"day={DAY}" / "100" / "1", b"r.xml", xml, sub=b"20\xe9")
    store, lake = Store(str(archive)), Lake.at(str(tmp_path / "lake"))

    hooks = ingest_webhook_day(store, lake, DAY)
    assert hooks.deliveries == 1
    assert [r.location for r in hooks.rejects] == [f"webhooks/day={DAY}/b\ufffd.jsonl"]
    assert "not valid UTF-8" in hooks.rejects[0].reason
    runs = ingest_test_run_day(store, lake, DAY)
    assert runs.rows == 1
    assert sorted(r.location for r in runs.rejects["test-reports"]) == [
        f"test-reports/day={DAY}/100/1/201/caf\ufffd.xml", f"test-reports/day={DAY}/100/1/20\ufffd"]
    assert all(r.reason.startswith("refused: ") for r in runs.rejects["test-reports"])


def test_a_name_holding_the_replacement_character_is_refused_too(tmp_path):
    """Else `caf\ufffd.xml` could be opened for the refused `caf\xe9.xml`, shown by that name."""
    store = Store(str(tmp_path / "archive"))
    write_named(tmp_path / "archive" / "d", "caf\ufffd.xml".encode(), b"<testsuite/>")
    [entry] = store.list_files("d", (".xml",))
    assert entry.refused and "not valid UTF-8" in entry.refused
    with pytest.raises(RefusedPath, match="not valid UTF-8"):
        store.open_raw("d/caf\ufffd.xml")
