"""A run SIGKILLed anywhere inside its commit (before its journal, between the journal's copies,
before the first delete, between deletes, between renames, after the last rename, between the
journal's removals) leaves each table of the partition as it was or as the run would have left it,
never a mix: for a reader that follows journals right after the kill, for a sweep that first
finishes the commits of dead runs, and for the next run's commit, which first finishes the killed
one (undoes it when its journal was not complete: then nothing had changed); and the next refresh
leaves the day as a from-scratch ingest does. Local and on S3 (moto), with real `kill -9`s, on the
simulated day of `test_ingest_increments`: the daily rebuild of a day a refresh added a part to,
and a refresh whose increment merges parts (`compaction`)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from conftest import S3_BUCKET
from resources.lake import Lake, connect
from resources.storage import COMMITTING, FileEntry, Store
from test_ingest_increments import DAY, ROOT, SIM, increments, land
from torchci_assets.ingest import compaction
from torchci_assets.ingest.commit import finish_killed_commits
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.simulate.generate import generate_archive

TABLES = ("test_run", "rejects")

# Runs one test_run ingest; during its commit each delete, journal write and rename is a step,
# printed with its kind, and step number KILL_AT (-1: none) is a SIGKILL instead.
RUN = r"""
import json, os, signal, sys
from resources.lake import Lake
from resources.storage import JOURNAL_RE, Store
from torchci_assets.ingest import commit, compaction
from torchci_assets.ingest.reports import ingest_test_run_day

archive_uri, lake_uri, day, incremental, kill_at, fanout = sys.argv[1:]
compaction.FANOUT = int(fanout)
steps, active = [], [False]

def step(kind, path):
    if active[0]:
        if len(steps) == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        steps.append(kind)

real_delete, real_output = Store.delete, Store.atomic_output
def delete(self, rel):
    step("unjournal" if JOURNAL_RE.match(rel.rsplit("/", 1)[-1]) else "delete", rel)
    return real_delete(self, rel)
def atomic_output(self, rel, owner=None):
    step("journal", rel)
    return real_output(self, rel, owner)
Store.delete, Store.atomic_output = delete, atomic_output

class Moves:
    def __init__(self, fs):
        self.fs = fs
    def __getattr__(self, name):
        return getattr(self.fs, name)
    def move(self, src, dst):
        step("move", dst)
        return self.fs.move(src, dst)

real_commit = commit.PartitionCommit.commit
def killable(self):
    real_fs, self.lake.store.fs, active[0] = self.lake.store.fs, Moves(self.lake.store.fs), True
    try:
        real_commit(self)
    finally:
        self.lake.store.fs, active[0] = real_fs, False
commit.PartitionCommit.commit = killable
ingest_test_run_day(Store(archive_uri), Lake.at(lake_uri, owner="killed-run"), day, incremental=incremental == "1")
print(json.dumps(steps))
"""


# A process that imported what RUN needs and forks one child per run, as the warm run launcher forks
# runs: each run is still a process of its own that RUN's SIGKILL ends, without the imports (pyarrow,
# duckdb, the ingest) a new interpreter paid again at every kill point.
FORKER = r"""
import json, os, sys, traceback
from resources.lake import Lake
from torchci_assets.ingest.reports import ingest_test_run_day

