"""The instance's SQLite run, event log and schedule storage (dagster.yaml,
`torchci_assets.sqlite_storage`): Dagster's files and layout, with connections kept open and schemas
checked once per process, and a live run still visible to a webserver."""

import multiprocessing
import os
import shutil
import sqlite3
import threading
from pathlib import Path

import dagster as dg
import pytest
from alembic.script import ScriptDirectory
from dagster._core.instance.ref import InstanceRef
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus

from torchci_assets.sqlite_storage import (MAX_OPEN, CheckedDatabases, OpenSqliteEventLogStorage, OpenSqliteRunStorage,
                                           OpenSqliteScheduleStorage, check_before_forks, copy_if_absent,
                                           run_database_template)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_YAML = "telemetry:\n  enabled: false\n"  # Dagster's own SQLite storage


def home(tmp_path: Path, yaml: str | None = None) -> Path:
    h = tmp_path / "dagster"
    h.mkdir(parents=True, exist_ok=True)
    if yaml is None:
        shutil.copy(ROOT / "dagster.yaml", h / "dagster.yaml")
    else:
        (h / "dagster.yaml").write_text(yaml)
    return h


def instance_at(h: Path, monkeypatch) -> dg.DagsterInstance:
    monkeypatch.setenv("DAGSTER_HOME", str(h))
    return dg.DagsterInstance.from_config(str(h))


def assets(n: int) -> list:
    def make(i):
        @dg.asset(name=f"a{i}", check_specs=[dg.AssetCheckSpec("ok", asset=f"a{i}")])
        def _a():
            yield dg.MaterializeResult(metadata={"i": i})
            yield dg.AssetCheckResult(passed=True)
        return _a
    return [make(i) for i in range(n)]


def test_the_projects_instance_uses_it_and_dagsters_own_storage_reads_what_it_wrote(tmp_path, monkeypatch):
    h = home(tmp_path)
    ours = instance_at(h, monkeypatch)
    assert isinstance(ours.event_log_storage, OpenSqliteEventLogStorage)
    assert isinstance(ours.run_storage, OpenSqliteRunStorage)
    assert isinstance(ours.schedule_storage, OpenSqliteScheduleStorage)
    run = dg.materialize(assets(3), instance=ours)
    assert run.success
    ours.create_tick(tick(1.0))

    # the same folder opened with Dagster's default SQLite storage: the same run, events and index
    (h / "dagster.yaml").write_text(DEFAULT_YAML)
    theirs = dg.DagsterInstance.from_config(str(h))
    assert not isinstance(theirs.event_log_storage, OpenSqliteEventLogStorage)
    assert not isinstance(theirs.run_storage, OpenSqliteRunStorage)
    assert not isinstance(theirs.schedule_storage, OpenSqliteScheduleStorage)
    assert theirs.get_run_by_id(run.run_id) is not None
    assert [t.timestamp for t in theirs.get_ticks("origin", "selector")] == [1.0]
    assert len(theirs.all_logs(run.run_id)) == len(ours.all_logs(run.run_id)) > 20
    m = theirs.get_latest_materialization_event(dg.AssetKey("a2"))
    assert m.run_id == run.run_id and m.asset_materialization.metadata["i"].value == 2

    # and back: what Dagster's storage wrote, ours reads
    again = dg.materialize(assets(3), instance=theirs)
    shutil.copy(ROOT / "dagster.yaml", h / "dagster.yaml")
    reopened = instance_at(h, monkeypatch)
    assert reopened.get_latest_materialization_event(dg.AssetKey("a0")).run_id == again.run_id
    records = reopened.event_log_storage.get_latest_asset_check_execution_by_key([
        dg.AssetCheckKey(dg.AssetKey("a1"), "ok")])
    assert records[dg.AssetCheckKey(dg.AssetKey("a1"), "ok")].run_id == again.run_id
    theirs.create_tick(tick(2.0))
    assert [t.timestamp for t in reopened.get_ticks("origin", "selector")] == [2.0, 1.0]


def tick(at: float, status: TickStatus = TickStatus.STARTED) -> TickData:
    """A sensor tick as the daemon writes it at the start of an evaluation."""
    return TickData(instigator_origin_id="origin", instigator_name="a_sensor", instigator_type=InstigatorType.SENSOR,
                    status=status, timestamp=at, selector_id="selector")


def count_sqlite_connects(monkeypatch) -> list:
    opened = []
    real = sqlite3.dbapi2.connect  # what SQLAlchemy's pysqlite dialect calls

    def connect(*args, **kwargs):
        opened.append(args[0] if args else kwargs.get("database"))
        return real(*args, **kwargs)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", connect)
    return opened


