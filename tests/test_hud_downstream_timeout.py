"""A downstream job whose `completed` callback never came is judged alike on the backend pages, in a
pull request's grid (`pr_jobs`) and in the daily metrics (`ci_metrics_daily`): timed out once the relay's
`zombie_timeout_seconds` passed since its first callback reached the receiver, still running before.

The lakes are built by the real ingest from the callbacks the relay forwards (tests/relay_callbacks.py);
the pull request is a hand-made `pull_request` row (tests/hud_lake.py) whose head is the one the backend
was dispatched for. The timeout is read through `load_config()`, as every page reads it.
"""

import datetime as dt

import pyarrow as pa
import pytest
from hud_lake import History
from test_backend_zombies import DAY, HEAD, HOUR, REPO, T0, four_green_and, ingested, ms, the, use_config

from resources.lake import connect
from torchci_assets.derived.backends.levels import compute_health
from torchci_assets.derived.hud import backend_pages
from torchci_assets.derived.hud.health import build_pr_jobs
from torchci_assets.derived.hud.metrics import build_ci_metrics

UPSTREAM = "pytorch/pytorch"


def lake_with_a_zombie(tmp_path, in_progress_at: dt.datetime):
    """Four green jobs and one (`zombie`) that reported in_progress at `in_progress_at` and nothing
    more, all of an L3 backend on pull request 42's head."""
    lake = ingested(tmp_path, four_green_and(in_progress_at, queue_s=0))
    h = History()
    h.add("pull_request", DAY, repo=UPSTREAM, number=42, state="open", head_sha=HEAD, head_ref="gh/x/1/head",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.write(lake)
    return lake


def only_row(lake, table: str, where: str) -> dict:
    """The one row of the day's `table` that `where` picks, by column name."""
    con = connect()
    lake.register(con, table, [DAY], name="t")
    cur = con.execute(f"SELECT * FROM t WHERE {where}")
    names = [d[0] for d in cur.description]
    (row,) = [dict(zip(names, r)) for r in cur.fetchall()]
    return row


def grid_row(lake, now: dt.datetime | None) -> dict:
    build_pr_jobs(lake, DAY, UPSTREAM, now=now)
    return only_row(lake, "pr_jobs", "name = 'zombie'")


def backend_row(lake, now: dt.datetime | None) -> dict:
    build_ci_metrics(lake, DAY, UPSTREAM, ("refs/heads/main",), now_ms=None if now is None else ms(now))
    return only_row(lake, "ci_metrics_daily", "dimension = 'backend'")


@pytest.mark.parametrize("timeout_h, in_progress_at_h, now_h, timed_out", [
    (2, 20, None, True),    # 4 h in progress at midnight: past a 2 h timeout (the ingest's 6 h would wait)
    (12, 14, None, False),  # 10 h in progress at midnight: not yet past a 12 h timeout (the ingest's 6 h is)
    (2, 9, 12, True),       # judged at noon, 3 h after its in_progress
])
def test_the_grid_and_the_metrics_time_a_lost_job_out_as_the_backend_pages_do(tmp_path, monkeypatch, timeout_h,
                                                                              in_progress_at_h, now_h, timed_out):
    use_config(tmp_path, monkeypatch, zombie_timeout_seconds=timeout_h * HOUR)
    lake = lake_with_a_zombie(tmp_path, T0.replace(hour=in_progress_at_h))
    now = None if now_h is None else T0.replace(hour=now_h)
    page = the(backend_pages.load(lake, DAY, now_ms=None if now is None else ms(now)).jobs, "zombie")
    assert page["timed_out"] is timed_out
    row = grid_row(lake, now)
    assert (row["source"], row["level"]) == (REPO, "L3")
    assert (row["state"], row["failure_class"]) == (("failure", "infra") if timed_out else ("pending", None))
    if timed_out:
        assert row["infra_reason"] == "downstream-timed-out" and row["duration_s"] == timeout_h * HOUR
    backend = backend_row(lake, now)
    assert (backend["repo"], backend["jobs"]) == (REPO, 5 if timed_out else 4)
    assert backend["success_rate"] == pytest.approx(0.8 if timed_out else 1.0)


def test_the_timeout_is_a_parameter_of_the_builders(tmp_path, monkeypatch):
    """Passed explicitly, it wins over the config (the assets pass the config's own)."""
    use_config(tmp_path, monkeypatch)  # the bundled 6 h
    lake = lake_with_a_zombie(tmp_path, T0)  # 09:00, judged at 12:00
    noon = T0.replace(hour=12)
    assert grid_row(lake, noon)["state"] == "pending"
    build_pr_jobs(lake, DAY, UPSTREAM, now=noon, zombie_timeout_s=2 * HOUR)
    con = connect()
    lake.register(con, "pr_jobs", [DAY], name="p")
    assert con.execute("SELECT state FROM p WHERE name = 'zombie'").fetchone() == ("failure",)
    build_ci_metrics(lake, DAY, UPSTREAM, ("refs/heads/main",), now_ms=ms(noon), zombie_timeout_s=2 * HOUR)
    lake.register(con, "ci_metrics_daily", [DAY], name="m")
    assert con.execute("SELECT jobs FROM m WHERE dimension = 'backend'").fetchone() == (5,)


def test_a_completion_after_the_timeout_is_the_jobs_real_result_in_the_grid(tmp_path, monkeypatch):
    """With a 2 h timeout, a job that passes in 3 h is a success once its completed callback came,
    as on the backend pages."""
    use_config(tmp_path, monkeypatch, zombie_timeout_seconds=2 * HOUR)
    lake = ingested(tmp_path, four_green_and(completes=True, exec_s=3 * HOUR))
    h = History()
    h.add("pull_request", DAY, repo=UPSTREAM, number=42, state="open", head_sha=HEAD, head_ref="b",
          base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
    h.write(lake)
    assert the(backend_pages.load(lake, DAY).jobs, "zombie")["conclusion"] == "success"
    assert grid_row(lake, None)["state"] == "success"
    assert backend_row(lake, None)["success_rate"] == pytest.approx(1.0)


def test_a_job_whose_callbacks_arrival_is_not_known_times_out_from_its_start_everywhere(tmp_path, monkeypatch):
    """ci_result rows written before the receiver's arrival time was kept have no `callback_at`:
    the backend pages, the grid, the metrics and backend_health all time such a job out from its
    start, by the one rule (the health windows used to, the pages showed it running for ever)."""
    use_config(tmp_path, monkeypatch, zombie_timeout_seconds=2 * HOUR)
    lake = lake_with_a_zombie(tmp_path, T0)  # in progress from 09:00
    for path in lake.files("ci_result", [DAY]):
        rows = lake.read_files([path])
        rows = rows.set_column(rows.schema.get_field_index("callback_at"), "callback_at",
                               pa.nulls(rows.num_rows, rows.schema.field("callback_at").type))
        lake.write("ci_result", DAY, rows, part=path.rsplit("/", 1)[-1].removesuffix(".parquet"))
    noon = T0.replace(hour=12)
    assert the(backend_pages.load(lake, DAY, now_ms=ms(noon)).jobs, "zombie")["timed_out"]
    assert (grid_row(lake, noon)["state"], grid_row(lake, noon)["failure_class"]) == ("failure", "infra")
    assert backend_row(lake, noon)["jobs"] == 5
    (week,) = compute_health(lake, DAY, (7,), now_ms=ms(noon), zombie_timeout_s=2 * HOUR).to_pylist()
    assert (week["jobs"], week["lost"]) == (5, 1)
