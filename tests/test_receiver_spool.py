"""The spool: acknowledged means on disk, and everything on disk reaches the archive once, whole.

The last test kills a real `torchci serve` process with SIGKILL while clients send, twice, and
checks every acknowledged delivery is in the archive exactly once, as sent."""

import asyncio
import datetime as dt
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from conftest import free_port, wait_for_port
from receiving import archived, config_file, served, webhook_headers
from resources.storage import Store
from torchci_assets.receiver import spool
from torchci_assets.receiver.callbacks import JobStarts
from torchci_assets.receiver.metrics import Metrics
from torchci_assets.receiver.records import ci_result_line
from torchci_assets.receiver.spool import SpoolError, SpoolWriter, recover, roll_segment, sealed_segments, spool_lock

TORCHCI = str(Path(sys.executable).parent / "torchci")
UTC = dt.timezone.utc


def line(i: int) -> bytes:
    return json.dumps({"event": "workflow_job", "delivery_id": f"d{i}", "payload": {"n": i}}).encode() + b"\n"


def test_a_segment_holds_one_utc_day_and_rolls_into_that_days_folder(tmp_path):
    root = tmp_path / "spool"
    writer = SpoolWriter(root, "webhooks", "host-a", Metrics(), roll_interval_s=3600)
    writer.start()
    before = dt.datetime(2026, 11, 1, 23, 59, 59, 999000, tzinfo=UTC)
    after = dt.datetime(2026, 11, 2, 0, 0, 0, 1000, tzinfo=UTC)

    async def send():
        await asyncio.gather(writer.append(line(1), before), writer.append(line(2), before))
        await writer.append(line(3), after)

    asyncio.run(send())
    writer.close()
    segments = sealed_segments(root)
    assert [p.name for _, p in segments] == ["host-a-20261101T235959999000Z.jsonl", "host-a-20261102T000000001000Z.jsonl"]
    archive = Store(str(tmp_path / "archive"))
    results = [roll_segment(archive, stream, path) for stream, path in segments]
    assert [r.archive_path for r in results] == [
        "webhooks/day=2026-11-01/host-a-20261101T235959999000Z.jsonl.gz",
        "webhooks/day=2026-11-02/host-a-20261102T000000001000Z.jsonl.gz"]
    assert [r.lines for r in results] == [2, 1]
    assert sorted(x["delivery_id"] for x in archived(archive, "webhooks")) == ["d1", "d2", "d3"]
    assert sealed_segments(root) == []


def test_a_torn_tail_left_by_a_crash_is_dropped_and_the_rest_archived(tmp_path):
    root = tmp_path / "spool"
    (root / "ci-results").mkdir(parents=True)
    left = root / "ci-results" / "host-a-20261101T120000000000Z.jsonl.open"
    left.write_bytes(line(1) + line(2) + line(3)[:25])  # killed in the middle of the third write
    (root / "webhooks").mkdir()
    (root / "webhooks" / "host-a-20261101T130000000000Z.jsonl.open").write_bytes(b"")  # opened, nothing written
    assert recover(root) == [root / "ci-results" / "host-a-20261101T120000000000Z.jsonl"]
    archive = Store(str(tmp_path / "archive"))
    [(stream, path)] = sealed_segments(root)
    result = roll_segment(archive, stream, path)
    assert (result.lines, result.dropped) == (2, 1)
    assert [x["delivery_id"] for x in archived(archive, "ci-results")] == ["d1", "d2"]
    assert list((root / "webhooks").iterdir()) == []


def test_rolling_again_after_a_crash_between_publish_and_delete_duplicates_nothing(tmp_path):
    root = tmp_path / "spool" / "webhooks"
    root.mkdir(parents=True)
    segment = root / "host-a-20261101T120000000000Z.jsonl"
    segment.write_bytes(line(1) + line(2))
    archive = Store(str(tmp_path / "archive"))
    kept = segment.read_bytes()
    roll_segment(archive, "webhooks", segment)
    segment.write_bytes(kept)  # as if the process died before deleting it
    stale = tmp_path / "archive/webhooks/day=2026-11-01/.host-a-20261101T120000000000Z.jsonl.gz.tmp-dead"
    stale.write_bytes(b"half a gzip")  # and a roll before that died half-way
    roll_segment(archive, "webhooks", segment)
    assert [x["delivery_id"] for x in archived(archive, "webhooks")] == ["d1", "d2"]
    assert not segment.exists() and not stale.exists()


