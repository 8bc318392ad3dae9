"""Staging files carry the run that writes them, and a successful run of a partition removes the
ones a killed run left there, never those of a run still alive. With real `kill -9`s."""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import dagster as dg
from conftest import ram_instance

from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake
from resources.storage import Store, staging_name, staging_owner
from torchci_assets.ingest.assets import webhook_assets
from torchci_assets.run import fail_dead_runs

DAY = "2026-11-01"
ROOT = Path(__file__).resolve().parent.parent


def staged(lake: Path) -> list[Path]:
    return sorted(p for p in lake.rglob(".*") if staging_owner(p.name)[0])


def test_staging_names_carry_their_owner():
    name = staging_name("data.parquet", "pending", "0f3c2a1e-aaaa-bbbb-cccc-123456789abc")
    assert name.startswith(".data.parquet.pending-0f3c2a1e-aaaa-bbbb-cccc-123456789abc-")
    assert staging_owner(name) == (True, "0f3c2a1e-aaaa-bbbb-cccc-123456789abc")
    assert staging_owner(staging_name("x.json", "tmp", None)) == (True, None)
    assert staging_owner(".data.parquet.pending-" + "ab" * 16) == (True, None)  # written before owners
    assert staging_owner(staging_name("x", "tmp", "a/b c")) == (True, "a_b_c")  # never a path
    assert staging_owner(".keep") == (False, None) and staging_owner("data.parquet") == (False, None)


def test_sweep_removes_what_no_live_writer_owns_and_asks_only_after_listing(tmp_path):
    store = Store(str(tmp_path))
    folder = tmp_path / "t" / f"day={DAY}"
    folder.mkdir(parents=True)
    files = {name: folder / name for name in (
        "data.parquet", ".keep", staging_name("data.parquet", "pending", "dead"),
        staging_name("data.parquet", "tmp", "live"), ".data.parquet.pending-" + "cd" * 16)}
    for path in files.values():
        path.write_bytes(b"x")
    late = folder / staging_name("data.parquet", "tmp", "late")

    def is_live(owner):
        late.write_bytes(b"a writer that started after the listing")
        return owner == "live"

    removed = store.sweep_staging(f"t/day={DAY}", is_live)
    assert sorted(Path(r).name for r in removed) == sorted(n for n in files if "dead" in n or "cdcd" in n)
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([n for n in files if "dead" not in n and "cdcd" not in n] + [late.name])


def _webhook_day(archive: Path, n: int) -> None:
    folder = archive / "webhooks" / f"day={DAY}"
    folder.mkdir(parents=True)
    lines = (json.dumps({"event": "workflow_job", "delivery_id": f"d{i}", "received_at": f"{DAY}T10:00:00Z",
                         "payload": {"action": "queued", "workflow_job": {"id": i, "run_id": i // 10, "status": "queued",
                                                                           "name": f"job {i % 50}"}}})
             for i in range(n))
    (folder / "a.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode(), compresslevel=1))


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"the process ended before {what}: {proc.stdout.read().decode()[-2000:]}")
        time.sleep(0.02)
    raise AssertionError(f"no {what} after {timeout} s")