def test_an_instance_torchci_run_creates_stores_as_the_projects_does(tmp_path, monkeypatch):
    """A DAGSTER_HOME `torchci run` creates gets the storage of the project's dagster.yaml, word for
    word, so a team starting from `torchci run` does not pay Dagster's connection per write."""
    import yaml

    from torchci_assets.run import new_instance_yaml
    project = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    created = yaml.safe_load(new_instance_yaml())
    keys = ("run_storage", "event_log_storage", "schedule_storage")
    assert {k: created[k] for k in keys} == {k: project[k] for k in keys}
    inst = instance_at(home(tmp_path, new_instance_yaml()), monkeypatch)
    assert isinstance(inst.event_log_storage, OpenSqliteEventLogStorage)
    assert isinstance(inst.run_storage, OpenSqliteRunStorage)
    assert isinstance(inst.schedule_storage, OpenSqliteScheduleStorage)
    assert dg.materialize(assets(2), instance=inst).success


def test_a_run_opens_each_database_once_not_once_per_event(tmp_path, monkeypatch):
    for yaml, label in ((None, "ours"), (DEFAULT_YAML, "dagster")):
        h = home(tmp_path / label, yaml)
        inst = instance_at(h, monkeypatch)
        dg.materialize(assets(1), instance=inst)  # databases created, schema checked
        opened = count_sqlite_connects(monkeypatch)
        run = dg.materialize(assets(5), instance=inst)
        monkeypatch.undo()
        events = len(inst.all_logs(run.run_id))
        event_dbs = [p for p in opened if "/history/runs/" in str(p)]  # the event log
        runs_db = [p for p in opened if str(p).endswith("/history/runs.db")]
        if label == "ours":
            # the new run's shard (and a second connection while its schema is created), the index
            assert 1 <= len(event_dbs) <= 4, event_dbs
            assert len(runs_db) <= 1, runs_db
        else:
            assert len(event_dbs) > events  # what the classes exist to avoid: one or more per event
            assert len(runs_db) > 10


def test_a_webserver_follows_a_live_run_while_the_runs_connection_stays_open(tmp_path, monkeypatch):
    """The webserver streams a running run's events by watching its database file change."""
    h = home(tmp_path)
    writer = instance_at(h, monkeypatch)
    webserver = dg.DagsterInstance.from_config(str(h))  # another process's instance, as dagster dev's
    seen = threading.Event()
    run_id = []

    def on_event(entry, _cursor):
        if entry.dagster_event and entry.dagster_event.event_type_value == "STEP_START":
            seen.set()

    @dg.asset
    def waits_to_be_seen(context):
        # the step is running: the run's connection is open and the run has not ended
        run_id.append(context.run.run_id)
        webserver.event_log_storage.watch(context.run.run_id, None, on_event)
        for _ in range(40):  # the step goes on writing to the run's log, as steps do
            context.log.info("working")
            if seen.wait(0.5):
                return 1
        raise AssertionError("the webserver saw nothing of a running run")

    try:
        assert dg.materialize([waits_to_be_seen], instance=writer).success
    finally:
        for rid in run_id:
            webserver.event_log_storage.end_watch(rid, on_event)
        webserver.event_log_storage.dispose()


def test_at_most_max_open_databases_stay_open(tmp_path, monkeypatch):
    h = home(tmp_path)
    inst = instance_at(h, monkeypatch)
    for _ in range(MAX_OPEN + 4):
        dg.materialize(assets(1), instance=inst)
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    open_dbs = {p for p in fds if p.startswith(str(h / "history" / "runs") + "/") and p.endswith(".db")}
    assert 2 <= len(open_dbs) <= MAX_OPEN


def test_a_wiped_instance_writes_to_new_files(tmp_path, monkeypatch):
    h = home(tmp_path)
    inst = instance_at(h, monkeypatch)
    first = dg.materialize(assets(1), instance=inst)
    inst.wipe()
    assert not (h / "history" / "runs" / f"{first.run_id}.db").exists()
    second = dg.materialize(assets(1), instance=inst)
    assert (h / "history" / "runs" / f"{second.run_id}.db").exists()
    fresh = dg.DagsterInstance.from_config(str(h))
    assert fresh.get_latest_materialization_event(dg.AssetKey("a0")).run_id == second.run_id
    assert len(fresh.all_logs(second.run_id)) > 5


def _child_writes(storage: OpenSqliteEventLogStorage, out) -> None:
    inst_events = storage.get_event_records(dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION))
    storage.wipe_asset(dg.AssetKey("nothing"))  # a write through the index connection
    out.put((len(inst_events), len(storage._kept)))


