"""What clients without a valid signature can hold on a real `torchci serve`: memory, connections,
time, and the log. The attacks run against the real command (a separate process, its RSS read from
/proc) while a signed delivery is sent; the log and readiness tests use a receiver in this process."""

import asyncio
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from conftest import free_port, wait_for_port
from receiving import SECRET, config_file, served, webhook_headers
from slow_clients import hang_up_mid_body, request_head, slowloris, withheld_body
from torchci_assets.receiver import spool
from torchci_assets.receiver.budget import BodyBudget, Hold, OverBudget
from torchci_assets.receiver.readiness import Readiness
from torchci_assets.receiver.throttled_log import ThrottledLog

TORCHCI = str(Path(sys.executable).parent / "torchci")
MIB = 1 << 20
HEADER_TIMEOUT_S, BODY_TIMEOUT_S = 2.0, 4.0


def serve(tmp_path: Path, **env_overrides) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"), "TORCHCI_LAKE_URI": str(tmp_path / "lake"),
           "TORCHCI_SPOOL_DIR": str(tmp_path / "spool"), "TORCHCI_WEBHOOK_SECRETS": SECRET,
           "TORCHCI_CONFIG": config_file(tmp_path), "TORCHCI_RECEIVER_HOST": "limits-test",
           "TORCHCI_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S), "TORCHCI_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
           **env_overrides}
    port = free_port()
    log = open(tmp_path / "serve.log", "ab")
    proc = subprocess.Popen([TORCHCI, "serve", "--port", str(port)], env=env, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    wait_for_port(port, proc, timeout=60)
    return proc, port


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise AssertionError("no VmHWM")


def metric(port: int, name: str) -> float:
    for line in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def signed_delivery(port: int, delivery: str) -> requests.Response:
    body = json.dumps({"action": "queued", "workflow_job": {"id": 1}}).encode()
    return requests.post(f"http://127.0.0.1:{port}/github/webhook", data=body, timeout=10,
                         headers=webhook_headers(body, delivery=delivery))


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) in (0, -signal.SIGTERM)


def test_forty_withheld_24_mib_bodies_are_bounded_and_closed_while_a_signed_delivery_is_acknowledged(tmp_path):
    proc, port = serve(tmp_path)
    try:
        async def attack():
            attackers = [asyncio.create_task(withheld_body(port, 24 * MIB, give_up_s=60)) for _ in range(40)]
            held = []
            while len(held) < 10 or not max(held):  # the bodies are being read by now
                held.append(await asyncio.to_thread(metric, port, "torchci_receiver_inflight_body_bytes"))
                await asyncio.sleep(0.1)
            ack = await asyncio.to_thread(signed_delivery, port, "during-the-attack")
            while not all(a.done() for a in attackers):
                held.append(await asyncio.to_thread(metric, port, "torchci_receiver_inflight_body_bytes"))
                await asyncio.sleep(0.1)
            return max(held), ack, [a.result() for a in attackers]

        held, ack, outcomes = asyncio.run(attack())
        peak = peak_rss_mb(proc.pid)
        body_timeouts = metric(port, 'torchci_receiver_timeouts_total{phase="body"}')
        busy = metric(port, 'torchci_receiver_rejected_total{endpoint="webhook",reason="busy"}')
    finally:
        stop(proc)
    assert ack.status_code == 200, ack.text
    # at most the large bodies' share of the default 256 MiB budget (192 MiB), and the signed delivery
    assert 0 < held <= 192 * MIB + MIB
    assert peak < 600, f"peak RSS {peak:.0f} MB"
    assert all(o.closed_after_s is not None for o in outcomes), "a connection was left open"
    # the ones admitted were cut off at the body timeout, the rest refused before their body was read
    # (503; a client still sending when the server closes may get a reset instead of the answer)
    read = [o for o in outcomes if o.status == 408]
    refused = [o for o in outcomes if o.status != 408]
    assert read and {o.status for o in refused} <= {503, None}, outcomes
    assert all(BODY_TIMEOUT_S - 0.5 < o.closed_after_s < BODY_TIMEOUT_S + 5 for o in read), read
    assert all(o.closed_after_s < BODY_TIMEOUT_S for o in refused)
    assert (body_timeouts, busy) == (len(read), len(refused))


