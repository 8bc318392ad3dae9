"""A downstream job that reported `in_progress` and never `completed` (a dead runner, a job
cancelled before its `if: always()` step), on the backend pages and in backend_health.

The cross-repo relay's sweeper (pytorch/test-infra `cleanup_handler.py`) reports such a job to the
HUD as completed with the conclusion `timed_out` once `ZOMBIE_TIMEOUT_SECONDS` passed since its
`in_progress` callback. The lakes here are built by the real ingest from the callbacks the relay
forwards (tests/relay_callbacks.py); the timeout is read through `load_config()`.
"""

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest
import yaml
from conftest import write_lines
from test_hud_backend_pages import window_cells, levels_of

from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake
from resources.storage import Store
from tests.relay_callbacks import job_callbacks
from torchci_assets.config import load_config
from torchci_assets.derived.backends.assets import backend_health_asset
from torchci_assets.derived.backends.levels import compute_health
from torchci_assets.derived.hud import backend_pages
from torchci_assets.ingest.assets import ci_result_assets
from torchci_assets.ingest.ci_results import ingest_ci_results_day

DAY, NEXT = "2026-11-20", "2026-11-21"
T0 = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.timezone.utc)
REPO = "acme-ai/torch-npu"
PAYLOAD = next(p for p in json.loads((Path(__file__).parent / "data" / "octokit" / "examples.json").read_text())
               ["api.github.com"]["pull_request"] if p["action"] == "synchronize")
HEAD = PAYLOAD["pull_request"]["head"]["sha"]
PR_DISPATCH = {"event_type": "pull_request", "delivery_id": "pr-delivery", "payload": PAYLOAD}
HOUR = 3600


def ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def use_config(tmp_path, monkeypatch, **settings):
    path = tmp_path / "torchci.yaml"
    path.write_text(yaml.safe_dump({"allowlist": {"L3": {"npu": {REPO: []}}}, **settings}))
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))
    return load_config()


def archive(tmp_path, lines: list[dict]) -> Path:
    """The callbacks in the archive, each in the folder of the day the receiver got it."""
    by_day: dict[str, list[dict]] = {}
    for line in lines:
        by_day.setdefault(line["received_at"][:10], []).append(line)
    for day, day_lines in by_day.items():
        write_lines(tmp_path / "archive" / "ci-results" / f"day={day}" / "relay-1.jsonl", day_lines)
    return tmp_path / "archive"


def ingested(tmp_path, lines: list[dict], days=(DAY,)) -> Lake:
    store, lake = Store(str(archive(tmp_path, lines))), Lake.at(str(tmp_path / "lake"))
    for day in days:
        ingest_ci_results_day(store, lake, day)
    return lake


def four_green_and(dispatched: dt.datetime = T0, **zombie) -> list[dict]:
    """Four jobs of an L3 backend on a pull request's head that pass in 10 minutes, and one
    (`zombie`) that reports in_progress a minute after dispatch and nothing more."""
    lines = []
    for i in range(4):
        lines += job_callbacks(REPO, T0, run_id=10 + i, job_name=f"shard {i}", exec_s=600, level="L3",
                               client_payload=PR_DISPATCH)
    return lines + job_callbacks(REPO, dispatched, run_id=99, job_name="zombie", level="L3",
                                 client_payload=PR_DISPATCH, **{"completes": False, **zombie})


def the(jobs: list[dict], name: str) -> dict:
    (job,) = [j for j in jobs if j["job_name"] == name]
    return job


def test_a_job_that_never_completed_is_timed_out_on_the_backend_pages(tmp_path, monkeypatch):
    use_config(tmp_path, monkeypatch)  # the bundled timeout, 6 h
    lake = ingested(tmp_path, four_green_and())
    views = backend_pages.load(lake, DAY)  # judged at the end of the day: 15 h after its in_progress
    zombie = the(views.jobs, "zombie")
    assert (zombie["status"], zombie["conclusion"]) == ("completed", "timed_out")
    assert zombie["timed_out"] and not the(views.jobs, "shard 0")["timed_out"]
    page = backend_pages.render(views, "pytorch/pytorch", "now", "hud", levels=levels_of(lake, DAY))[
        f"hud/{backend_pages.backend_path(REPO)}"]
    week = window_cells(page, 7)
    assert (week["judged jobs"], week["completed jobs"], week["lost: timed out by the relay"],
            week["success rate"]) == ("5", "4", "1", "80.0%")
    heads = page.split('id="heads"')[1]
    # the head's one row: 5 jobs, 1 failed, none running
    assert "<td>5</td><td>1</td><td>0</td>" in heads
    section = backend_pages.pr_section(backend_pages.jobs_by_head(views)[HEAD])
    assert "timed_out (no completed callback within 6h00m)" in section and "in_progress" not in section


def test_a_job_younger_than_the_timeout_is_still_running(tmp_path, monkeypatch):
    use_config(tmp_path, monkeypatch)
    lake = ingested(tmp_path, four_green_and())
    # the in_progress callback reached the receiver at 09:01:00.5; 6 h later, to the millisecond
    edge = T0 + dt.timedelta(minutes=1, milliseconds=500) + dt.timedelta(hours=6)
    before = backend_pages.load(lake, DAY, now_ms=ms(edge) - 1)
    at = backend_pages.load(lake, DAY, now_ms=ms(edge))
    assert (the(before.jobs, "zombie")["status"], the(before.jobs, "zombie")["timed_out"]) == ("in_progress", False)
    page = backend_pages.render(before, "pytorch/pytorch", "now", "hud", levels=levels_of(lake, DAY, ms(edge) - 1))[
        f"hud/{backend_pages.backend_path(REPO)}"]
    assert [(window_cells(page, w)["completed jobs"], window_cells(page, w)["pending"]) for w in (7, 28)] == [
        ("4", "1"), ("4", "1")]
    assert (the(at.jobs, "zombie")["status"], the(at.jobs, "zombie")["conclusion"]) == ("completed", "timed_out")
    health = {r["window_days"]: r for r in compute_health(lake, DAY, (7,), now_ms=ms(edge) - 1).to_pylist()}
    assert (health[7]["pending"], health[7]["timeouts"]) == (1, 0)


