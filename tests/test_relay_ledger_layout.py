"""Reading one commit's rows of a relay ledger (`dispatches`, `relay_actions`) on S3 must not list
every part the day holds: S3 (through pyarrow) lists a folder whole, and a busy day holds tens of
thousands of parts, read several times per dispatch. Parts go to a sub-folder named by the first
two hex digits of their commit, and parts a lake already holds in the day folder itself (the layout
before) are still read. The S3 is moto's server on 127.0.0.1 (tests/conftest.py), the counting a
pyarrow filesystem wrapped around the real S3 one."""

import datetime as dt
import hashlib
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from resources.lake import Lake, connect
from tests.conftest import S3_BUCKET
from torchci_assets.relay.check_runs import ACTIONS_SCHEMA, ACTIONS_TABLE
from torchci_assets.relay.dispatch import LEDGER_SCHEMA, LEDGER_TABLE, ledger_rows, record_attempt

NOW = dt.datetime.now(dt.timezone.utc)
REPOS = ["acme-ai/torch-npu", "big-co/torch-gpu"]


class Counting(pafs.FileSystemHandler):
    """The real filesystem, counting what its folder listings return."""

    def __init__(self, fs: pafs.FileSystem):
        self.fs, self.listed = fs, 0

    def get_type_name(self):
        return "counting"

    def equals(self, other):
        return other is self

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        infos = self.fs.get_file_info(selector)
        self.listed += len(infos)
        return infos

    def create_dir(self, path, recursive):
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self.fs.delete_file(path)

    def move(self, src, dest):
        self.fs.move(src, dest)

    def copy_file(self, src, dest):
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        return self.fs.open_input_file(path)

    def open_output_stream(self, path, metadata):
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        return self.fs.open_append_stream(path, metadata=metadata)

    def normalize_path(self, path):
        return self.fs.normalize_path(path)


def sha_of(n: int) -> str:
    return hashlib.sha1(str(n).encode()).hexdigest()


def dispatch_row(sha: str, repo: str, outcome: str) -> dict:
    return {"sha": sha, "upstream_repo": "pytorch/pytorch", "downstream_repo": repo, "level": "L4",
            "event_type": "pull_request", "delivery_id": f"d-{sha[:8]}", "source": "webhook", "attempted_at": NOW,
            "status_code": 204 if outcome == "ok" else None, "outcome": outcome, "error": "", "http_attempts": 1,
            "waited_s": 0.0, "run_id": "r", "attempt_id": f"{sha}-{repo}", "check_run_wanted": False}


@pytest.fixture
def busy_lake(s3_server) -> Lake:
    """A day of 30 commits, each dispatched to two downstreams (a claim and its outcome per send)."""
    lake = Lake.at(f"s3://{S3_BUCKET}/ledger-{uuid.uuid4().hex[:8]}")
    for n in range(30):
        for repo in REPOS:
            for outcome in ("claimed", "ok"):
                record_attempt(lake, dispatch_row(sha_of(n), repo, outcome))
    return lake


def listed_by_one_read(lake: Lake, sha: str, table: str = LEDGER_TABLE) -> tuple[int, list[dict]]:
    counting = Counting(lake.store.fs)
    real, lake.store.fs = lake.store.fs, pafs.PyFileSystem(counting)
    try:
        rows = ledger_rows(lake, sha, lookback_days=1, now=NOW, table=table)
    finally:
        lake.store.fs = real
    return counting.listed, rows


def test_a_ledger_read_on_s3_lists_its_commits_parts_not_the_whole_day(busy_lake):
    sha = sha_of(7)
    listed, rows = listed_by_one_read(busy_lake, sha)
    assert sorted((r["downstream_repo"], r["outcome"]) for r in rows) == sorted(
        (repo, outcome) for repo in REPOS for outcome in ("claimed", "ok"))
    day = busy_lake.files(LEDGER_TABLE, [f"{NOW:%Y-%m-%d}"])
    buckets = {sha_of(n)[:2] for n in range(30)}
    # its own four parts, and the day folder's sub-folders (at most 256, whatever the day's traffic)
    assert len(day) == 120 and listed <= len(rows) + len(buckets)


def test_parts_written_in_the_day_folder_itself_are_still_read(busy_lake):
    """A lake written before the sub-folders: its parts sit in the day folder, named `<sha>-...`."""
    sha, day = sha_of(99), f"{NOW:%Y-%m-%d}"
    for repo, outcome in [(REPOS[0], "claimed"), (REPOS[0], "ok")]:
        part = f"{sha}-{repo.replace('/', '--')}-{uuid.uuid4().hex[:12]}"
        busy_lake.write(LEDGER_TABLE, day, pa.Table.from_pylist([dispatch_row(sha, repo, outcome)],
                                                                 schema=LEDGER_SCHEMA), part=part)
    record_attempt(busy_lake, dispatch_row(sha, REPOS[1], "ok"))
    _, rows = listed_by_one_read(busy_lake, sha)
    assert sorted((r["downstream_repo"], r["outcome"]) for r in rows) == [
        (REPOS[0], "claimed"), (REPOS[0], "ok"), (REPOS[1], "ok")]
    # and the whole table, as the zombie sweep and `torchci query` read it
    con = connect()
    try:
        busy_lake.register(con, LEDGER_TABLE, [day])
        assert con.execute("SELECT count(*), count(DISTINCT sha), min(day) FROM dispatches").fetchone() == (
            123, 31, NOW.date())
    finally:
        con.close()


def test_a_relay_actions_row_of_no_commit_is_kept_and_read(tmp_path):
    """`relay_actions` rows are keyed by head sha too; one without a usable sha still gets a folder."""
    lake = Lake.at(str(tmp_path / "lake"))
    row = {name: None for name in ACTIONS_SCHEMA.names}
    row.update(action="wanted", key="k", sha="", downstream_repo=REPOS[0], outcome="ok", attempted_at=NOW)
    path = record_attempt(lake, row, ACTIONS_TABLE, ACTIONS_SCHEMA)
    assert path.startswith(f"{ACTIONS_TABLE}/day={NOW:%Y-%m-%d}/") and "//" not in path
    assert [r["key"] for r in ledger_rows(lake, "", lookback_days=1, now=NOW, table=ACTIONS_TABLE)] == ["k"]