def test_slowloris_connections_are_closed_by_the_header_timeout(tmp_path):
    proc, port = serve(tmp_path)
    try:
        async def attack():
            clients = [asyncio.create_task(slowloris(port, every_s=1.0, give_up_s=30)) for _ in range(200)]
            await asyncio.sleep(0.5)
            ack = await asyncio.to_thread(signed_delivery, port, "during-slowloris")
            return ack, await asyncio.gather(*clients)

        ack, outcomes = asyncio.run(attack())
        header_timeouts = metric(port, 'torchci_receiver_timeouts_total{phase="header"}')
    finally:
        stop(proc)
    assert ack.status_code == 200
    assert all(o.closed_after_s is not None and o.closed_after_s < HEADER_TIMEOUT_S + 5 for o in outcomes)
    assert {o.status for o in outcomes} == {408}
    assert header_timeouts == 200


def test_headers_streamed_within_the_deadline_are_cut_off_at_their_size(tmp_path):
    """A client streaming megabyte header lines as fast as it can, never ending them, got the
    receiver to gigabytes within the header deadline: now 431 and closed past 64 KiB, while a
    delivery with 32 KiB of headers of its own is still acknowledged."""
    proc, port = serve(tmp_path, TORCHCI_HEADER_TIMEOUT_S="30")
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /github/webhook HTTP/1.1\r\nHost: x\r\n")
        sent, answer = 0, b""
        try:
            while sent < 512 * MIB:
                sock.sendall(b"X-Pad: " + b"a" * MIB + b"\r\n")
                sent += MIB
        except OSError:  # closed by the receiver
            pass
        try:
            answer = sock.recv(200)
        except OSError:
            pass
        sock.close()
        peak = peak_rss_mb(proc.pid)
        body = json.dumps({"action": "queued", "workflow_job": {"id": 1}}).encode()
        ack = requests.post(f"http://127.0.0.1:{port}/github/webhook", data=body, timeout=10,
                            headers={**webhook_headers(body, delivery="big-headers"), "X-Pad": "b" * (32 << 10)})
        refused = metric(port, 'torchci_receiver_rejected_total{endpoint="any",reason="headers_too_large"}')
    finally:
        stop(proc)
    assert sent < 64 * MIB, f"{sent >> 20} MiB of headers were taken"
    assert answer in (b"",) or answer.startswith(b"HTTP/1.1 431 "), answer  # a reset may beat the answer
    assert peak < 400, f"peak RSS {peak:.0f} MB"
    assert ack.status_code == 200 and refused == 1


def server_records(caplog) -> list:
    """The records of every logger but SQLAlchemy's: an earlier test's Dagster instance in this worker may
    leave a SQLite connection that the garbage collector finalizes on the server's thread, which logs a
    traceback of its own, not the receiver's."""
    return [r for r in caplog.records if not r.name.startswith("sqlalchemy.")]


