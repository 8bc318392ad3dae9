"""The HUD site's lineage in the Dagster UI says which days it reads, read as a user reads it: for a
team whose main is quiet, the guardian sections (the grid's marks, autorevert.html) read main's last
commits as far back as its window's `max_days`, and their attempts from the job tables of those days;
the asset graph showed 12 days of commit_health and 3 of the job tables."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
from fake_team_history import BRANCH, TEAM
from hud_lake import schema
from test_guardians_sparse_history import sparse_main

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import load_config
from torchci_assets.derived.site.site import publish_site

DAY = dt.date(2026, 11, 20)
NOW = dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc)  # the end of DAY, as the HUD judges main
JOB_TABLES = ("workflow_job", "workflow_run", "test_jobs", "test_sha_outcomes", "job_failure")

# The windows hud_site declares, as a code location loads its definitions under TORCHCI_CONFIG.
_DECLARED = """
import json
from torchci_assets.derived.site.assets import hud_site_asset
mappings = {k.to_user_string(): hud_site_asset.get_partition_mapping(k) for k in hud_site_asset.dependency_keys}
print(json.dumps({k: [getattr(m, "start_offset", 0), getattr(m, "end_offset", 0)] for k, m in mappings.items()}))
"""


def _declared() -> dict[str, list[int]]:
    child = subprocess.run([sys.executable, "-c", _DECLARED], capture_output=True, text=True, env=os.environ,
                           timeout=300, check=True)
    return json.loads(child.stdout)


def _quiet_team_main(lake: Lake, max_days: int) -> None:
    """Five commits, the newest a week old (the last broke a job), the oldest just within
    `max_days`, and the job tables' partitions of every day they may be read from."""
    ages = [dt.timedelta(days=a) for a in (max_days - 0.5, max_days - 1.5, max_days - 2.5, 8, 7)]
    sparse_main(lake, NOW, "gggRr", ages)
    for table in JOB_TABLES:
        for back in range(max_days + 2):
            lake.write(table, (DAY - dt.timedelta(days=back)).isoformat(), pa.Table.from_pylist([], schema=schema(table)))


def _read(monkeypatch, lake: Lake, out: Store) -> dict[str, tuple[int, int]]:
    """The days of each table publish_site registers, as offsets from DAY."""
    read: dict[str, tuple[int, int]] = {}
    real = Lake.register

    def recorded(self, con, table, days, **kwargs):
        offsets = [(dt.date.fromisoformat(d) - DAY).days for d in days] or [0]
        lo, hi = read.get(table, (0, 0))
        read[table] = (min(lo, *offsets), max(hi, *offsets))
        return real(self, con, table, days, **kwargs)

    monkeypatch.setattr(Lake, "register", recorded)
    publish_site(lake, out, DAY.isoformat(), TEAM)
    return read


@pytest.mark.parametrize("window", ["", "main_window:\n  max_days: 20\n"], ids=["default-window", "max-days-20"])
def test_the_hud_sites_lineage_holds_every_day_its_guardian_sections_read(tmp_path, monkeypatch, window):
    config = tmp_path / "config.yaml"
    config.write_text(f"upstream:\n  repo: {TEAM}\n  branches: [{BRANCH}]\n{window}")
    monkeypatch.setenv("TORCHCI_CONFIG", str(config))
    max_days = load_config().guardians.window.max_days
    lake = Lake.at(str(tmp_path / "lake"))
    _quiet_team_main(lake, max_days)

    read = _read(monkeypatch, lake, Store(str(tmp_path / "out")))
    declared = _declared()

    assert read["commit_health"] == (-max_days, 1)  # its main's commits, as far back as its window goes
    assert {read[t] for t in JOB_TABLES} == {(1 - max_days, 1)}  # their attempts, from the oldest's push on
    wrong = {t: (days, declared.get(t)) for t, days in read.items()
             if t not in declared or not declared[t][0] <= days[0] <= days[1] <= declared[t][1]}
    assert not wrong, f"table: (days read, days declared): {wrong}"