def test_a_forked_child_opens_its_own_connections(tmp_path, monkeypatch):
    h = home(tmp_path)
    inst = instance_at(h, monkeypatch)
    dg.materialize(assets(2), instance=inst)
    storage = inst.event_log_storage
    parent_engines = dict(storage._kept._engines)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_writes, args=(storage, out))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    seen, child_open = out.get(timeout=5)
    assert seen == 2 and child_open == 1  # only the index, opened anew in the child
    # the parent's connections still work after the child used and closed its own
    assert storage._kept._engines.keys() == parent_engines.keys()
    assert dg.materialize(assets(2), instance=inst).success


def test_threads_using_the_run_storage_at_once_each_get_a_connection(tmp_path, monkeypatch):
    """The daemon's threads (sensors, run queue, monitoring) use one run storage at once."""
    inst = instance_at(home(tmp_path), monkeypatch)
    runs = [dg.materialize(assets(1), instance=inst).run_id for _ in range(3)]
    errors, seen = [], []
    inside = threading.Barrier(4)

    def work():
        try:
            with inst.run_storage.connect():
                inside.wait(10)  # four connections in use at the same time
            for _ in range(20):
                seen.append(len(inst.get_runs()))
                inst.add_run_tags(runs[0], {"t": str(threading.get_ident())})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and seen == [3] * 80
    assert inst.get_run_by_id(runs[0]).tags["t"] in {str(t.ident) for t in threads}


def count_schema_checks(monkeypatch) -> list:
    """Each check of a database's schema loads Dagster's migration scripts through this."""
    checks = []
    real = ScriptDirectory.from_config.__func__

    def from_config(cls, *args, **kwargs):
        checks.append(1)
        return real(cls, *args, **kwargs)
    monkeypatch.setattr(ScriptDirectory, "from_config", classmethod(from_config))
    return checks


def use(inst: dg.DagsterInstance) -> None:
    """What a sensor tick does with the instance Dagster builds for it: read runs, sensor states,
    the event log's index."""
    inst.get_runs()
    inst.all_instigator_state()
    inst.event_log_storage.get_event_records(dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION),
                                             limit=1)


def test_each_databases_schema_is_checked_once_per_process_and_again_when_the_file_is_replaced(tmp_path,
                                                                                               monkeypatch):
    h = home(tmp_path)
    first = instance_at(h, monkeypatch)
    dg.materialize(assets(1), instance=first)
    use(first)
    first.dispose()
    checks = count_schema_checks(monkeypatch)
    for _ in range(3):  # as Dagster builds one instance per sensor tick
        again = dg.DagsterInstance.from_config(str(h))
        use(again)
        again.dispose()
    assert checks == []

    # Dagster's own storage checks at every instance: what the kept checks save
    theirs = home(tmp_path / "theirs", DEFAULT_YAML)
    use(dg.DagsterInstance.from_config(str(theirs)))
    checks.clear()
    use(dg.DagsterInstance.from_config(str(theirs)))
    assert len(checks) >= 3

    # a database deleted and made again (a restored backup, a wiped folder) is checked, and created
    for name in ("history/runs.db", "schedules/schedules.db"):
        (h / name).unlink()
    checks.clear()
    fresh = dg.DagsterInstance.from_config(str(h))
    assert len(checks) >= 2  # a check, and the creation's stamp, of each
    assert fresh.get_runs() == [] and fresh.all_instigator_state() == []
    assert dg.materialize(assets(1), instance=fresh).success
    assert len(fresh.get_runs()) == 1


def test_checked_databases_tell_a_replaced_or_empty_file_and_stay_bounded(tmp_path):
    checked = CheckedDatabases(3)
    db = tmp_path / "runs.db"
    assert not checked.seen(str(db))
    checked.add(str(db))  # no such file yet: nothing was checked
    assert not checked.seen(str(db))
    db.write_bytes(b"one")
    checked.add(str(db))
    assert checked.seen(str(db))
    db.rename(tmp_path / "backup.db")  # a backup restored in its place: another file
    (tmp_path / "restored.db").write_bytes(b"two")
    (tmp_path / "restored.db").rename(db)
    assert not checked.seen(str(db))
    checked.add(str(db))
    db.write_bytes(b"")  # emptied in place (SQLite's connect creates an empty file): no schema
    assert not checked.seen(str(db))
    others = [tmp_path / f"{i}.db" for i in range(4)]
    for o in others:
        o.write_bytes(b"x")
        checked.add(str(o))
    assert [checked.seen(str(o)) for o in others] == [False, True, True, True]