@pytest.mark.parametrize("check", [False, True])
def test_a_later_segment_that_gets_an_archived_segments_name_is_published_beside_it(tmp_path, check):
    # a coarse clock, or one stepped back across a restart: two segments whose first records share a
    # receipt microsecond get one name, and the first was already rolled (so gone from the spool)
    root = tmp_path / "spool"
    archive = Store(str(tmp_path / "archive"))
    received = dt.datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=UTC)
    for deliveries in ((1, 2), (3,), (4, 5)):
        writer = SpoolWriter(root, "webhooks", "host-a", Metrics(), roll_interval_s=3600)
        writer.start()

        async def send():
            for i in deliveries:
                await writer.append(line(i), received)

        asyncio.run(send())
        writer.close()
        [(stream, path)] = sealed_segments(root)
        assert path.name == "host-a-20261101T120000123456Z.jsonl"
        roll_segment(archive, stream, path, check=check)
    names = sorted(p.name for p in (tmp_path / "archive/webhooks/day=2026-11-01").iterdir())
    assert names == ["host-a-20261101T120000123456Z.jsonl.gz", "host-a-20261101T120000123457Z.jsonl.gz",
                     "host-a-20261101T120000123458Z.jsonl.gz"]
    assert sorted(x["delivery_id"] for x in archived(archive, "webhooks")) == ["d1", "d2", "d3", "d4", "d5"]
    # and the crash between a bumped publish and the delete still publishes over its own file only
    segment = root / "webhooks" / "host-a-20261101T120000123456Z.jsonl"
    segment.write_bytes(line(4) + line(5))
    assert roll_segment(archive, "webhooks", segment, check=check).archive_path.endswith("123458Z.jsonl.gz")
    assert sorted(x["delivery_id"] for x in archived(archive, "webhooks")) == ["d1", "d2", "d3", "d4", "d5"]


def test_write_probes_running_at_once_on_one_spool_never_fail_each_other(tmp_path):
    # a receiver starting on a spool probes it while the owner's readiness check probes it too
    folder = tmp_path / "spool"
    folder.mkdir()
    with ThreadPoolExecutor(4) as pool:
        problems = [p for p in pool.map(lambda _: spool.probe_write(folder), range(100)) if p]
    assert problems == []
    assert list(folder.iterdir()) == []  # every probe removed its own file


def test_one_process_owns_a_spool(tmp_path):
    with spool_lock(tmp_path / "spool"):
        with pytest.raises(SpoolError, match="in use by another receiver"):
            with spool_lock(tmp_path / "spool"):
                pass
    with spool_lock(tmp_path / "spool"):  # released with its owner
        pass


def test_a_failed_fsync_is_never_acknowledged(tmp_path, monkeypatch):
    real = os.fdatasync
    calls = {"n": 0}

    def flaky(fd):
        # only the writer's fsync fails: the readiness probe's, once a second, must not take the failure
        if threading.current_thread().name == "spool-webhooks":
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    with served(tmp_path) as srv:
        monkeypatch.setattr(spool.os, "fdatasync", flaky)
        body = b'{"action": "queued", "n": 1}'
        failed = srv.post_webhook(body, delivery="lost")
        assert failed.status_code == 503 and failed.headers["Retry-After"] == "10"
        assert srv.post_webhook(body, delivery="kept").status_code == 200
        assert srv.receiver.metrics.counter("torchci_receiver_write_errors_total", stream="webhooks") == 1
    monkeypatch.setattr(spool.os, "fdatasync", real)
    # the failed record was cut off its segment: the archive has only the acknowledged one
    assert [x["delivery_id"] for x in archived(srv.archive, "webhooks")] == ["kept"]


def test_an_unavailable_archive_keeps_the_spool_until_it_is_back(tmp_path):
    blocker = tmp_path / "archive"
    blocker.write_text("a file where the archive folder should be")
    with served(tmp_path, roll_interval_s=0.2) as srv:
        assert srv.post_webhook(b'{"action": "queued"}', delivery="waits").status_code == 200
        deadline = time.monotonic() + 10
        while not srv.receiver.metrics.counter("torchci_receiver_roll_failures_total", stream="webhooks"):
            assert time.monotonic() < deadline, "the roll did not fail"
            time.sleep(0.05)
        assert len(sealed_segments(tmp_path / "spool")) == 1  # kept
        blocker.unlink()
        srv.receiver.roller.wake()
        while sealed_segments(tmp_path / "spool"):
            assert time.monotonic() < deadline, "the roll was not retried"
            time.sleep(0.05)
    assert [x["delivery_id"] for x in archived(srv.archive, "webhooks")] == ["waits"]


class Sender:
    """Clients posting signed deliveries in bounded loops, remembering what was acknowledged."""

    def __init__(self, url: str, payloads: list[dict]):
        self.url, self.payloads = url, payloads
        self.acked: dict[str, dict] = {}
        self.attempted: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self, worker: int, limit: int) -> None:
        session = requests.Session()
        for i in range(limit):
            if self.stop.is_set():
                return
            delivery = f"w{worker}-{uuid.uuid4().hex[:12]}"
            payload = {**self.payloads[i % len(self.payloads)], "marker": delivery}
            body = json.dumps(payload).encode()
            with self.lock:
                self.attempted.add(delivery)
            try:
                resp = session.post(f"{self.url}/github/webhook", data=body, timeout=5,
                                    headers=webhook_headers(body, delivery=delivery))
            except requests.RequestException:
                time.sleep(0.05)  # the server is down; try again with a new delivery
                session = requests.Session()
                continue
            if resp.status_code == 200:
                with self.lock:
                    self.acked[delivery] = payload

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)