def _kill9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def test_a_run_after_kill_9_removes_the_dead_runs_staging_files_and_keeps_a_live_ones(tmp_path):
    archive, lake = tmp_path / "archive", tmp_path / "lake"
    _webhook_day(archive, 150_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # 1. an ingest killed mid-scan: its bronze parts are being written under hidden names
    ingest = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from resources.lake import Lake
        from resources.storage import Store
        from torchci_assets.ingest.webhooks import ingest_webhook_day
        ingest_webhook_day(Store({str(archive)!r}), Lake.at({str(lake)!r}, owner="dead-run-1"), {DAY!r}, workers=1)
        """)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait_for(lambda: [p for p in staged(lake) if "dead-run-1" in p.name], ingest, "pending file")
    _kill9(ingest)
    # 2. a publish killed mid-write (Store.atomic_output, what Lake.write uses)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from resources.storage import Store
        with Store({str(lake)!r}).atomic_output("rejects/day={DAY}/webhooks.parquet", owner="dead-run-2") as out:
            out.write(b"half a file")
            out.flush()
            print("writing", flush=True)
            time.sleep(600)
        """)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert writer.stdout.readline() == b"writing\n"
    _kill9(writer)
    left = staged(lake)
    assert {staging_owner(p.name)[1] for p in left} == {"dead-run-1", "dead-run-2"}
    assert any(".pending-dead-run-1-" in p.name for p in left) and any(".tmp-dead-run-2-" in p.name for p in left)

    # 3. a run still alive somewhere owns a staging file in the same partition: it must stay
    live_id = str(uuid.uuid4())
    live_file = lake / "workflow_job" / f"day={DAY}" / staging_name("data.parquet", "pending", live_id)
    live_file.parent.mkdir(parents=True, exist_ok=True)
    live_file.write_bytes(b"in progress")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_run(dg.DagsterRun(job_name="__ephemeral_asset_job__", run_id=live_id,
                                   status=dg.DagsterRunStatus.STARTED))

    result = dg.materialize([webhook_assets], partition_key=DAY, instance=instance, resources={
        "archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake))})
    assert result.success
    assert staged(lake) == [live_file]
    [meta] = [m for m in result.asset_materializations_for_node("webhook_assets") if m.asset_key.path == ["webhook_events"]]
    assert meta.metadata["stale_staging_files_removed"].value == len(left)
    assert Lake.at(str(lake)).files("webhook_events", [DAY])  # and the partition is there


def test_torchci_run_killed_twice_then_run_again_leaves_no_staging_file(tmp_path):
    """The issue's case end to end: `torchci run` killed with SIGKILL during the webhook ingest,
    twice; the next `torchci run` marks those runs failed and removes what they left."""
    archive, lake = tmp_path / "archive", tmp_path / "lake"
    _webhook_day(archive, 150_000)
    env = {**os.environ, "TORCHCI_ARCHIVE_URI": str(archive), "TORCHCI_LAKE_URI": str(lake),
           "TORCHCI_OUTPUTS_URI": str(tmp_path / "outputs"), "DAGSTER_HOME": str(tmp_path / "dagster")}
    (tmp_path / "dagster").mkdir()
    torchci = str(Path(sys.executable).parent / "torchci")
    for attempt in range(2):
        proc = subprocess.Popen([torchci, "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        before = set(staged(lake))
        # the webhook ingest's (a large day: seconds); the small ingests' pending files are renamed at once
        _wait_for(lambda: [p for p in staged(lake) if ".pending-" in p.name and p not in before
                           and "webhook_events" in p.parts], proc, "pending file of this run")
        _kill9(proc)
    killed = staged(lake)
    assert len({staging_owner(p.name)[1] for p in killed}) == 2  # one run id per killed run

    done = subprocess.run([torchci, "run"], env=env, capture_output=True, text=True, timeout=600)
    assert "marked failed" in done.stdout, done.stdout[-3000:]
    assert staged(lake) == [], (staged(lake), done.stdout[-3000:])
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
        runs = instance.get_runs()
        statuses = sorted(r.status.value for r in runs)
        assert statuses.count("FAILURE") >= 2 and "STARTED" not in statuses, statuses
        assert {staging_owner(p.name)[1] for p in killed} <= {r.run_id for r in runs
                                                              if r.status == dg.DagsterRunStatus.FAILURE}


def test_only_runs_of_this_host_whose_process_is_gone_are_marked_failed():
    instance = dg.DagsterInstance.ephemeral()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    runs = {
        "dead": {"torchci/host": "h1", "torchci/pid": str(gone.pid)},
        "alive": {"torchci/host": "h1", "torchci/pid": str(os.getpid())},
        "elsewhere": {"torchci/host": "h2", "torchci/pid": str(gone.pid)},
        "untagged": {},
    }
    ids = {}
    for name, tags in runs.items():
        ids[name] = str(uuid.uuid4())
        instance.add_run(dg.DagsterRun(job_name="j", run_id=ids[name], tags=tags, status=dg.DagsterRunStatus.STARTED))
    assert fail_dead_runs(instance, host="h1") == [ids["dead"]]
    assert {n: instance.get_run_by_id(i).status.value for n, i in ids.items()} == {
        "dead": "FAILURE", "alive": "STARTED", "elsewhere": "STARTED", "untagged": "STARTED"}


def test_only_runs_a_torchci_run_process_executed_are_taken_for_its_dead_runs():
    """A UI re-execution of a `torchci run` run inherits its torchci/host and torchci/pid tags and
    runs in the daemon's warm worker, long after that process exited: taken for a killed run, it
    was marked failed while it ran on (RunFailureEvent, then RunSuccessEvent) and its pool slots
    were freed for another run to publish at the same time."""
    instance = dg.DagsterInstance.ephemeral()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    parent_id = str(uuid.uuid4())
    cli = {"torchci/host": "h1", "torchci/pid": str(gone.pid), "torchci/source": "torchci run",
           "torchci/run_id": parent_id}
    inherited = {"dagster/parent_run_id": parent_id, "dagster/root_run_id": parent_id}
    runs = {
        "killed": (parent_id, cli),
        "re-executed": (str(uuid.uuid4()), {**cli, **inherited, "torchci/worker": f"{os.getpid()}:1"}),
        "re-executed by the code server": (str(uuid.uuid4()), {**cli, **inherited}),
        "copied in the launchpad": (str(uuid.uuid4()), cli),
        "re-executed before the run id tag": (str(uuid.uuid4()), {k: v for k, v in {**cli, **inherited}.items()
                                                                  if k != "torchci/run_id"}),
    }
    for run_id, tags in runs.values():
        instance.add_run(dg.DagsterRun(job_name="all_assets_daily", run_id=run_id, tags=tags,
                                       status=dg.DagsterRunStatus.STARTED))
    assert fail_dead_runs(instance, host="h1") == [parent_id]
    assert {n: instance.get_run_by_id(i).status.value for n, (i, _) in runs.items()} == {
        "killed": "FAILURE", "re-executed": "STARTED", "re-executed by the code server": "STARTED",
        "copied in the launchpad": "STARTED", "re-executed before the run id tag": "STARTED"}


def test_a_dead_runs_pool_slot_is_freed_with_it():
    """A `torchci run` killed while a step held a pool's one slot: the next run must get the slot."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with ram_instance(overrides={"concurrency": {"pools": {"default_limit": 1}}}) as instance:
        run_id = str(uuid.uuid4())
        instance.add_run(dg.DagsterRun(job_name="j", run_id=run_id, status=dg.DagsterRunStatus.STARTED,
                                       tags={"torchci/host": "h1", "torchci/pid": str(gone.pid)}))
        storage = instance.event_log_storage
        storage.set_concurrency_slots("torchci_outputs", 1)
        assert storage.claim_concurrency_slot("torchci_outputs", run_id, "test_times").is_claimed
        assert fail_dead_runs(instance, host="h1") == [run_id]
        assert storage.get_concurrency_info("torchci_outputs").active_slot_count == 0
        assert storage.claim_concurrency_slot("torchci_outputs", str(uuid.uuid4()), "hud_site").is_claimed