def test_a_sensors_ticks_open_the_schedule_database_once(tmp_path, monkeypatch):
    for yaml, label in ((None, "ours"), (DEFAULT_YAML, "dagster")):
        inst = instance_at(home(tmp_path / label, yaml), monkeypatch)
        inst.all_instigator_state()  # the database created
        opened = count_sqlite_connects(monkeypatch)
        for i in range(10):  # what the daemon writes for each tick of a sensor
            t = inst.create_tick(tick(float(i)))
            inst.update_tick(t.with_status(TickStatus.SKIPPED))
            inst.purge_ticks("origin", "selector", before=float(i) - 5, tick_statuses=[TickStatus.SKIPPED])
        monkeypatch.undo()
        schedule_db = [p for p in opened if str(p).endswith("/schedules/schedules.db")]
        kept = [t.timestamp for t in inst.get_ticks("origin", "selector")]
        assert kept == [9.0, 8.0, 7.0, 6.0, 5.0, 4.0]
        if label == "ours":
            assert len(schedule_db) <= 1, schedule_db
        else:
            assert len(schedule_db) >= 30  # one per statement: what the class exists to avoid


def schema(db: Path) -> tuple:
    """What a database holds as Dagster made it: its tables' and indexes' SQL, its migrations'
    stamp and its journal mode."""
    con = sqlite3.connect(db)
    try:
        return (sorted(r for r in con.execute("SELECT type, name, sql FROM sqlite_master")),
                con.execute("SELECT version_num FROM alembic_version").fetchall(),
                con.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        con.close()


def run_database(inst: dg.DagsterInstance, run_id: str) -> Path:
    return Path(inst.event_log_storage.path_for_shard(run_id))


def test_a_runs_database_is_a_copy_of_the_one_dagsters_schema_creation_makes(tmp_path, monkeypatch):
    ours = instance_at(home(tmp_path / "ours"), monkeypatch)
    theirs = instance_at(home(tmp_path / "theirs", DEFAULT_YAML), monkeypatch)
    dg.materialize(assets(1), instance=ours)  # this process's template made, if no test made it before
    checks = count_schema_checks(monkeypatch)
    run = dg.materialize(assets(2), instance=ours)
    assert checks == []  # neither created nor checked again: copied
    made = dg.materialize(assets(2), instance=theirs)
    assert len(checks) >= 2  # Dagster's own: a check, and the creation's stamp
    assert schema(run_database(ours, run.run_id)) == schema(run_database(theirs, made.run_id))
    assert schema(run_database(ours, run.run_id))[2] == "wal"
    # the run's events are in it, and Dagster's own storage reads them
    own = dg.DagsterInstance.from_config(str(tmp_path / "ours" / "dagster"), config_filename="none.yaml")
    assert not isinstance(own.event_log_storage, OpenSqliteEventLogStorage)
    assert len(own.all_logs(run.run_id)) == len(ours.all_logs(run.run_id)) > 10
    assert not list((tmp_path / "ours" / "dagster" / "history" / "runs").glob("*.tmp"))


def test_a_runs_database_another_process_made_first_is_kept(tmp_path, monkeypatch):
    inst = instance_at(home(tmp_path), monkeypatch)
    run = dg.materialize(assets(1), instance=inst)
    path = run_database(inst, run.run_id)
    before = len(inst.all_logs(run.run_id))
    asked = []

    def template() -> bytes:
        asked.append(1)
        return run_database_template(inst.event_log_storage)
    assert not copy_if_absent(str(path), template)
    assert len(inst.all_logs(run.run_id)) == before > 0 and asked == []  # not even made for an existing one
    fresh = tmp_path / "new.db"
    assert copy_if_absent(str(fresh), template) and asked == [1]
    assert schema(fresh) == schema(path) and [p.name for p in tmp_path.glob("*.tmp")] == []


def _child_runs(h: str, out) -> None:
    checks = count_schema_checks(pytest.MonkeyPatch())
    inst = dg.DagsterInstance.from_config(h)
    result = dg.materialize(assets(2), instance=inst)
    out.put((result.success, len(checks)))


def test_a_process_that_checked_before_forking_leaves_its_children_no_check_to_make(tmp_path, monkeypatch):
    """The warm worker's children: each would otherwise check runs.db, schedules.db and the event
    log's index, and create its run's database, at its start."""
    ctx = multiprocessing.get_context("fork")
    found = {}
    for label, checked in (("unchecked", False), ("checked", True)):
        h = home(tmp_path / label)
        monkeypatch.setenv("DAGSTER_HOME", str(h))
        threads = threading.active_count()
        if checked:
            check_before_forks(InstanceRef.from_dir(str(h)))
        assert threading.active_count() == threads
        out = ctx.Queue()
        child = ctx.Process(target=_child_runs, args=(str(h), out))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        found[label] = out.get(timeout=5)
    assert found["checked"] == (True, 0)
    assert found["unchecked"][0] and found["unchecked"][1] >= 3


def test_a_process_checking_another_kind_of_storage_before_forking_leaves_it_alone(tmp_path, monkeypatch):
    h = home(tmp_path, DEFAULT_YAML)  # Dagster's own SQLite storage: not these classes
    check_before_forks(InstanceRef.from_dir(str(h)))
    assert not (h / "history").exists() and not (h / "schedules").exists()