def test_backend_health_counts_the_lost_job_as_a_timeout(tmp_path, monkeypatch):
    use_config(tmp_path, monkeypatch)
    lake = ingested(tmp_path, four_green_and())
    (week,) = compute_health(lake, DAY, (7,)).to_pylist()
    assert (week["jobs"], week["completed_jobs"], week["successes"]) == (5, 4, 4)
    assert (week["timeouts"], week["lost"], week["infra_failures"], week["pending"]) == (1, 1, 1, 0)
    assert week["success_rate"] == pytest.approx(0.8)


@pytest.mark.parametrize("timeout_h, in_progress_at_h, timed_out", [
    (2, 20, True),    # 4 h in progress at midnight: past a 2 h timeout
    (12, 14, False),  # 10 h in progress at midnight: not yet past a 12 h timeout
])
def test_backend_health_times_out_after_the_configured_timeout(tmp_path, monkeypatch, timeout_h, in_progress_at_h,
                                                               timed_out):
    use_config(tmp_path, monkeypatch, zombie_timeout_seconds=timeout_h * HOUR)
    archive(tmp_path, four_green_and(T0.replace(hour=in_progress_at_h), queue_s=0))
    result = dg.materialize([ci_result_assets, backend_health_asset], partition_key=DAY, resources={
        "archive": ArchiveResource(uri=str(tmp_path / "archive")), "lake": LakeResource(uri=str(tmp_path / "lake"))})
    assert result.success
    lake = Lake.at(str(tmp_path / "lake"))
    week = next(r for r in lake.read_files(lake.files("backend_health", [DAY])).to_pylist()
                if r["window_days"] == 7)
    assert (week["timeouts"], week["pending"], week["jobs"]) == ((1, 0, 5) if timed_out else (0, 1, 4))
    assert week["success_rate"] == pytest.approx(0.8 if timed_out else 1.0)


def test_the_pages_read_the_configured_timeout(tmp_path, monkeypatch):
    use_config(tmp_path, monkeypatch, zombie_timeout_seconds=2 * HOUR)
    lake = ingested(tmp_path, four_green_and())
    at_noon = backend_pages.load(lake, DAY, now_ms=ms(T0.replace(hour=12)))  # 3 h in progress
    assert the(at_noon.jobs, "zombie")["conclusion"] == "timed_out"


def test_a_completion_arriving_after_the_timeout_wins(tmp_path, monkeypatch):
    """Its completed callback reaches the receiver the next day, 20 h after its in_progress: until
    then the job is timed out, from then on it has its real conclusion, and health judges it as
    it did before (a job completed more than 6 h after its start is an infrastructure failure)."""
    use_config(tmp_path, monkeypatch)
    lines = four_green_and(completes=True, exec_s=20 * HOUR)
    lake = ingested(tmp_path, lines, days=(DAY, NEXT))
    today, tomorrow = backend_pages.load(lake, DAY), backend_pages.load(lake, NEXT)
    assert the(today.jobs, "zombie")["conclusion"] == "timed_out"
    late = the(tomorrow.jobs, "zombie")
    assert (late["status"], late["conclusion"], late["timed_out"]) == ("completed", "success", False)
    page = backend_pages.render(tomorrow, "pytorch/pytorch", "now", "hud", levels=levels_of(lake, NEXT))[
        f"hud/{backend_pages.backend_path(REPO)}"]
    assert window_cells(page, 7)["lost: timed out by the relay"] == "0"
    (week,) = compute_health(lake, NEXT, (7,)).to_pylist()
    assert (week["jobs"], week["completed_jobs"], week["successes"], week["timeouts"], week["lost"],
            week["infra_failures"]) == (5, 5, 4, 0, 0, 1)


def test_a_completion_after_a_short_timeout_counts_with_its_conclusion(tmp_path, monkeypatch):
    """With a 2 h timeout, a job that passes in 3 h is timed out until its completion comes, then
    a success (health judges a completed job by the 6 h rule, not by the relay's timeout)."""
    cfg = use_config(tmp_path, monkeypatch, zombie_timeout_seconds=2 * HOUR)
    lines = four_green_and(completes=True, exec_s=3 * HOUR)
    before = ingested(tmp_path / "before", lines[:-1])  # the lake before its completed callback landed
    assert the(backend_pages.load(before, DAY).jobs, "zombie")["conclusion"] == "timed_out"
    lake = ingested(tmp_path, lines)
    zombie = the(backend_pages.load(lake, DAY).jobs, "zombie")
    assert (zombie["conclusion"], zombie["timed_out"], zombie["execution_s"]) == ("success", False, 3 * HOUR)
    (week,) = compute_health(lake, DAY, (7,), zombie_timeout_s=cfg.zombie_timeout_seconds).to_pylist()
    assert (week["jobs"], week["successes"], week["timeouts"], week["lost"]) == (5, 5, 0, 0)
