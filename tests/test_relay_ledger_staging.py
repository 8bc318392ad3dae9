"""A relay ledger writer killed mid-write (`kill -9` of a sensor's process or a run) leaves its
staging file in the ledger's sub-folder; readers skip it, but such files must not pile up. The
relay's sensor ticks, which every deployment runs, remove the ones old enough that no live writer
can own them, and never a young one: the ledger's writers include sensor ticks, which no Dagster
run list knows."""

import datetime as dt
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg

from jobs.relay_prs import check_run_sensor
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import staging_name, staging_owner
from tests.receiving import config_file
from torchci_assets.relay.check_runs import ACTIONS_TABLE
from torchci_assets.relay.dispatch import LEDGER_STAGING_MAX_AGE, LEDGER_TABLE, ledger_rows, record_attempt

ROOT = Path(__file__).resolve().parent.parent
SHA = "ab" + "12" * 19
NOW = dt.datetime.now(dt.timezone.utc)
DAY = NOW.strftime("%Y-%m-%d")
ROW = {"sha": SHA, "upstream_repo": "pytorch/pytorch", "downstream_repo": "acme-ai/torch-npu", "level": "L2",
       "event_type": "push", "delivery_id": "d-1", "source": "webhook", "attempted_at": NOW, "outcome": "ok",
       "run_id": "run-1", "attempt_id": "a-1"}
ROW_TEXT = repr({k: v for k, v in ROW.items() if k != "attempted_at"})


def staged(lake: Path) -> list[Path]:
    return sorted(p for p in lake.rglob(".*") if staging_owner(p.name)[0])


def killed_mid_write(lake: Path) -> Path:
    """The staging file of a ledger write whose process was killed with SIGKILL while writing."""
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import datetime as dt, time
        from resources.lake import Lake
        from torchci_assets.relay import dispatch

        def stuck(self, table, day, data, part="data"):
            with self.writer(table, day, data.schema, part) as w:
                w.write_table(data)
                print("writing", flush=True)
                time.sleep(600)

        Lake.write = stuck
        at = dt.datetime.fromisoformat({NOW.isoformat()!r})  # the test's day, even past midnight
        dispatch.record_attempt(Lake.at({str(lake)!r}), {{**{ROW_TEXT}, "attempted_at": at}})
        """)], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert writer.stdout.readline() == b"writing\n", writer.stdout.read().decode()[-2000:]
    finally:
        writer.kill()
        writer.wait(30)
    [left] = staged(lake)
    return left


def test_the_relay_sweep_removes_staging_files_killed_writers_left_in_the_ledgers(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHCI_CONFIG", config_file(tmp_path))
    lake = tmp_path / "lake"
    record_attempt(Lake.at(str(lake)), ROW)  # a part written whole, beside the leftovers
    dead = killed_mid_write(lake)
    assert dead.parent == lake / LEDGER_TABLE / f"day={DAY}" / SHA[:2]
    long_ago = time.time() - LEDGER_STAGING_MAX_AGE.total_seconds() - 60
    os.utime(dead, (long_ago, long_ago))
    # one left in the relay_actions ledger before its sub-folders, and one a writer is writing now
    old = lake / ACTIONS_TABLE / f"day={DAY}" / staging_name(f"{SHA}-x.parquet", "tmp", None)
    old.parent.mkdir(parents=True)
    old.write_bytes(b"half a part")
    os.utime(old, (long_ago, long_ago))
    young = lake / ACTIONS_TABLE / f"day={DAY}" / SHA[:2] / staging_name(f"{SHA}-y.parquet", "tmp", None)
    young.parent.mkdir(parents=True)
    young.write_bytes(b"being written")

    # a deployment without GitHub credentials, whose zombie schedule is off: its sensor ticks sweep
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_APP_ID", raising=False)
    resources = {"archive": ArchiveResource(uri=str(tmp_path / "archive")), "lake": LakeResource(uri=str(lake)),
                 "github": GitHubResource(api_url="http://127.0.0.1:9")}
    with dg.build_sensor_context(resources=resources) as context:
        check_run_sensor(context)

    assert staged(lake) == [young]
    assert [r["attempt_id"] for r in ledger_rows(Lake.at(str(lake)), SHA)] == ["a-1"]