def test_a_client_hanging_up_mid_body_is_counted_and_logged_once_without_a_traceback(tmp_path, caplog, capfd):
    caplog.set_level(logging.INFO)
    with served(tmp_path) as srv:
        port = int(srv.url.rsplit(":", 1)[1])

        async def hang_ups():
            await asyncio.gather(*(hang_up_mid_body(port) for _ in range(20)))

        asyncio.run(hang_ups())
        deadline = time.monotonic() + 10
        while srv.receiver.metrics.counter("torchci_receiver_disconnects_total", endpoint="webhook") < 20:
            assert time.monotonic() < deadline, "the disconnects were not counted"
            time.sleep(0.05)
        text = requests.get(f"{srv.url}/metrics", timeout=10).text
        assert srv.receiver.budget.held == 0  # what the bodies held was given back
    assert 'torchci_receiver_disconnects_total{endpoint="webhook"} 20' in text
    records = server_records(caplog)
    assert not [r for r in records if r.exc_info], "a traceback was logged"
    lines = [r.getMessage() for r in records if "hung up" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "Traceback" not in capfd.readouterr().err


def test_readiness_fails_while_deliveries_are_refused_and_recovers_with_them(tmp_path, monkeypatch):
    body = json.dumps({"action": "queued", "workflow_job": {"id": 7}}).encode()
    spool_dir = str(tmp_path / "spool")
    real_write = os.write

    def disk_full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(spool_dir):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with served(tmp_path) as srv:
        def ready() -> requests.Response:
            time.sleep(1.1)  # readiness is probed at most once a second
            return requests.get(f"{srv.url}/readyz", timeout=10)

        assert ready().status_code == 200
        assert srv.post_webhook(body, delivery="before").status_code == 200
        monkeypatch.setattr(os, "write", disk_full)
        refused = srv.post_webhook(body, delivery="while-full")
        not_ready = ready()
        metrics_text = requests.get(f"{srv.url}/metrics", timeout=10).text
        assert requests.get(f"{srv.url}/healthz", timeout=10).status_code == 200  # alive, only not ready
        monkeypatch.setattr(os, "write", real_write)
        back = ready()
        accepted = srv.post_webhook(body, delivery="after")
    assert refused.status_code == 503
    assert not_ready.status_code == 503 and "No space left on device" in not_ready.json()["reasons"][0]
    assert "torchci_receiver_ready 0" in metrics_text
    assert back.status_code == 200 and back.json() == {"ready": True, "reasons": []}
    assert accepted.status_code == 200


def test_a_spool_over_its_high_water_mark_refuses_deliveries_until_it_is_rolled(tmp_path):
    body = json.dumps({"action": "queued", "pad": "x" * 4000}).encode()
    with served(tmp_path, spool_high_water=2000, roll_interval_s=3.0) as srv:
        assert srv.post_webhook(body, delivery="fills-it").status_code == 200
        time.sleep(1.1)
        over = requests.get(f"{srv.url}/readyz", timeout=10)
        refused = srv.post_webhook(body, delivery="refused")
        deadline = time.monotonic() + 15
        while requests.get(f"{srv.url}/readyz", timeout=10).status_code != 200:  # the roll empties the spool
            assert time.monotonic() < deadline, "readiness did not recover after the roll"
            time.sleep(0.2)
        accepted = srv.post_webhook(body, delivery="after-the-roll")
    assert over.status_code == 503 and "high-water" in over.json()["reasons"][0]
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "30"
    assert accepted.status_code == 200


@pytest.mark.parametrize("below", [False, True])
def test_serve_with_an_unusable_spool_says_so_in_one_line_and_exits_2(tmp_path, below):
    (tmp_path / "a-file").write_text("x")
    spool_dir = tmp_path / "a-file" / "spool" if below else tmp_path / "a-file"
    env = {**os.environ, "TORCHCI_SPOOL_DIR": str(spool_dir), "TORCHCI_CONFIG": config_file(tmp_path),
           "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"), "TORCHCI_LAKE_URI": str(tmp_path / "lake")}
    done = subprocess.run([TORCHCI, "serve", "--port", str(free_port())], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    what = f"is below {tmp_path / 'a-file'}, which is a file" if below else "is a file"
    assert done.stderr.strip().splitlines() == [
        f"torchci serve: TORCHCI_SPOOL_DIR={str(spool_dir)!r}: {what}; expected a folder"]


def test_a_spool_on_a_disk_that_refuses_writes_is_found_before_listening(tmp_path, monkeypatch):
    def read_only(fd, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "write", read_only)
    with pytest.raises(spool.SpoolError, match=r"TORCHCI_SPOOL_DIR=.*Read-only file system"):
        spool.check_spool_dir(tmp_path / "spool")


def test_repeated_events_are_logged_once_per_interval_with_their_count(caplog):
    now = [0.0]
    noise = ThrottledLog(logging.getLogger("torchci.test"), interval_s=60, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="torchci.test")
    for i in range(1000):
        noise.log("disconnect:webhook", logging.INFO, f"hang-up {i}")
    noise.log("spool", logging.ERROR, "disk full")
    now[0] = 59.0
    noise.flush()  # the interval has not ended: nothing yet
    now[0] = 61.0
    noise.flush()
    noise.log("disconnect:webhook", logging.INFO, "hang-up 1000")  # a new interval starts with a line
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "hang-up 0"), ("ERROR", "disk full"), ("INFO", "999 more in the last 60s, the last: hang-up 999"),
        ("INFO", "hang-up 1000")]


