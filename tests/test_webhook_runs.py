"""A large day's files are cut into runs scanned in parallel; the tables must not depend on it.

A delivery is kept where it is first seen in file order, so a later run's copies of deliveries
an earlier run kept must go, with their typed rows and typed rejects, whatever the copies say.
"""

import copy
import datetime as dt
import gzip
import json
import os
import queue
import subprocess
import sys

import pyarrow as pa
import pytest
import pyarrow.parquet as pq

from conftest import envelope, write_lines
from resources.lake import Lake
from resources.storage import FileEntry, Store
from torchci_assets.ingest.commit import PartitionCommit
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options
from torchci_assets.ingest.webhook_runs import HeldFiles, can_spawn, file_runs, next_result, scan_in_processes
from torchci_assets.ingest.webhook_scan import RunScan, events_batch, held_file
from torchci_assets.ingest.webhooks import ingest_webhook_day

DAY = "2026-11-01"


def _tables(lake_dir):
    """Every table's rows, whatever files hold them (the bronze is one file per segment of a run)."""
    out = {}
    for table_dir in sorted(p for p in lake_dir.iterdir() if p.is_dir()):
        rows = [r for path in sorted(table_dir.rglob("*.parquet")) for r in pq.read_table(path).to_pylist()]
        out[table_dir.name] = sorted(rows, key=repr)
    return out


def _archive(tmp_path, octokit):
    """Four files; later files redeliver earlier deliveries, some received later, some with a bad field."""
    examples = [(e, p) for events in octokit.values() for e, ps in events.items() for p in ps]
    assert len(examples) == 52
    day = tmp_path / "archive" / "webhooks" / f"day={DAY}"
    for f in range(4):
        lines = []
        for i, (event, payload) in enumerate(examples):
            delivery = f"d-{(f * 31 + i) % 90}"  # the same ids recur across files
            payload = copy.deepcopy(payload)
            if event == "workflow_job" and f >= 1:
                payload["workflow_job"]["id"] = "not a number"  # a typed reject only if this copy is kept
            lines.append(envelope(event, delivery, payload, received_at=f"2026-11-01T{10 + f:02d}:00:00Z"))
        write_lines(day / f"f{f}.jsonl.gz", lines + [b"{broken"])
    return Store(str(tmp_path / "archive"))


def test_runs_in_processes_write_what_one_scan_writes(tmp_path, octokit):
    archive = _archive(tmp_path, octokit)
    one = ingest_webhook_day(archive, Lake.at(str(tmp_path / "one")), DAY, workers=1)
    two = ingest_webhook_day(archive, Lake.at(str(tmp_path / "two")), DAY, workers=2)
    three = ingest_webhook_day(archive, Lake.at(str(tmp_path / "three")), DAY, workers=3)
    assert one.deliveries == 90 and one.duplicates == one.lines - 90 - 4
    for other in (two, three):
        assert (one.deliveries, one.duplicates, one.lines, one.rows, one.events) == \
            (other.deliveries, other.duplicates, other.lines, other.rows, other.events)
        assert one.rejects == other.rejects
    # file 1's new jobs are typed rejects; files 2 and 3 only redeliver them or earlier jobs
    assert {r.location.split(":")[0].rsplit("/", 1)[1] for r in one.rejects if "workflow_job.id" in r.reason} == {"f1.jsonl.gz"}
    assert _tables(tmp_path / "one") == _tables(tmp_path / "two") == _tables(tmp_path / "three")
    # the copy kept is the first: file f's lines are received at 10+f o'clock
    first_file = {}
    for f in range(4):
        for i in range(52):
            first_file.setdefault(f"d-{(f * 31 + i) % 90}", f)
    kept = {r["delivery_id"]: r["received_at"].hour for r in pq.read_table(tmp_path / "two" / "webhook_events").to_pylist()}
    assert kept == {d: 10 + f for d, f in first_file.items()}


def test_a_rerun_with_fewer_bronze_files_leaves_none_of_the_earlier_ones(tmp_path, octokit, monkeypatch):
    archive = _archive(tmp_path, octokit)
    lake = Lake.at(str(tmp_path / "lake"))
    monkeypatch.setattr("torchci_assets.ingest.webhook_scan.SEGMENT_ROWS", 10)
    monkeypatch.setattr("torchci_assets.ingest.webhook_scan.EVENT_BATCH_ROWS", 5)
    ingest_webhook_day(archive, lake, DAY, workers=1)
    folder = tmp_path / "lake" / "webhook_events" / f"day={DAY}"
    segments = sorted(folder.glob("part-*.parquet"))
    assert len(segments) == 9  # 90 deliveries, 10 a file, and no empty file after the last
    assert all(pq.read_metadata(p).num_rows == 10 for p in segments)
    (folder / "part-0.parquet").write_bytes((folder / "part-0-000.parquet").read_bytes())  # a file of an older layout
    monkeypatch.undo()
    report = ingest_webhook_day(archive, lake, DAY, workers=1)
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["part-0-000.parquet"]
    assert pq.read_table(folder).num_rows == report.deliveries == 90


