import atexit
import contextlib
import functools
import gc
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from pytest_httpserver import HTTPServer

from resources.storage import Store

DATA = Path(__file__).parent / "data"
S3_BUCKET = "torchci-test"
# PyTorch's published files (tests/data/pytorch/README.md says where each comes from)
PYTORCH_DATA = DATA / "pytorch"


def skip_without(reason: str) -> None:
    """Skip a test whose tool (Chromium, PostgreSQL's server, Playwright) this machine lacks.
    `.ci/run` installs them and sets REQUIRE_TEST_TOOLS, so in CI a missing one fails the test."""
    if os.environ.get("REQUIRE_TEST_TOOLS"):
        pytest.fail(f"{reason}, though REQUIRE_TEST_TOOLS says it was installed")
    pytest.skip(reason)


def pytorch_bytes(name: str) -> bytes:
    """A published file's exact bytes (stored gzipped: `name` is the file's own name)."""
    return gzip.decompress((PYTORCH_DATA / f"{name}.gz").read_bytes())


def pytorch_json(name: str):
    return json.loads(pytorch_bytes(name))

# The tests pick their own days (autumn 2026): pin the first daily partition, so that whatever
# archive TORCHCI_ARCHIVE_URI points to (`make test` exports ./var/archive) does not decide which
# partitions exist. Tests of the default start set their own environment.
os.environ["TORCHCI_FIRST_DAY"] = "2026-01-01"


def envelope(event: str, delivery_id: str, payload, received_at: str = "2026-11-01T12:00:00.000Z") -> dict:
    return {"event": event, "delivery_id": delivery_id, "received_at": received_at, "payload": payload}


def jsonl_bytes(name: str, lines: list, gz: bool | None = None) -> bytes:
    """JSONL (dicts are serialized, bytes/str written as-is), gzipped if `name` ends in .gz."""
    data = b"".join(
        (json.dumps(x).encode() if isinstance(x, (dict, list)) else x if isinstance(x, bytes) else x.encode()) + b"\n"
        for x in lines
    )
    return gzip.compress(data) if (gz if gz is not None else name.endswith(".gz")) else data


def write_lines(path: Path, lines: list, gz: bool | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jsonl_bytes(path.name, lines, gz))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


