"""The documented Postgres instance (dagster.postgres.yaml) against a real, throwaway PostgreSQL.

The server is initialised and started here on a free 127.0.0.1 port with its socket in a temp
folder, as an unprivileged user when the tests run as root (initdb refuses root), and removed
afterwards. The test is skipped only where no PostgreSQL server binaries are installed.
"""

import glob
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._daemon.sensor import execute_sensor_iteration

from conftest import envelope, free_port, skip_without, write_lines
from jobs.relay import upstream_commit_sensor
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from torchci_assets.ingest.assets import webhook_assets
from torchci_assets.relay.pushes import RelayCursor

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "torchci-test-password"
DAY = "2026-11-01"

# The code location the daemon's sensor loop loads in process: the real sensor and asset,
# with resources read from the environment at run time so the test points them at tmp folders.
defs = dg.Definitions(
    assets=[webhook_assets],
    sensors=[upstream_commit_sensor],
    resources={"archive": ArchiveResource(uri=dg.EnvVar("TORCHCI_ARCHIVE_URI")),
               "lake": LakeResource(uri=dg.EnvVar("TORCHCI_LAKE_URI")),
               "github": GitHubResource()},
)


def postgres_bin() -> Path | None:
    """The folder with initdb and pg_ctl: the newest Debian install, else whatever PATH has."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: the current user, or when root, `postgres` (the Debian package's
    user) or else `nobody`."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail("running as root and neither a `postgres` nor a `nobody` user exists to run PostgreSQL")


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server with password auth on 127.0.0.1; yields the DAGSTER_PG_* settings."""
    bindir = postgres_bin()
    if bindir is None:
        skip_without("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH")
    user = _server_user()
    as_user = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    # Not under pytest's tmp_path: that is private to the test user, and the server user must enter it.
    base = Path(tempfile.mkdtemp(prefix="torchci-pg-"))
    data, port = base / "data", free_port()
    (base / "pwfile").write_text(PASSWORD + "\n")
    if user is not None:
        os.chown(base, user.pw_uid, user.pw_gid)
        os.chown(base / "pwfile", user.pw_uid, user.pw_gid)

    def run(*args):
        subprocess.run([str(bindir / args[0]), *args[1:]], check=True, capture_output=True, cwd=base, **as_user)

    try:
        run("initdb", "-D", str(data), "-U", "dagster", "--auth=scram-sha-256", f"--pwfile={base / 'pwfile'}",
            "-E", "UTF8", "--no-sync")
        run("pg_ctl", "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "30", "start", "-o",
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off")
        try:
            yield {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(port), "DAGSTER_PG_DB": "postgres",
                   "DAGSTER_PG_USERNAME": "dagster", "DAGSTER_PG_PASSWORD": PASSWORD}
        finally:
            run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _sql(settings: dict, query: str) -> list[tuple]:
    with psycopg2.connect(host=settings["DAGSTER_PG_HOST"], port=settings["DAGSTER_PG_PORT"],
                          dbname=settings["DAGSTER_PG_DB"], user=settings["DAGSTER_PG_USERNAME"],
                          password=settings["DAGSTER_PG_PASSWORD"]) as con, con.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


def test_documented_postgres_instance_stores_runs_events_and_sensor_ticks(postgres, tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.postgres.yaml", home / "dagster.yaml")
    for key, value in {**postgres, "DAGSTER_HOME": str(home), "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"),
                       "TORCHCI_LAKE_URI": str(tmp_path / "lake")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    size = write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "a.jsonl", [
        envelope("push", f"d{i}", {"ref": "refs/heads/main", "after": f"{i:040x}", "before": "0" * 40,
                                   "repository": {"full_name": "pytorch/pytorch"}}) for i in range(3)]).stat().st_size

    with dg.DagsterInstance.get() as instance:
        assert {type(s).__name__ for s in (instance.run_storage, instance.event_log_storage, instance.schedule_storage)} \
            == {"PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"}
        result = dg.materialize([webhook_assets], partition_key=DAY, instance=instance,
                                resources=defs.resources)
        assert result.success

        origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__, attribute="defs",
                                                                  working_directory=str(ROOT)))
        with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as workspace:
            remote_sensor = (workspace.create_request_context().get_code_location(origin.location_name)
                             .get_repository(SINGLETON_REPOSITORY_NAME).get_sensor(upstream_commit_sensor.name))
            list(execute_sensor_iteration(workspace, logging.getLogger("sensor-test"), None, None))
            ticks = instance.get_ticks(remote_sensor.get_remote_origin_id(), remote_sensor.selector_id)
            state = instance.get_instigator_state(remote_sensor.get_remote_origin_id(), remote_sensor.selector_id)

    # the first tick takes the archive as read: skipped, with its cursor saved
    assert [t.status for t in ticks] == [TickStatus.SKIPPED]
    assert RelayCursor.from_json(state.instigator_data.cursor).files == {DAY: {"a.jsonl": size}}

    # ...and all of it is in PostgreSQL, not in SQLite files under DAGSTER_HOME
    assert _sql(postgres, f"SELECT status FROM runs WHERE run_id = '{result.run_id}'") == [("SUCCESS",)]
    materialized = _sql(postgres, "SELECT DISTINCT asset_key FROM event_logs WHERE dagster_event_type = "
                                  f"'ASSET_MATERIALIZATION' AND run_id = '{result.run_id}'")
    assert {'["webhook_events"]', '["push"]', '["webhook_rejects"]'} <= {k for (k,) in materialized}
    assert _sql(postgres, "SELECT count(*) FROM job_ticks WHERE status = 'SKIPPED'") == [(1,)]
    assert not list(home.rglob("*.db"))