def test_runs_are_consecutive_files_of_about_equal_size():
    files = [FileEntry(f"f{i}", size) for i, size in enumerate([5, 1, 1, 1, 1, 1, 5, 5])]
    runs = file_runs(files, 2)
    assert [f.path for run in runs for f in run] == [f.path for f in files]
    assert [sum(f.size for f in run) for run in runs] == [10, 10]
    many = file_runs(files, 8)
    assert 2 < len(many) <= 8 and all(many) and [f for run in many for f in run] == files
    assert len(file_runs(files[:2], 4)) == 2
    assert file_runs([], 2) == [[]]


def _hold(tmp, run: int, n: int, ids: list[str], complete: bool = True) -> None:
    """A held bronze file of run `run`; an incomplete one has only its ".open" name, as while written."""
    os.makedirs(os.path.join(tmp, f"run-{run}"), exist_ok=True)
    path = os.path.join(tmp, f"run-{run}", f"bronze-{n:03d}.arrow")
    at = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    batch = events_batch([("push", None, d, at, "a/b", b"{}") for d in ids])
    with held_file(path) if complete else pa.ipc.new_file(path + ".open", batch.schema) as w:
        w.write_batch(batch)


def test_a_later_runs_held_files_are_written_once_every_earlier_run_is_scanned(tmp_path):
    tmp = str(tmp_path / "tmp")
    _hold(tmp, 1, 0, ["a", "b"])
    _hold(tmp, 1, 1, ["c"], complete=False)
    _hold(tmp, 2, 0, ["b", "d"])
    run0, run1, run2 = (RunScan(index=0, ids={"a": "push"}), RunScan(index=1, ids={"b": "push", "c": "push"}),
                        RunScan(index=2, ids={"d": "push"}))
    out = PartitionCommit(Lake.at(str(tmp_path / "lake")))
    with HeldFiles(out, DAY, tmp) as held:
        held.write_ready([run0, run2], 3)  # run 1 still scanning: only its complete file can go
        assert [os.path.relpath(p, tmp) for p in held.writing] == ["run-1/bronze-000.arrow"]
        _hold(tmp, 1, 1, ["c"])
        run1.held = [os.path.join(tmp, "run-1", f"bronze-{n:03d}.arrow") for n in (0, 1)]
        run2.held = [os.path.join(tmp, "run-2", "bronze-000.arrow")]
        held.write_ready([run0, run1, run2], 3)
        held.wait([run0, run1, run2])
    out.commit()
    folder = tmp_path / "lake" / "webhook_events" / f"day={DAY}"
    ids = {p.name: pq.read_table(p).column("delivery_id").to_pylist() for p in folder.glob("*.parquet")}
    # a (run 0 kept it) and b (run 1 kept it) are copies where they come again
    assert ids == {"part-1-000.parquet": ["b"], "part-1-001.parquet": ["c"], "part-2-000.parquet": ["d"]}
    assert not list((tmp_path / "tmp").rglob("*.arrow"))


def test_a_scan_worker_that_fails_fails_the_ingest_with_its_traceback(tmp_path, octokit):
    archive = _archive(tmp_path, octokit)
    files = archive.list_files(f"webhooks/day={DAY}", (".jsonl.gz",))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / "run-1").write_text("a file where run 1's folder goes")
    lake = Lake.at(str(tmp_path / "lake"))
    args = [(archive.uri, lake.store.uri, None, DAY, run, k, str(tmp)) for k, run in enumerate(file_runs(files, 2))]
    with pytest.raises(RuntimeError, match="(?s)webhook scan of run 1 failed.*FileExistsError"):
        with HeldFiles(PartitionCommit(lake), DAY, str(tmp)) as held:
            scan_in_processes(args, DAY, len(files), lambda s: None, held)



def _ingest_in_two_runs(archive_uri: str, lake_dir: str) -> None:
    assert can_spawn(), "this process can spawn the second run's worker"
    ingest_webhook_day(Store(archive_uri), Lake.at(lake_dir), DAY, workers=2)