def start_server(env: dict, port: int, log: Path) -> subprocess.Popen:
    out = open(log, "ab")
    proc = subprocess.Popen([TORCHCI, "serve", "--port", str(port)], env=env, stdout=out, stderr=out,
                            start_new_session=True)
    out.close()
    wait_for_port(port, proc, timeout=60)
    return proc


def test_kill_9_while_clients_send_loses_no_acknowledged_delivery(tmp_path, octokit):
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"), "TORCHCI_LAKE_URI": str(tmp_path / "lake"),
           "TORCHCI_SPOOL_DIR": str(tmp_path / "spool"), "TORCHCI_WEBHOOK_SECRETS": "It's a Secret to Everybody",
           "TORCHCI_CONFIG": config_file(tmp_path), "TORCHCI_ROLL_INTERVAL_S": "0.3",
           "TORCHCI_RECEIVER_HOST": "kill-test"}
    port = free_port()
    log = tmp_path / "serve.log"
    payloads = octokit["api.github.com"]["workflow_job"] + octokit["api.github.com"]["push"]
    sender = Sender(f"http://127.0.0.1:{port}", payloads)
    proc = start_server(env, port, log)
    threads = [threading.Thread(target=sender.run, args=(w, 3000), daemon=True) for w in range(4)]
    for t in threads:
        t.start()
    try:
        for kill_after in (150, 300):
            deadline = time.monotonic() + 60
            while sender.acked_count() < kill_after:
                assert time.monotonic() < deadline, "the clients stalled"
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)  # mid-stream: requests in flight, segments open
            assert proc.wait(10) == -signal.SIGKILL
            proc = start_server(env, port, log)
        deadline = time.monotonic() + 60
        while sender.acked_count() < 400:
            assert time.monotonic() < deadline, "the clients stalled after the restarts"
            time.sleep(0.01)
    finally:
        sender.stop.set()
        for t in threads:
            t.join(30)
        proc.send_signal(signal.SIGTERM)  # a clean stop rolls the rest (uvicorn then re-raises the signal)
        assert proc.wait(60) in (0, -signal.SIGTERM)
    text = log.read_text()
    assert "recovering" in text  # a kill left open segments, sealed at the next start
    assert text.rstrip().endswith("Finished server process [%d]" % proc.pid), text[-500:]
    lines = archived(Store(env["TORCHCI_ARCHIVE_URI"]), "webhooks")  # every file whole, every line JSON
    counts: dict[str, int] = {}
    for record in lines:
        counts[record["delivery_id"]] = counts.get(record["delivery_id"], 0) + 1
    missing = [d for d in sender.acked if d not in counts]
    assert not missing, f"{len(missing)} acknowledged deliveries lost, e.g. {missing[:3]}"
    assert {d: n for d, n in counts.items() if n != 1} == {}
    assert set(counts) <= sender.attempted
    by_id = {r["delivery_id"]: r for r in lines}
    assert all(by_id[d]["payload"] == payload for d, payload in sender.acked.items())
    assert list((tmp_path / "spool" / "webhooks").iterdir()) == []
    leftovers = [p for p in (tmp_path / "archive").rglob("*") if p.is_file() and not p.name.endswith(".jsonl.gz")]
    assert leftovers == []


def test_segments_roll_into_an_s3_archive_and_job_starts_are_read_back_from_it(tmp_path, s3_server, octokit):
    """The archive on S3 (a local moto server): rolled files are whole objects the ingest lists."""
    from conftest import S3_BUCKET

    archive = f"s3://{S3_BUCKET}/receiver-{uuid.uuid4().hex[:8]}/archive"
    payload = octokit["api.github.com"]["workflow_job"][0]
    with served(tmp_path, archive_uri=archive) as srv:
        assert srv.post_webhook(json.dumps(payload).encode(), delivery="on-s3").status_code == 200
    [entry] = Store(archive).list_files("webhooks", (".jsonl.gz",))
    assert entry.path.startswith("webhooks/day=") and entry.path.endswith(".jsonl.gz")
    [line] = archived(Store(archive), "webhooks")
    assert (line["delivery_id"], line["payload"]) == ("on-s3", payload)
    assert list((tmp_path / "spool" / "webhooks").iterdir()) == []
    # a job's in_progress callback, archived by another replica, is read back for its execution time
    body = json.dumps({"event_type": "push", "delivery_id": "d1", "payload": {}, "workflow": {
        "schema_version": "1", "status": "in_progress", "conclusion": None, "name": "ci", "run_id": "77",
        "run_attempt": "1", "job_name": "test", "started_at": "2026-11-01T10:00:00Z", "completed_at": None}}).encode()
    received = dt.datetime.now(UTC)
    record = ci_result_line("acme-ai/torch-npu", "L2", 12.0, None, body, received)
    Store(archive).write_bytes(f"ci-results/day={received:%Y-%m-%d}/other-replica-x.jsonl", record)
    starts = JobStarts()
    assert starts.catch_up(Store(archive)) == 1
    assert starts.get(("d1", "acme-ai/torch-npu", 77, 1, "test")) == pytest.approx(received.timestamp(), abs=0.001)
    assert starts.catch_up(Store(archive)) == 0  # read once