def test_large_bodies_leave_a_quarter_of_the_budget_to_small_ones():
    budget = BodyBudget(limit=100 * MIB)
    large = [Hold(budget) for _ in range(4)]
    for hold in large[:3]:
        hold.admit(24 * MIB)  # taken whole before a byte is read
        hold.take(MIB, declared=24 * MIB)  # and its bytes are not counted twice
    with pytest.raises(OverBudget):
        large[3].admit(24 * MIB)  # 96 MiB would pass the large share of 75 MiB
    small = Hold(budget)
    for _ in range(20):
        small.take(512 * 1024, declared=512 * 1024)  # 10 MiB of ordinary deliveries still fit
    chunked = Hold(budget)
    chunked.take(MIB, declared=None)
    assert budget.held_large == 72 * MIB
    with pytest.raises(OverBudget):  # without a declared length, large (all of it) once its size so far is
        chunked.take(3 * MIB, declared=None)
    chunked.take(MIB, declared=None)
    assert budget.held_large == 74 * MIB
    with pytest.raises(OverBudget):  # a large declared length is refused before reading when it does not fit
        Hold(budget).admit(2 * MIB)
    idle = Hold(budget)
    idle.admit(512 * 1024)  # a small one is admitted, but holds nothing until its bytes arrive
    assert budget.held == 74 * MIB + 10 * MIB
    for hold in (*large, small, chunked, idle):
        hold.release()
    assert (budget.held, budget.held_large) == (0, 0)


def test_requests_without_a_signature_or_token_are_refused_before_their_body_is_read(tmp_path):
    def refused_unread(port: int, head: bytes) -> tuple[bytes, bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(head)  # and none of the 1 MB body
            answer = b""
            while chunk := s.recv(65536):  # the server answers, then closes the connection
                answer += chunk
        return answer.split(b"\r\n", 1)[0], answer

    with served(tmp_path) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        webhook = request_head(1_000_000).replace(b"X-Hub-Signature-256", b"X-Not-A-Signature")
        callback = request_head(1_000_000, path="/relay/callback")  # no Authorization header
        (status_w, answer_w), (status_c, answer_c) = refused_unread(port, webhook), refused_unread(port, callback)
        held = srv.receiver.budget.held
    assert (status_w, status_c) == (b"HTTP/1.1 401 Unauthorized", b"HTTP/1.1 401 Unauthorized")
    assert b"connection: close" in answer_w.lower() and b"connection: close" in answer_c.lower()
    assert held == 0


def test_a_segment_waiting_too_long_for_the_archive_fails_readiness_only_when_asked(tmp_path):
    sealed = tmp_path / "spool" / "webhooks" / "host-20261101T000000000000Z.jsonl"
    sealed.parent.mkdir(parents=True)
    sealed.write_bytes(b'{"event": "push"}\n')
    an_hour_ago = time.time() - 3600
    os.utime(sealed, (an_hour_ago, an_hour_ago))
    assert Readiness(tmp_path / "spool", high_water=1 << 30).refresh() == []  # off by default
    [reason] = Readiness(tmp_path / "spool", high_water=1 << 30, backlog_s=600).refresh()
    assert reason.startswith("a spool segment has waited 3600s for the archive, over TORCHCI_ROLL_BACKLOG_S=600")
    [reason] = Readiness(tmp_path / "spool", high_water=10).refresh()
    assert "over its high-water mark of 10" in reason


def test_a_failing_disk_logs_one_error_line_with_a_count_not_one_per_request(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(spool, "WRITE_ERRORS", ThrottledLog(spool.log))  # a fresh interval for this test
    caplog.set_level(logging.INFO, logger="torchci.receiver")
    body = b'{"action": "queued"}'

    def broken_disk(fd):
        raise OSError(errno.EIO, "I/O error")

    with served(tmp_path) as srv:
        monkeypatch.setattr(spool.os, "fdatasync", broken_disk)
        codes = [srv.post_webhook(body, delivery=f"d-{i}").status_code for i in range(20)]
        errors = srv.receiver.metrics.counter("torchci_receiver_write_errors_total", stream="webhooks")
        monkeypatch.undo()
    assert codes == [503] * 20 and errors == 20
    records = server_records(caplog)
    lines = [r for r in records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in lines] == ["spool webhooks: [Errno 5] I/O error; the 1 request(s) get 503"]
    assert not [r for r in records if r.exc_info]