@pytest.mark.parametrize("main", ["python -c", "spawned from python -c"])
def test_a_main_module_that_is_no_file_still_scans_in_two_processes(tmp_path, octokit, main):
    """Dagster runs a step in a process spawned from `python -m dagster`: its main module is the
    spawn bootstrap, no file, and a worker spawned from there works as from anywhere."""
    archive = _archive(tmp_path, octokit)
    ingest_webhook_day(archive, Lake.at(str(tmp_path / "one")), DAY, workers=1)
    args = f"{archive.uri!r}, {str(tmp_path / 'two')!r}"
    code = f"import test_webhook_runs as t; t._ingest_in_two_runs({args})"
    if main == "spawned from python -c":
        code = ("import multiprocessing, test_webhook_runs as t\n"
                f"p = multiprocessing.get_context('spawn').Process(target=t._ingest_in_two_runs, args=({args}))\n"
                "p.start(); p.join(); raise SystemExit(p.exitcode)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert sorted(p.name for p in (tmp_path / "two" / "webhook_events" / f"day={DAY}").glob("*.parquet")) == \
        ["part-0-000.parquet", "part-1-000.parquet"]
    assert _tables(tmp_path / "one") == _tables(tmp_path / "two")


def test_a_scan_worker_starts_without_importing_dagster():
    """A spawned worker imports what `scan_run` needs, and `resources` no longer hides Dagster behind
    its attributes: importing the scan modules must not pull it in (~0.5 s a worker)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    code = ("import sys, resources, torchci_assets.ingest.webhook_runs, torchci_assets.ingest.webhook_scan\n"
            "assert 'dagster' not in sys.modules, 'dagster imported'\n"
            "import resources.configured\nassert 'dagster' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_a_script_read_from_stdin_cannot_be_rerun_by_a_spawned_worker():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-"], input=b"from torchci_assets.ingest.webhook_runs import can_spawn\n"
                   b"assert not can_spawn()\n", check=True, env=env)


def test_runs_write_what_one_scan_writes_on_a_simulated_day(tmp_path):
    """The simulator's day: hourly files, redeliveries seconds to hours later (so across runs),
    torn lines, old payload versions, jobs out of order."""
    opts = Options(seed=3, prs_per_day=8, configs=4, test_files=6, tests_per_file=3, test_reports=False,
                   duplicate_rate=0.05, torn_lines_per_day=3)
    generate_archive(tmp_path / "archive", [dt.date(2026, 10, 31), dt.date(2026, 11, 1)], opts, log=lambda _: None)
    archive = Store(str(tmp_path / "archive"))
    reports = {w: ingest_webhook_day(archive, Lake.at(str(tmp_path / f"w{w}")), DAY, workers=w) for w in (1, 2, 3)}
    one = reports[1]
    assert one.deliveries > 1000 and one.duplicates > 20 and len(one.rejects) >= 3
    for w in (2, 3):
        assert (reports[w].deliveries, reports[w].duplicates, reports[w].rows, reports[w].events) == \
            (one.deliveries, one.duplicates, one.rows, one.events)
        assert reports[w].rejects == one.rejects
        assert _tables(tmp_path / f"w{w}") == _tables(tmp_path / "w1")
    # and the day does have deliveries that the second of two runs sees again
    files = archive.list_files(f"webhooks/day={DAY}", (".jsonl.gz",))
    first, second = file_runs(files, 2)
    ids = [_delivery_ids(tmp_path / "archive", run) for run in (first, second)]
    assert len(ids[0] & ids[1]) >= 5


def _delivery_ids(root, files) -> set[str]:
    ids = set()
    for f in files:
        for line in gzip.decompress((root / f.path).read_bytes()).splitlines():
            try:
                ids.add(json.loads(line)["delivery_id"])
            except ValueError:  # a torn line
                pass
    return ids


class _Pipe:
    """A results queue whose items arrive late: the first waits find nothing."""

    def __init__(self, items: list, empty_waits: int):
        self.items, self.empty_waits = items, empty_waits

    def get(self, timeout: float):
        if self.empty_waits or not self.items:
            self.empty_waits -= 1
            raise queue.Empty
        return self.items.pop(0)


class _Worker:
    def __init__(self, alive: bool):
        self.alive = alive

    def is_alive(self) -> bool:
        return self.alive


def test_a_worker_gone_after_sending_is_read_not_reported_lost():
    # the wait times out, then the worker is found gone: what it sent is read
    assert next_result(_Pipe(["scan"], empty_waits=1), [_Worker(alive=False)]) == "scan"
    # every awaited worker still running: nothing yet, no error
    assert next_result(_Pipe(["scan"], empty_waits=1), [_Worker(alive=True)]) is None
    # a worker that exited without sending anything
    with pytest.raises(RuntimeError, match="exited without a result"):
        next_result(_Pipe([], empty_waits=2), [_Worker(alive=True), _Worker(alive=False)])
