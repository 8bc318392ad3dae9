"""The intra-day refresh's ingest: a day built from increments equals the same day built at once,
table by table, with redeliveries and out-of-order states spread across the increments, a refresh
killed between its data and its manifest (by an exception, and by SIGKILL), and the part contract
downstream readers rely on (`increments.partition_parts`)."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import envelope, jsonl_bytes
from resources import listing_cache
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.failures import job_failure
from torchci_assets.derived.failures.job_failure import build_job_failure
from torchci_assets.config import DEFAULT_INFRA_RULES
from torchci_assets.derived.failures.rules import DEFAULT_RULES_PATH, load_ruleset
from torchci_assets.ingest import ci_results, compaction, reports, webhooks
from torchci_assets.ingest.commit import hidden_files
from torchci_assets.ingest.ci_results import ingest_ci_results_day
from torchci_assets.ingest.increments import APPEND, REWRITE, is_refresh, partition_parts
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.landing import flaky_report
from torchci_assets.simulate.world import Options

ROOT = Path(__file__).resolve().parent.parent
DAY = "2026-11-20"
NOW_MS = int(dt.datetime(2026, 11, 20, 23, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)
SIM = Options(seed=3, commits_per_day=4, prs_per_day=2, configs=3, test_files=5, tests_per_file=5, backends=1,
              platform_failures=0)
TABLES = ("webhook_events", "workflow_job", "workflow_run", "push", "pull_request", "test_run", "ci_result",
          "ci_callback_minutes", "rejects", "job_failure")
JOB = 990_001


def job_payload(status: str, **fields) -> dict:
    job = {"id": JOB, "run_id": 77, "run_attempt": 1, "status": status, "head_sha": "abc",
           "name": "linux-jammy-py3.10-gcc11 / test (default, 2, 5, linux.4xlarge)", "labels": ["linux.4xlarge"],
           "workflow_name": "pull", "head_branch": "main", "created_at": "2026-11-20T10:00:00Z",
           "started_at": None, "completed_at": None, "conclusion": None, "runner_name": None, **fields}
    return {"action": status, "workflow_job": job, "repository": {"full_name": "pytorch/pytorch"}}


def quirks(first_hooks_line: bytes) -> list[dict[str, bytes]]:
    """Files landing with increments 1 and 2: a job whose `completed` (from an older GitHub, without
    created_at and run_attempt) lands before its `queued` and `in_progress`, redeliveries of a
    delivery of increment 1 (ours and one of the simulator's), a torn line and a bad timestamp."""
    done = job_payload("completed", started_at="2026-11-20T10:05:00Z", completed_at="2026-11-20T10:35:30Z",
                       conclusion="success", runner_name="i-0abc")
    del done["workflow_job"]["created_at"], done["workflow_job"]["run_attempt"]
    first = [envelope("workflow_job", "q-done", done, "2026-11-20T10:35:31Z")]
    second = [envelope("workflow_job", "q-queued", job_payload("queued"), "2026-11-20T10:00:01Z"),
              envelope("workflow_job", "q-started", job_payload("in_progress", started_at="2026-11-20T10:05:00Z"),
                       "2026-11-20T10:05:01Z"),
              envelope("workflow_job", "q-done", done, "2026-11-20T11:00:00Z"),  # redelivered later
              first_hooks_line.rstrip(b"\n"), b'{"event": "push", "delivery_id": "cut', 
              envelope("workflow_job", "q-bad-ts", {**job_payload("queued", created_at="yesterday"),
                                                    "workflow_job": {**job_payload("queued")["workflow_job"],
                                                                     "id": JOB + 1, "created_at": "yesterday"}},
                       "2026-11-20T12:00:00Z")]
    return [{f"webhooks/day={DAY}/zz-quirks-1.jsonl": jsonl_bytes("a.jsonl", first)},
            {f"webhooks/day={DAY}/zz-quirks-2.jsonl": jsonl_bytes("a.jsonl", second)}]


def increments(source: Path, k: int = 3) -> list[dict[str, bytes]]:
    """The simulated day's files cut into `k` landings: each source's files in name order (a
    job's reports together), then the quirks, and in the last one a new report of a job already
    in the first (a new test of that job: an append)."""
    out: list[dict[str, bytes]] = [{} for _ in range(k)]
    for section in ("webhooks", "test-runs", "ci-results", "logs"):
        files = sorted((source / section / f"day={DAY}").glob("*"))
        for i, f in enumerate(files):
            out[i * k // len(files)][str(f.relative_to(source))] = f.read_bytes()
    jobs = sorted({p.relative_to(source).parts[:5] for p in (source / "test-reports").rglob("*.xml*")})
    for i, job in enumerate(jobs):
        for p in sorted(source.joinpath(*job).rglob("*.xml*")):
            out[i * k // len(jobs)][str(p.relative_to(source))] = p.read_bytes()
    first_hooks = min(p for p in out[0] if p.startswith("webhooks/"))
    first_line = gzip.decompress(out[0][first_hooks]).split(b"\n")[0]
    for landing, files in zip(out, quirks(first_line)):
        landing.update(files)
    early_job = "/".join(jobs[0])
    out[-1][f"{early_job}/test/test-reports/python-pytest/test_late/test_late-0123456789abcdef.xml"] = \
        flaky_report("test_late", "TestLate", "test_lands_late")
    return out


@pytest.fixture(scope="module")
def landings(tmp_path_factory) -> list[dict[str, bytes]]:
    source = tmp_path_factory.mktemp("sim")
    generate_archive(source, [dt.date.fromisoformat(DAY)], SIM, log=lambda _: None)
    return increments(source)


def land(archive: Store, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        archive.write_bytes(rel, data)


def ingest(archive: Store, lake: Lake, incremental: bool) -> dict[str, str]:
    """The three ingests of the day; their modes."""
    w = ingest_webhook_day(archive, lake, DAY, incremental=incremental)
    t = ingest_test_run_day(archive, lake, DAY, incremental=incremental)
    c = ingest_ci_results_day(archive, lake, DAY, now_ms=NOW_MS, incremental=incremental)
    return {"webhooks": w.mode, "test_run": t.mode, "ci_result": c.mode,
            "reasons": [r.rebuild_reason for r in (w, t, c)]}


def snapshot(lake: Lake) -> dict[str, list]:
    """Every table's rows of the day, sorted: what a reader sees, whatever the parts."""
    con = connect()
    try:
        out = {}
        for table in TABLES:
            if lake.register(con, table, [DAY], name="t"):
                out[table] = sorted(con.execute("SELECT * EXCLUDE (day) FROM t").fetchall(), key=repr)
            else:
                out[table] = []
    finally:
        con.close()
    return out


def at_once(tmp_path: Path, landings: list[dict[str, bytes]]) -> dict[str, list]:
    archive, lake = Store(str(tmp_path / "once-archive")), Lake.at(str(tmp_path / "once-lake"))
    for files in landings:
        land(archive, files)
    ingest(archive, lake, incremental=False)
    return snapshot(lake)


@pytest.fixture(scope="module")
def landings_at_once(landings, tmp_path_factory) -> dict[str, list]:
    """The day of `landings` built at once: what several tests compare their increments with."""
    return at_once(tmp_path_factory.mktemp("once"), landings)


def test_a_day_built_from_increments_equals_the_day_built_at_once(tmp_path, landings, landings_at_once):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    modes = []
    for files in landings:
        land(archive, files)
        modes.append(ingest(archive, lake, incremental=True))
    assert [m["webhooks"] for m in modes] == ["rebuild", "increment", "increment"]  # no manifest yet, then adds
    assert [m["test_run"] for m in modes] == ["rebuild", "increment", "increment"]
    assert [m["ci_result"] for m in modes] == ["rebuild", "increment", "increment"]
    assert "no manifest" in modes[0]["reasons"][0]
    built, once = snapshot(lake), landings_at_once
    for table in TABLES:
        assert built[table] == once[table], table
    assert len(built["test_run"]) > 100 and len(built["workflow_job"]) > 50 and built["ci_result"]
    # the quirks: one row for the job, its highest state, created_at filled from the queued delivery
    con = connect()
    lake.register(con, "workflow_job", [DAY], name="j")
    lake.register(con, "webhook_events", [DAY], name="e")
    lake.register(con, "rejects", [DAY], name="r")
    assert con.execute("SELECT status, conclusion, created_at IS NOT NULL, queue_s FROM j WHERE id = ?",
                       [JOB]).fetchall() == [("completed", "success", True, 300.0)]
    assert con.execute("SELECT count(*) FROM e WHERE delivery_id LIKE 'q-%'").fetchall() == [(4,)]
    reasons = [r for (r,) in con.execute("SELECT reason FROM r WHERE source = 'webhooks'").fetchall()]
    assert any("created_at" in r for r in reasons) and len(reasons) >= 2  # the cut line and the bad timestamp
    con.close()


def test_a_refresh_lists_again_only_the_report_folders_that_changed(tmp_path, landings, landings_at_once,
                                                                   monkeypatch):
    """The ingest keeps its walk of the day's report folders; a refresh reads again only those whose
    entries changed (new jobs, and the early job given a new report in the last landing)."""
    monkeypatch.setattr(listing_cache, "SETTLE_NS", 200_000_000)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    walks = []
    for files in landings:
        land(archive, files)
        time.sleep(0.25)  # the folders settle (2 s in production, 0.2 s here)
        report = ingest_test_run_day(archive, lake, DAY, incremental=True)
        walks.append((report.mode, report.folders_read, report.folders_reused))
    assert [w[0] for w in walks] == ["rebuild", "increment", "increment"]
    assert walks[0][2] == 0 and all(0 < read < reused for _, read, reused in walks[1:])
    assert snapshot(lake)["test_run"] == landings_at_once["test_run"]
    kept = tmp_path / "lake" / "test_run" / f"day={DAY}" / "_archive_listing.json"
    assert kept.exists()
    # the daily run walks every folder and leaves no walk behind: past days hold none
    assert ingest_test_run_day(archive, lake, DAY).folders_reused == 0 and not kept.exists()


def test_refreshes_trust_quiet_job_folders_and_the_walk_that_verifies_lists_a_late_report(
        tmp_path, landings, landings_at_once, monkeypatch):
    """Subtrees quiet for SEAL_S (0.5 s here, 2 minutes in production) are trusted below their top
    levels. The last landing writes a report into a job that landed in the first, which a writer
    publishing a job's reports together never does: a quick walk may miss it, and the walk that
    verifies (every VERIFY_S) lists it, so the day equals the day ingested at once."""
    monkeypatch.setattr(listing_cache, "SETTLE_NS", 200_000_000)
    monkeypatch.setattr(listing_cache, "SEAL_S", 0.5)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    unseen = []
    for files in landings:
        land(archive, files)
        time.sleep(0.6)  # everything landed so far is quiet
        unseen.append(ingest_test_run_day(archive, lake, DAY, incremental=True).folders_unseen)
    assert unseen[0] == 0 and unseen[1] > 0 and unseen[2] > 0
    monkeypatch.setattr(listing_cache, "VERIFY_S", 0)
    report = ingest_test_run_day(archive, lake, DAY, incremental=True)
    # the quick walks missed it (its run was sealed whole); this one reads that run again and adds it
    assert report.folders_unseen == 0 and 0 < report.folders_read < report.folders_reused
    assert report.mode == "increment" and report.report_files == 1
    assert snapshot(lake)["test_run"] == landings_at_once["test_run"]


@pytest.fixture(scope="module")
def many_landings(tmp_path_factory) -> list[dict[str, bytes]]:
    source = tmp_path_factory.mktemp("sim-many")
    generate_archive(source, [dt.date.fromisoformat(DAY)], SIM, log=lambda _: None)
    return increments(source, k=9)


def webhook_parts(lake: Lake) -> tuple[list[str], list[str]]:
    """The bronze parts on disk and workflow_job's staged files (without their suffixes)."""
    bronze = sorted(p.rsplit("/", 1)[-1].removesuffix(".parquet") for p in lake.files("webhook_events", [DAY]))
    staged = sorted(p.rsplit("/", 1)[-1][1:-3] for p in hidden_files(lake, "workflow_job", DAY, "stage"))
    return bronze, staged


def test_a_day_whose_webhook_parts_were_merged_equals_the_day_built_at_once(tmp_path, many_landings, monkeypatch):
    monkeypatch.setattr(compaction, "FANOUT", 2)  # merges from the third increment on
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    modes, levels = [], []
    for files in many_landings:
        land(archive, files)
        modes.append(ingest(archive, lake, incremental=True))
        bronze, staged = webhook_parts(lake)
        assert sorted(partition_parts(lake, "webhook_events", DAY).names) == [f"{b}.parquet" for b in bronze]
        levels.append([compaction.part_level(b) for b in bronze])
        for level in range(3):  # no level keeps more than FANOUT parts, bronze or staged
            assert levels[-1].count(level) <= 2
            assert [compaction.part_level(x, "stage-") for x in staged].count(level) <= 2
    assert [m["webhooks"] for m in modes] == ["rebuild"] + ["increment"] * 8  # a merge is not a rebuild
    assert max(max((x for x in ls if x is not None), default=0) for ls in levels) == 2  # merged twice over
    assert any(compaction.part_level(x, "stage-") == 2 for x in webhook_parts(lake)[1])
    assert len(webhook_parts(lake)[0]) < 9
    built, once = snapshot(lake), at_once(tmp_path, many_landings)
    for table in TABLES:
        assert built[table] == once[table], table
    # a refresh that merges and is killed before its manifest: the next one rebuilds the day
    land(archive, {f"webhooks/day={DAY}/zz-late.jsonl": jsonl_bytes("a.jsonl", [
        envelope("workflow_job", "late-1", job_payload("queued"), "2026-11-20T23:00:01Z")])})

    def die(*args, **kwargs):
        raise Killed()

    with monkeypatch.context() as m:
        m.setattr(webhooks, "write_manifests", die)
        with pytest.raises(Killed):
            ingest_webhook_day(archive, lake, DAY, incremental=True)
    again = ingest_webhook_day(archive, lake, DAY, incremental=True)
    assert again.mode == "rebuild" and "does not list" in again.rebuild_reason


def test_a_report_repeating_a_test_of_its_job_rebuilds_test_run_and_still_equals(tmp_path, landings):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    for files in landings:
        land(archive, files)
    ingest(archive, lake, incremental=True)
    # the same report again under another name in its job's folder: each test there is a rerun
    rel, data = next((p, d) for p, d in landings[0].items() if p.startswith("test-reports/"))
    repeated = {rel.rsplit("/", 1)[0] + "/again-" + rel.rsplit("/", 1)[1]: data}
    land(archive, repeated)
    report = ingest_test_run_day(archive, lake, DAY, incremental=True)
    assert report.mode == "rebuild" and "already in the partition" in report.rebuild_reason
    assert partition_parts(lake, "test_run", DAY).last_change == REWRITE
    once = at_once(tmp_path, [*landings, repeated])
    assert snapshot(lake)["test_run"] == once["test_run"]


def test_the_parts_say_what_each_refresh_changed_and_names_never_change_content(tmp_path, landings):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    seen: dict[tuple, str] = {}  # (table, generation, part) -> content digest
    history = []
    for files in landings:
        land(archive, files)
        ingest(archive, lake, incremental=True)
        for table in ("test_run", "webhook_events", "push", "workflow_job", "ci_result"):
            parts = partition_parts(lake, table, DAY)
            history.append(parts)
            on_disk = sorted(p.rsplit("/", 1)[-1] for p in lake.files(table, [DAY]))
            assert sorted(parts.names) == on_disk  # every part readers glob, and only those
            for name in parts.names:
                digest = hashlib.sha256(Path(tmp_path / "lake" / table / f"day={DAY}" / name).read_bytes()).hexdigest()
                assert seen.setdefault((table, parts.generation, name), digest) == digest
    test_run = [p for p in history if p.table == "test_run"]
    assert [p.last_change for p in test_run] == [REWRITE, APPEND, APPEND]
    assert len({p.generation for p in test_run}) == 1  # appends keep the generation
    assert test_run[1].appended == ("inc-1.parquet",) and test_run[2].names == ("data.parquet", "inc-1.parquet",
                                                                                   "inc-2.parquet")
    job = [p for p in history if p.table == "workflow_job"]
    assert [p.last_change for p in job] == [REWRITE] * 3 and len({p.generation for p in job}) == 3
    # a full run of the day replaces every part with a fresh set, under a new generation
    ingest(archive, lake, incremental=False)
    rebuilt = partition_parts(lake, "test_run", DAY)
    assert rebuilt.names == ("data.parquet",) and rebuilt.last_change == REWRITE
    assert rebuilt.generation != test_run[-1].generation
    assert sorted(p.rsplit("/", 1)[-1] for p in lake.files("rejects", [DAY])) == \
        ["ci-results.parquet", "test-reports.parquet", "test-runs.parquet", "webhooks.parquet"]


def test_a_refresh_classifies_only_the_job_logs_it_has_not_classified_yet(tmp_path, landings, monkeypatch):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ruleset = load_ruleset(DEFAULT_RULES_PATH)
    rules = Path(DEFAULT_RULES_PATH).read_bytes()
    read: list[str] = []
    real = job_failure.classify_log
    monkeypatch.setattr(job_failure, "classify_log", lambda store, path, rs: read.append(path) or real(store, path, rs))

    def refresh(target: Lake, reuse: bool = True):
        ingest_webhook_day(archive, target, DAY)
        return build_job_failure(archive, target, DAY, ruleset, rules, DEFAULT_INFRA_RULES, workers=1, reuse=reuse)

    logs = [sorted(p for p in files if p.startswith("logs/")) for files in landings]
    assert logs[0] and logs[2]
    land(archive, landings[0])
    refresh(lake)
    assert read == logs[0]
    for files in landings[1:]:
        land(archive, files)
    read.clear()
    report = refresh(lake)
    assert read == sorted(logs[1] + logs[2]) and report.reused == len(logs[0])
    grown = logs[0][0]
    read.clear()
    refresh(lake)
    assert read == []  # nothing changed: nothing read
    archive.write_bytes(grown, landings[0][grown])  # replaced, the same bytes: a listing cannot tell, read again
    refresh(lake)
    assert read == [grown]
    read.clear()
    archive.write_bytes(grown, landings[0][grown] + gzip.compress(b"one more line\n"))  # grown: read again
    refresh(lake)
    assert read == [grown]
    once = Lake.at(str(tmp_path / "once"))
    assert refresh(once, reuse=False).reused == 0
    assert snapshot(lake)["job_failure"] == snapshot(once)["job_failure"] != []


def test_only_the_refresh_runs_ingest_increments():
    assert is_refresh({"torchci/refresh": "archive"})
    assert not is_refresh({}) and not is_refresh({"dagster/partition": DAY, "dagster/backfill": "x"})


class Killed(Exception):
    pass


def test_a_refresh_killed_before_or_after_its_commit_ends_in_the_same_tables(tmp_path, landings, landings_at_once,
                                                                             monkeypatch):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    land(archive, landings[0])
    ingest(archive, lake, incremental=True)
    before = snapshot(lake)
    land(archive, landings[1])

    def die(*args, **kwargs):
        raise Killed()

    runs = {reports: lambda: ingest_test_run_day(archive, lake, DAY, incremental=True),
            webhooks: lambda: ingest_webhook_day(archive, lake, DAY, incremental=True),
            ci_results: lambda: ingest_ci_results_day(archive, lake, DAY, now_ms=NOW_MS, incremental=True)}
    # killed while writing: nothing of the increment is visible
    for module, name in ((reports, "_write_fold"), (webhooks, "_reduce_increment"), (ci_results, "reduce_callbacks")):
        with monkeypatch.context() as m:
            m.setattr(module, name, die)
            with pytest.raises(Killed):
                runs[module]()
    assert snapshot(lake) == before
    # killed between the data and the manifest: the parts are whole and no key is doubled ...
    for module, run in runs.items():
        with monkeypatch.context() as m:
            m.setattr(module, "write_manifests", die)
            with pytest.raises(Killed):
                run()
    con = connect()
    lake.register(con, "test_run", [DAY], name="t")
    assert con.execute("SELECT count(*) - count(DISTINCT (workflow_id, workflow_run_attempt, job_id, invoking_file,"
                       " file, classname, name)) FROM t").fetchall() == [(0,)]
    con.close()
    # ... and the next refresh sees files its manifest does not list, and rebuilds the day
    land(archive, landings[2])
    modes = ingest(archive, lake, incremental=True)
    assert (modes["webhooks"], modes["test_run"], modes["ci_result"]) == ("rebuild",) * 3
    assert all("does not list" in r for r in modes["reasons"])
    assert snapshot(lake) == landings_at_once


KILL_BETWEEN_DATA_AND_MANIFEST = """
import os, signal, sys
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest import webhooks
webhooks.write_manifests = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
webhooks.ingest_webhook_day(Store(sys.argv[1]), Lake.at(sys.argv[2]), sys.argv[3], incremental=True)
"""


def test_a_refresh_killed_by_sigkill_after_its_data_is_repaired_by_the_next(tmp_path, landings, landings_at_once):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    land(archive, landings[0])
    ingest(archive, lake, incremental=True)
    land(archive, landings[1])
    done = subprocess.run([sys.executable, "-c", KILL_BETWEEN_DATA_AND_MANIFEST, archive.uri, lake.store.uri, DAY],
                          cwd=ROOT, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert any(p.endswith("inc-1-000.parquet") for p in lake.files("webhook_events", [DAY]))  # its data landed
    land(archive, landings[2])
    again = ingest_webhook_day(archive, lake, DAY, incremental=True)
    assert again.mode == "rebuild" and "does not list" in again.rebuild_reason
    ingest(archive, lake, incremental=True)
    once = landings_at_once
    built = snapshot(lake)
    for table in ("webhook_events", "workflow_job", "workflow_run", "push", "pull_request"):
        assert built[table] == once[table], table


def test_an_archive_file_that_changed_or_vanished_rebuilds_the_day(tmp_path, landings):
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    land(archive, landings[0])
    ingest(archive, lake, incremental=True)
    hooks = sorted(p for p in landings[0] if p.startswith("webhooks/"))
    archive.write_bytes(hooks[0], landings[0][hooks[0]] + b"")  # replaced, same bytes: a listing cannot tell
    report = ingest_webhook_day(archive, lake, DAY, incremental=True)
    assert report.mode == "rebuild" and "replaced" in report.rebuild_reason
    assert ingest_webhook_day(archive, lake, DAY, incremental=True).mode == "increment"
    archive.delete(hooks[0])
    report = ingest_webhook_day(archive, lake, DAY, incremental=True)
    assert report.mode == "rebuild" and "is gone" in report.rebuild_reason
    assert ingest_webhook_day(archive, lake, DAY, incremental=True).mode == "increment"  # rebuilt without it
    archive.write_bytes(hooks[1], landings[0][hooks[1]] + jsonl_bytes(hooks[1], [envelope(
        "push", "late-line", {"ref": "refs/heads/main", "repository": {"full_name": "pytorch/pytorch"}})]))
    report = ingest_webhook_day(archive, lake, DAY, incremental=True)
    assert report.mode == "rebuild" and "changed size" in report.rebuild_reason


def test_a_file_replaced_by_one_of_the_same_size_is_read_again(tmp_path, landings):
    """Same name, same size, other bytes (a job's conclusion rewritten): the refresh rebuilds the
    day from what the archive holds now, as a full run of it would."""
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    for files in landings[:2]:
        land(archive, files)
        ingest(archive, lake, incremental=True)
    quirk = f"webhooks/day={DAY}/zz-quirks-1.jsonl"
    replaced = landings[0][quirk].replace(b'"conclusion": "success"', b'"conclusion": "failure"')
    assert len(replaced) == len(landings[0][quirk]) and replaced != landings[0][quirk]
    archive.write_bytes(quirk, replaced)
    modes = ingest(archive, lake, incremental=True)
    assert modes["webhooks"] == "rebuild" and "replaced" in modes["reasons"][0]
    assert (modes["test_run"], modes["ci_result"]) == ("increment", "increment")  # their files are the same
    now = [{**landings[0], quirk: replaced}, landings[1]]
    assert snapshot(lake) == at_once(tmp_path, now)
    con = connect()
    lake.register(con, "workflow_job", [DAY], name="j")
    assert con.execute("SELECT conclusion FROM j WHERE id = ?", [JOB]).fetchall() == [("failure",)]


@pytest.fixture(scope="module")
def small_landings(landings) -> list[dict[str, bytes]]:
    """`landings` with a quarter of their reports."""
    return [{p: d for n, (p, d) in enumerate(sorted(files.items())) if not p.startswith("test-reports/") or n % 4 == 0}
            for files in landings]


@pytest.fixture(scope="module")
def small_at_once(small_landings, tmp_path_factory) -> dict[str, list]:
    """The day of `small_landings` built at once (locally): the same for both backends' increments."""
    return at_once(tmp_path_factory.mktemp("small-once"), small_landings)


def test_increments_on_s3_equal_the_day_at_once(roots, small_landings, small_at_once):
    archive, lake = roots.archive, Lake.at(roots.lake_uri)
    for files in small_landings:
        land(archive, files)
        ingest(archive, lake, incremental=True)
    assert partition_parts(lake, "test_run", DAY).last_change == APPEND
    assert json.loads(lake.store.read_bytes(f"test_run/day={DAY}/_manifest.json"))["seq"] == 2
    assert snapshot(lake) == small_at_once


def test_a_refresh_run_materializes_increments_and_says_so_and_other_runs_rebuild(tmp_path, landings):
    import dagster as dg

    from resources.configured import ArchiveResource, LakeResource
    from torchci_assets.ingest.assets import INGEST_ASSETS

    archive = Store(str(tmp_path / "archive"))
    resources = {"archive": ArchiveResource(uri=archive.uri), "lake": LakeResource(uri=str(tmp_path / "lake"))}

    def run(tags: dict) -> tuple[dict, dict]:
        result = dg.materialize(INGEST_ASSETS, partition_key=DAY, resources=resources, tags=tags)
        assert result.success
        metadata = {m.asset_key.to_user_string(): {k: v.value for k, v in m.metadata.items()}
                    for m in result.get_asset_materialization_events() for m in [m.materialization]}
        checks = {(c.asset_key.to_user_string(), c.check_name): c for c in result.get_asset_check_evaluations()}
        return metadata, checks

    refresh = {"torchci/refresh": "archive"}
    land(archive, landings[0])
    first, _ = run(refresh)
    assert first["test_run"]["mode"] == "rebuild" and "no manifest" in first["test_run"]["rebuild_reason"]
    land(archive, landings[1])
    second, checks = run(refresh)
    for key in ("webhook_events", "test_run", "ci_result"):
        assert second[key]["mode"] == "increment", key
    new_reports = sum(1 for p in landings[1] if p.startswith("test-reports/"))
    assert second["test_run"]["files"] == new_reports and second["test_run"]["rows_added"] > 0
    assert second["test_run"]["rows"] > second["test_run"]["rows_added"]
    check = checks[("test_run", "unique_test_per_job")]
    assert check.passed and check.metadata["scope"].value == "the parts this run added: inc-1.parquet"
    assert check.metadata["rows"].value == second["test_run"]["rows_added"]
    land(archive, landings[2])
    daily, checks = run({})
    assert daily["test_run"]["mode"] == "rebuild" and daily["test_run"]["rebuild_reason"] == "a full run of the day"
    # ci_result folds a job's callbacks into one row: rows_added counts rows the day gained, not callbacks read
    assert first["ci_result"]["rows_added"] == first["ci_result"]["rows"] < first["ci_result"]["callbacks"]
    assert second["ci_result"]["rows_added"] == second["ci_result"]["rows"] - first["ci_result"]["rows"]
    assert daily["ci_result"]["rows_added"] == daily["ci_result"]["rows"]
    assert checks[("test_run", "unique_test_per_job")].metadata["scope"].value == "the whole partition"


def test_callbacks_landing_in_a_file_that_sorts_first_are_reduced_as_in_one_read(tmp_path, landings):
    """ci_result's last tie-break is the archive order (path, line): an increment whose file sorts
    before those read earlier still gives the rows of one read of the day."""
    ci = [{p: d for p, d in files.items() if p.startswith("ci-results/")} for files in landings]
    late_first = [{p.replace("/relay-", f"/{'b' if i == 0 else 'a'}-relay-"): d for p, d in files.items()}
                  for i, files in enumerate(ci[:2])]
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    modes = []
    for files in late_first:
        land(archive, files)
        modes.append(ingest_ci_results_day(archive, lake, DAY, now_ms=NOW_MS, incremental=True).mode)
    assert modes == ["rebuild", "increment"] and all(late_first)
    once = Lake.at(str(tmp_path / "once"))
    ingest_ci_results_day(archive, once, DAY, now_ms=NOW_MS)
    built, expected = snapshot(lake), snapshot(once)
    assert built["ci_result"] == expected["ci_result"] != []
    assert built["ci_callback_minutes"] == expected["ci_callback_minutes"]


def test_callbacks_are_ordered_as_in_the_archive_whatever_increment_read_them(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from torchci_assets.ingest.ci_results import STAGE_SCHEMA, _stage_view

    read = ["ci-results/day=D/b.jsonl:2", "ci-results/day=D/b.jsonl:10", "ci-results/day=D/a.jsonl:9",
            "ci-results/day=D/a.jsonl:1"]  # b's file read by an earlier increment; lines 10 after 9
    rows = [{f.name: None for f in STAGE_SCHEMA} | {"location": loc} for loc in read]
    lake = Lake.at(str(tmp_path / "lake"))
    earlier = tmp_path / "lake" / "ci_result" / f"day={DAY}" / "_stage.pq"
    earlier.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:2], schema=STAGE_SCHEMA), earlier)
    pq.write_table(pa.Table.from_pylist(rows[2:], schema=STAGE_SCHEMA), tmp_path / "new.parquet")
    con = connect()
    _stage_view(con, lake, str(tmp_path / "new.parquet"), [str(earlier)])
    assert con.execute("SELECT location FROM stage ORDER BY archive_path, archive_line").fetchall() == [
        (read[3],), (read[2],), (read[0],), (read[1],)]
    con.close()


def test_a_day_whose_earlier_increments_were_staged_without_workflow_id_keeps_it_from_the_later_ones(
        tmp_path, octokit, monkeypatch):
    """The day a deployment adds `workflow_id` to workflow_run: the day's first increment was staged
    by the version before (no such column), the next ones by this one, and a run of the first is
    reduced again from both kinds of staged rows."""
    from torchci_assets.ingest import payloads, webhook_scan

    runs = octokit["api.github.com"]["workflow_run"]
    requested = next(p for p in runs if p["action"] == "requested")
    completed = next(p for p in runs if p["action"] == "completed" and p["workflow_run"]["id"] == 289782451)
    manual = next(p for p in runs if p["workflow_run"]["id"] == 1589141559)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))

    def landing(n: int, payload: dict) -> None:
        land(archive, {f"webhooks/day={DAY}/hooks-{n}.jsonl": jsonl_bytes(
            "a.jsonl", [envelope("workflow_run", f"run-{n}", payload, f"2026-11-20T1{n}:00:00Z")])})
        ingest_webhook_day(archive, lake, DAY, workers=1, incremental=True)

    with monkeypatch.context() as before:
        before.setattr(webhook_scan, "RUN_STAGE",
                       pa.schema([f for f in payloads.RUN_STAGE if f.name != "workflow_id"]))
        before.setattr(webhook_scan, "workflow_run_row", lambda p: (row := payloads.workflow_run_row(p))[:4] + row[5:])
        kept = webhooks.SQL["workflow_run"]
        before.setitem(webhooks.SQL, "workflow_run", kept[:kept.index("       arg_max(workflow_id")]
                       + kept[kept.index("AS workflow_id,\n") + len("AS workflow_id,\n"):])
        landing(1, requested)
    landing(2, manual)
    landing(3, completed)
    con = connect()
    try:
        lake.register(con, "workflow_run", [DAY], name="t")
        got = con.execute("SELECT id, workflow_id, status FROM t ORDER BY id").fetchall()
    finally:
        con.close()
    assert got == [(289782451, 2823525, "completed"), (1589141559, 16340987, manual["workflow_run"]["status"])]