@contextlib.contextmanager
def s3_environment(endpoint: str, bucket: str):
    """The environment the storage layer reads, set for the S3 server at `endpoint` (dummy keys:
    moto accepts any) with `bucket` created, and restored afterwards."""
    env = {"TORCHCI_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        pafs.S3FileSystem(endpoint_override=endpoint, region="us-east-1", allow_bucket_creation=True).create_dir(bucket)
        yield endpoint
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API on 127.0.0.1 (moto's server, through tests/moto_s3.py), with bucket S3_BUCKET; yields the endpoint.

    The storage layer reads its endpoint and credentials from the environment, as in
    production, so the fixture sets them for the session and restores them afterwards. The
    server is a separate process, so the S3 client code under test talks HTTP to it exactly as
    it would to MinIO or AWS.
    """
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "moto_s3.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        with s3_environment(f"http://127.0.0.1:{port}", S3_BUCKET) as endpoint:
            yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


class Roots:
    """One test's archive, lake and outputs roots on one backend (a local folder or an S3
    prefix), with helpers to put archive files there the way an uploader would."""

    def __init__(self, base: str):
        self.base = base
        self.archive_uri = f"{base}/archive"
        self.lake_uri = f"{base}/lake"
        self.outputs_uri = f"{base}/outputs"
        self.archive = Store(self.archive_uri)

    def write(self, rel: str, lines: list, gz: bool | None = None) -> str:
        """Write archive file `rel` as JSONL (see jsonl_bytes); returns `rel`."""
        return self.write_bytes(rel, jsonl_bytes(rel, lines, gz))

    def write_bytes(self, rel: str, data: bytes) -> str:
        self.archive.write_bytes(rel, data)
        return rel


@pytest.fixture(params=["local", "s3"])
def roots(request, tmp_path) -> Roots:
    """Run the test once on local folders and once on S3 (a bucket of its own: moto lists a prefix by
    reading every key of its bucket, so a bucket every test wrote to would make each listing slower
    through the session)."""
    if request.param == "local":
        return Roots(str(tmp_path))
    endpoint = request.getfixturevalue("s3_server")
    bucket = f"{S3_BUCKET}-{uuid.uuid4().hex[:12]}"
    pafs.S3FileSystem(endpoint_override=endpoint, region="us-east-1", allow_bucket_creation=True).create_dir(bucket)
    return Roots(f"s3://{bucket}/{request.node.name.split('[')[0]}")


@pytest.fixture
def octokit() -> dict:
    return json.loads((DATA / "octokit" / "examples.json").read_text())


@pytest.fixture
def threaded_server():
    """A fake GitHub on 127.0.0.1 (a free port) that answers while an earlier, stalled request is still
    being handled."""
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture(scope="session")
def httpserver_listen_address():
    """pytest-httpserver plays the GitHub API on loopback only, on a free port."""
    return ("127.0.0.1", 0)


# Where a test's Dagster instance keeps its SQLite files: a RAM file system where the machine has
# one with room (a container's default /dev/shm is 64 MB), else the system's temp folder. The
# storage is Dagster's own, unchanged; on disk each event's commit waits for an fsync, which made
# up about half of a relay test's time.
def _ram_dir(path: str = "/dev/shm", min_free: int = 1 << 30) -> str | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return path if os.access(path, os.W_OK) and stats.f_bavail * stats.f_frsize >= min_free else None


RAM_DIR = _ram_dir()


# The configuration keys that choose an instance's storage: with any of them, the template's SQLite
# files would not be the instance's.
STORAGE_KEYS = frozenset({"storage", "run_storage", "event_log_storage", "schedule_storage"})


@functools.cache
def instance_template() -> str:
    """The SQLite files of a new instance, made once per test process. Creating them runs Dagster's
    schema creation and migrations: about 0.8 s, where starting on a copy takes 0.15 s and most relay
    tests' runs take less. A copy of the files this Dagster made is the same new instance."""
    import dagster as dg

    folder = tempfile.mkdtemp(dir=RAM_DIR, prefix="torchci-test-template-")
    atexit.register(shutil.rmtree, folder, True)
    with dg.instance_for_test(temp_dir=folder):
        pass
    os.remove(os.path.join(folder, "dagster.yaml"))  # each instance writes its own
    return folder


@contextlib.contextmanager
def ram_instance(**kwargs):
    """`dg.instance_for_test(**kwargs)` in a folder of RAM_DIR, its storage a copy of
    `instance_template()`'s: a test that needs a real instance (its runs, cursors, run queue) need
    not pay for durability it never uses, nor for creating the same empty databases again."""
    import dagster as dg

    from torchci_assets.sqlite_storage import storage_config

    with tempfile.TemporaryDirectory(dir=RAM_DIR, prefix="torchci-test-instance-") as folder:
        overrides = kwargs.pop("overrides", None) or {}
        if not STORAGE_KEYS & set(overrides):
            shutil.copytree(instance_template(), folder, dirs_exist_ok=True)
            overrides = {**storage_config(folder), **overrides}  # the project's, as deployments run
        with dg.instance_for_test(temp_dir=folder, overrides=overrides, **kwargs) as inst:
            yield inst


@pytest.fixture
def instance():
    """A throwaway Dagster instance (runs, sensors' cursors, the run queue's records)."""
    with ram_instance() as inst:
        yield inst


@pytest.fixture
def extracts_made(monkeypatch) -> list[str]:
    """The source files the lake's per-file extracts read (`resources.lake_extracts`), in order,
    as `day=D/<part>.parquet`: what a test of a kept extract watches."""
    from resources import lake_extracts

    made: list[str] = []
    real = lake_extracts._extract

    def watched(con, lake, extract, source, rel):
        made.append("/".join(source.rsplit("/", 2)[-2:]))
        real(con, lake, extract, source, rel)
    monkeypatch.setattr(lake_extracts, "_extract", watched)
    return made


# The files that take longest, run first: each file runs whole on one worker (`--dist loadfile`),
# so one of them started last would keep a worker busy long after the others ran out of files.
# Kept by hand from `--durations=0` (bench/README.md, "The test suite").
SLOW_FIRST = ("test_run_cli.py", "test_dagster_dev.py", "test_commit_kill.py", "test_relay_pull_requests.py",
              "test_relay_ticks.py", "test_disabled_issues.py", "test_failure_messages.py",
              "test_github_writes_crash.py", "test_warm_runs.py", "test_s3_requests.py", "test_staging.py",
              "test_ingest_increments.py", "test_hud_browser.py", "test_webhook_ingest.py")


def pytest_configure(config):
    """pytest-xdist hands out the files with the most tests first unless told not to: SLOW_FIRST's
    order would be lost (the slowest files have few tests each, so they started last)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: the rest as collected


def _freeze_what_lives() -> None:
    """Collect the garbage, then keep what is left out of the collector's later full passes."""
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session):
    """What collection loaded (every test module, Dagster, pyarrow, DuckDB: millions of objects)
    lives as long as the worker: kept out of the garbage collector's full passes, which otherwise
    walked all of it, ~0.5 s each, a sixth of a worker's CPU."""
    _freeze_what_lives()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """The same after each file: what its tests imported (modules loaded on first use) outlives
    them; what only they held was freed by the file's last teardown and is collected first."""
    yield
    if nextitem is None or nextitem.path != item.path:
        _freeze_what_lives()