def child(request):
    for fd, name in ((1, "out"), (2, "err")):
        os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c", *request["argv"]]
    try:
        exec(compile(request["code"], "<run>", "exec"), {"__name__": "__main__"})
        status = 0
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class Forker:
    """The client of one FORKER process: `run` as `subprocess.run` of RUN, forked instead of started."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.proc = subprocess.Popen([sys.executable, "-c", FORKER], cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, archive: Store, lake_uri: str, incremental: bool, kill_at: int,
            fanout: int) -> subprocess.CompletedProcess:
        argv = [archive.uri, lake_uri, DAY, "1" if incremental else "0", str(kill_at), str(fanout)]
        out, err = self.folder / f"{uuid.uuid4().hex}.out", self.folder / f"{uuid.uuid4().hex}.err"
        request = {"code": RUN, "argv": argv, "env": dict(os.environ), "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the forking process ended"
        return subprocess.CompletedProcess(argv, int(answer), out.read_bytes(), err.read_bytes())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def forker(tmp_path_factory):
    forking = Forker(tmp_path_factory.mktemp("runs"))
    yield forking
    forking.close()


def as_committed(store: Store, folder: str, entries: list[FileEntry]) -> list[FileEntry]:
    """`entries` (the visible Parquet files of `folder`) as they are once the commits journaled
    there are finished: what a journal says the partition holds, which must be the new state."""
    out = {e.path: e for e in entries}
    for journal in [j for j in store.journals(folder) if store.journal_state(j) == COMMITTING]:
        for path in journal.paths():
            out.pop(path, None)
        for staged, final in journal.moves:
            name = final.rsplit("/", 1)[-1]
            if final.rsplit("/", 1)[0] != folder or name[:1] in (".", "_") or not name.endswith(".parquet"):
                continue
            for path in (staged, final):  # not moved yet, or moved since
                info = store.fs.get_file_info(store.full(path))
                if info.type == pafs.FileType.File:
                    out[path] = FileEntry(path, info.size, stamp=str(info.mtime_ns))
                    break
    return sorted(out.values(), key=lambda e: e.path)


def rows(lake: Lake, table: str, follow_journals: bool) -> list:
    """The table's rows of the day, sorted, as a reader lists its files: plainly, or following the
    journals of unfinished commits (`as_committed`)."""
    folder = f"{table}/day={DAY}"
    entries = lake.store.list_files(folder, (".parquet",))
    if follow_journals:
        entries = as_committed(lake.store, folder, entries)
    files = [lake.store.full(e.path) for e in entries]
    con = connect()
    try:
        if not lake.register_files(con, files, "t"):
            return []
        return sorted(con.execute("SELECT * EXCLUDE (day) FROM t").fetchall(), key=repr)
    finally:
        con.close()


def state(lake: Lake, follow_journals: bool = False) -> dict[str, list]:
    return {table: rows(lake, table, follow_journals) for table in TABLES}


def copy_lake(src: Store, dst_uri: str) -> Lake:
    """A copy of a lake under `dst_uri` (local or S3): each kill starts from the same state."""
    dst = Store(dst_uri)
    if dst.is_local:
        shutil.copytree(src.root, dst.root)
    else:
        pafs.copy_files(src.root, dst.root, source_filesystem=src.fs, destination_filesystem=dst.fs)
    return Lake(dst)


def kill_points(steps: list[str]) -> dict[int, str]:
    """Each named point of the commit by the step a kill there comes before (the first done is 0)."""
    def first(kind: str) -> int:
        return steps.index(kind)

    def last(kind: str) -> int:
        return len(steps) - 1 - steps[::-1].index(kind)

    def then(at: int, kind: str) -> bool:
        return at < len(steps) and steps[at] == kind

    named = [("before the commit's first change", 0, True),
             ("between the journal's copies", first("journal") + 1 if "journal" in steps else 0,
              "journal" in steps and then(first("journal") + 1, "journal")),
             ("before the first delete", first("delete"), True),
             ("between deletes", first("delete") + 1, then(first("delete") + 1, "delete")),
             ("before the first rename", first("move"), True),
             ("between renames", first("move") + 1, then(first("move") + 1, "move")),
             ("after the last rename", last("move") + 1, last("move") + 1 < len(steps)),
             ("between the journal's removals", last("unjournal") if "unjournal" in steps else 0,
              steps.count("unjournal") > 1)]
    points: dict[int, str] = {}
    for name, at, reached in named:
        if reached:
            points.setdefault(at, name)
    return points


@pytest.fixture(scope="module")
def day_landings(tmp_path_factory) -> list[dict[str, bytes]]:
    source = tmp_path_factory.mktemp("sim")
    generate_archive(source, [dt.date.fromisoformat(DAY)], SIM, log=lambda _: None)
    landings = increments(source, k=4)
    for k, files in enumerate(landings):  # each landing brings rejects too: a torn report, a bad line
        files[f"test-reports/day={DAY}/9{k}/1/9{k}/torn-{k}.xml"] = b"<testsuite><testcase name="
        files[f"test-runs/day={DAY}/zz-bad-{k}.jsonl"] = b"{not json\n"
    return landings


def before_rebuild(folder: Path, landings) -> tuple[Store, Lake, bool, int]:
    """A day a refresh added a part to (`data` + `inc-1`), about to be rebuilt by the daily run."""
    archive, lake = Store(str(folder / "archive")), Lake.at(str(folder / "before"))
    for files in landings[:2]:
        land(archive, files)
        ingest_test_run_day(archive, lake, DAY, incremental=True)
    for files in landings[2:]:
        land(archive, files)
    return archive, lake, False, compaction.FANOUT


def before_merge(folder: Path, landings) -> tuple[Store, Lake, bool, int]:
    """A day of `data`, `inc-1` and `inc-2`, about to get `inc-3`: with two parts a level, the
    increment merges inc-1 and inc-2 into one part and deletes them."""
    archive, lake = Store(str(folder / "archive")), Lake.at(str(folder / "before"))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(compaction, "FANOUT", 2)
        for files in landings[:3]:
            land(archive, files)
            ingest_test_run_day(archive, lake, DAY, incremental=True)
    land(archive, landings[3])
    return archive, lake, True, 2


# Each scenario's archive and lake are built once a module, for the local and the S3 kills: the
# kills only read them (each kill works on a copy of the lake).
@pytest.fixture(scope="module")
def rebuild_day(tmp_path_factory, day_landings) -> tuple[Store, Lake, bool, int]:
    return before_rebuild(tmp_path_factory.mktemp("rebuild"), day_landings)


@pytest.fixture(scope="module")
def merge_day(tmp_path_factory, day_landings) -> tuple[Store, Lake, bool, int]:
    return before_merge(tmp_path_factory.mktemp("merge"), day_landings)


def check_kills(forker: Forker, base: str, archive: Store, before: Lake, incremental: bool, fanout: int) -> None:
    old = state(before)
    done = copy_lake(before.store, f"{base}/done")
    finished = forker.run(archive, done.store.uri, incremental, -1, fanout)
    assert finished.returncode == 0, finished.stderr.decode()[-3000:]
    steps, new = json.loads(finished.stdout.decode().strip().splitlines()[-1]), state(done)
    assert old != new and all(new.values())
    points = kill_points(steps)
    assert {"between deletes", "between renames"} <= set(points.values()), steps
    for at, name in points.items():
        lake = copy_lake(before.store, f"{base}/{at}")
        killed = forker.run(archive, lake.store.uri, incremental, at, fanout)
        assert killed.returncode == -9, (name, killed.stderr.decode()[-3000:])
        journaled = steps[:at].count("journal") == steps.count("journal") > 0  # all its copies written
        seen = state(lake, follow_journals=True)
        for table in TABLES:  # a reader right after the kill: the old state or the new, table by table
            assert seen[table] in (old[table], new[table]), (name, table)
        swept = copy_lake(lake.store, f"{base}/{at}-swept")
        for table in TABLES:  # a sweep that first finishes the commits of dead runs: nothing it needs goes
            swept.store.finish_commits(f"{table}/day={DAY}", lambda owner: False)
            swept.store.sweep_staging(f"{table}/day={DAY}", lambda owner: False)
        assert state(swept) == (new if journaled else old), name
        recovered = copy_lake(lake.store, f"{base}/{at}-recovered")
        folders = [f"{table}/day={DAY}" for table in TABLES]
        finish_killed_commits(recovered.store, folders, lambda path: True)  # as the next commit does
        assert state(recovered) == (new if journaled else old), name
        again = ingest_test_run_day(archive, lake, DAY, incremental=True)  # the next refresh, on the killed lake
        assert state(lake) == new, (name, again.mode, again.rebuild_reason)
        assert not lake.store.journals(f"test_run/day={DAY}") and not lake.store.journals(f"rejects/day={DAY}")


def test_a_daily_rebuild_killed_anywhere_in_its_commit_leaves_the_old_or_the_new_day(tmp_path, rebuild_day, forker):
    check_kills(forker, str(tmp_path / "kills"), *rebuild_day)


def test_a_merging_refresh_killed_anywhere_in_its_commit_leaves_the_old_or_the_new_day(tmp_path, merge_day, forker,
                                                                                        monkeypatch):
    monkeypatch.setattr(compaction, "FANOUT", 2)  # for the next refresh after each kill, as for the killed one
    check_kills(forker, str(tmp_path / "kills"), *merge_day)


@pytest.mark.parametrize("scenario", ["rebuild", "merge"])
def test_on_s3_a_commit_killed_anywhere_leaves_the_old_or_the_new_day(request, forker, monkeypatch, s3_server,
                                                                      scenario):
    before = request.getfixturevalue(f"{scenario}_day")
    monkeypatch.setattr(compaction, "FANOUT", before[3])
    check_kills(forker, f"s3://{S3_BUCKET}/commit-kill-{uuid.uuid4().hex[:8]}", *before)
