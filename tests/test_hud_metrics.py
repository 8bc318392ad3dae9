"""`ci_metrics_daily`: each figure from one day's partitions, on hand-made lake tables."""

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
from hud_lake import DAY, REPO, T0, History, sha

from resources.lake import Lake
from torchci_assets.derived.hud.assets import headline_metadata
from torchci_assets.derived.hud.health import COMMIT_HEALTH_SCHEMA
from torchci_assets.derived.hud.metrics import build_ci_metrics
from torchci_assets.derived.hud.svg import Series, line_chart

BEFORE = "2026-10-04"


def _health_rows(day_pushed: str, conclusions: list[str], tts: list[float | None]) -> list[dict]:
    at = dt.datetime.fromisoformat(day_pushed).replace(hour=12, tzinfo=dt.timezone.utc)
    return [{"sha": sha(i), "pushed_at": at, "pushed_day": at.date(), "workflow": "pull", "job_group": "pull / x",
             "blocking": True, "conclusion": c, "time_to_signal_s": t} for i, (c, t) in enumerate(zip(conclusions, tts))]


def metrics(tmp_path, h: History, health: list[dict]):
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    lake.write("commit_health", DAY, pa.Table.from_pylist(health, schema=COMMIT_HEALTH_SCHEMA))
    report = build_ci_metrics(lake, DAY, REPO, ("refs/heads/main",))
    rows = pa.Table.from_batches(
        [b for f in lake.files("ci_metrics_daily", [DAY]) for b in pq.read_table(f).to_batches()]).to_pylist()
    return report, rows


def test_commit_figures_are_about_the_settled_commits_of_the_day_before(tmp_path):
    h = History()
    for i in range(3):
        h.push(100 + i)  # today's pushes: counted as main commits, judged tomorrow
    health = (_health_rows(BEFORE, ["red", "flaky", "green", "green", "no_signal"], [None, None, 600.0, 1800.0, None])
              + _health_rows(DAY, ["pending"], [None]))
    report, _ = metrics(tmp_path, h, health)
    m = report.headline
    assert report.commits_day == BEFORE and m["main_commits"] == 3
    assert (m["commits"], m["red"], m["flaky"], m["green"]) == (4, 1, 1, 2)  # no_signal left out
    assert (m["red_pct"], m["flaky_pct"]) == (25.0, 25.0)
    assert (m["tts_p50_s"], m["tts_commits"]) == (1200.0, 2)


def test_the_headline_metadata_reads_at_a_glance(tmp_path):
    """The figures the UI lists and plots on ci_metrics_daily's materialization: 1 red commit of 3
    is 33.3 (%), not 33.33333333333333; counts stay integers; a figure without data is left out."""
    report, _ = metrics(tmp_path, History(), _health_rows(BEFORE, ["red", "green", "green"], [None, 600.0, 1000.0]))
    report.queue_p90_by_platform = {"mac": 879.400000000001}
    m = headline_metadata(report)
    assert (m["red_pct"], m["flaky_pct"], m["commits"], m["tts_p50_s"]) == (33.3, 0.0, 3, 800.0)
    assert isinstance(m["commits"], int) and m["queue_p90_s_mac"] == 879.4 and "queue_p50_s" not in m


def test_queue_per_platform_and_label_durations_per_group_and_the_infra_share(tmp_path):
    h = History()
    c = sha(1)
    for i, q in enumerate((60, 120, 180, 600)):
        h.job(c, f"linux-jammy / test (default, {i + 1}, 4, linux.4xlarge)", "success", queue_s=q, minutes=10 * (i + 1),
              labels=("linux.4xlarge",), run_id=5)
    h.job(c, "win / test (default, 1, 1, windows.4xlarge)", "failure", queue_s=900, platform="win",
          labels=("windows.4xlarge",), test_config="default", run_id=6)  # no test results: infrastructure
    j = h.job(c, "win / test (default, 2, 2, windows.4xlarge)", "failure", queue_s=300, platform="win",
              labels=("windows.4xlarge",), test_config="default", run_id=6)
    h.test_job(j)  # has test results: a test failure
    h.job(c, "pr / build", "success", queue_s=5000, branch="gh/x/1/head", run_id=7)  # PR jobs queue too
    # completed yesterday, its `completed` delivery redelivered today: counted yesterday only
    h.job(c, "late / build", "success", queue_s=9999, job_id=777, day=BEFORE, run_id=8)
    h.job(c, "late / build", "success", queue_s=9999, job_id=777, run_id=8)
    report, rows = metrics(tmp_path, h, [])
    m = report.headline
    assert (m["jobs"], m["failed_jobs"], m["infra_failed_jobs"], m["infra_failure_pct"]) == (7, 2, 1, 50.0)
    assert m["queue_max_s"] == 5000
    runner = {(r["platform"], r["label"]): r for r in rows if r["dimension"] == "runner"}
    assert runner[("linux", "linux.4xlarge")]["queue_max_s"] == 600 and runner[("linux", "linux.4xlarge")]["jobs"] == 4
    assert report.queue_p90_by_platform["win"] == 900 - 0.1 * (900 - 300)
    group = {r["job_group"]: r for r in rows if r["dimension"] == "job_group"}
    lin = group["pull / linux-jammy / test (default, linux.4xlarge)"]
    assert (lin["jobs"], lin["duration_p50_s"]) == (4, 1500.0)  # successful main jobs; the PR build is not there
    assert "pull / pr / build" not in group


def test_tests_and_backends(tmp_path):
    h = History()
    for i, v in enumerate(("flaky", "flaky", "broken", "healthy")):
        h.verdict(f"test_{i}", v)
    h.add("disabled_tests", DAY, test="test_0 (__main__.TestNN)", status="disabled")
    h.add("disabled_tests", DAY, test="test_9 (__main__.TestNN)", status="reenabled")
    for kind in ("none", "none", "none", "test", "pending"):
        h.add("ci_result", DAY, repo="acme/torch-npu", level="L2", head_sha=sha(1), workflow_name="ci", run_id=1,
              run_attempt=1, job_name="j", status="completed", conclusion="success", started_at=T0,
              completed_at=T0, execution_s=1.0, failed=0, callback_at=T0, failure_kind=kind)
    h.add("ci_callback_minutes", DAY, repo="acme/torch-npu", callbacks=7)
    h.add("ci_callback_minutes", DAY, repo="acme/torch-npu", callbacks=5)
    h.add("ci_callback_minutes", DAY, repo="silent/torch-xpu", callbacks=2)
    report, rows = metrics(tmp_path, h, [])
    m = report.headline
    assert (m["flaky_tests"], m["broken_tests"], m["disabled_tests"]) == (2, 1, 1)
    backends = {r["repo"]: (r["jobs"], r["success_rate"], r["callbacks"]) for r in rows if r["dimension"] == "backend"}
    assert backends == {"acme/torch-npu": (4, 0.75, 12), "silent/torch-xpu": (0, None, 2)}


def test_a_day_without_any_data_has_its_row(tmp_path):
    report, rows = metrics(tmp_path, History(), [])
    assert [r["dimension"] for r in rows] == ["day"]
    assert report.headline["main_commits"] == 0 and report.headline["red_pct"] is None


def test_a_stack_landed_in_one_push_counts_each_of_its_commits(tmp_path):
    """The merge bot lands a stack of pull requests (ghstack) in one push: each is a commit on main.
    A part written before the push table kept the commits counts its heads, as before."""
    h = History()
    h.push(100)  # the HUD tests' push table: without `commits`
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("push", DAY, pa.Table.from_pylist([{
        "repo": REPO, "ref": "refs/heads/main", "after": sha(103), "deleted": False, "received_at": T0,
        "commits": [sha(101), sha(102), sha(103)]}]), part="stack")
    report, _ = metrics(tmp_path, h, _health_rows(BEFORE, ["green"], [60.0]))
    assert report.headline["main_commits"] == 4


def test_a_job_redelivered_days_later_is_counted_on_the_day_its_completion_first_arrived(tmp_path):
    """GitHub's "Recent deliveries" page redelivers up to three days back: the copy lands in a later
    day partition and must not count the job again there. A job completed at 23:59 whose delivery
    arrived at 00:01 counts on the day it arrived, once."""
    h = History()
    c = sha(1)
    at = dt.datetime.fromisoformat(DAY).replace(tzinfo=dt.timezone.utc)
    for back, job_id in ((2, 801), (3, 802)):
        day = (at - dt.timedelta(days=back)).date().isoformat()
        created = at - dt.timedelta(days=back) + dt.timedelta(hours=9)
        for copy_day in (day, DAY):  # the original, then the redelivery today
            h.job(c, f"old-{back} / test (default, 1, 1, linux.2xlarge)", "failure", queue_s=7000, job_id=job_id,
                  day=copy_day, run_id=job_id, created=created, test_config="default")
    h.job(c, "midnight / build", "success", queue_s=30, job_id=803, run_id=803,
          created=at - dt.timedelta(minutes=32))  # completed 23:59 yesterday, its delivery received 00:00 today
    h.job(c, "today / build", "success", queue_s=60, run_id=804)
    report, rows = metrics(tmp_path, h, [])
    m = report.headline
    assert (m["jobs"], m["failed_jobs"], m["queue_max_s"]) == (2, 0, 60)
    platform = {r["platform"]: r["jobs"] for r in rows if r["dimension"] == "platform"}
    assert platform == {"linux": 2}


def test_a_rerun_job_completed_after_midnight_by_an_older_github_is_judged_with_its_rerun_s_tests(tmp_path):
    """A rerun's test job queued before midnight (attempt 2) failed a test; its completion came after
    midnight from an older GitHub without run_attempt, which that day's ingest writes as attempt 1. A
    job id belongs to one attempt: the job is the rerun's, its test results (attempt 2) say a test
    failed, and its failure is no infrastructure failure (it was one: no test results for attempt 1)."""
    h = History()
    c = sha(1)
    queued = dt.datetime.fromisoformat(BEFORE).replace(hour=23, minute=40, tzinfo=dt.timezone.utc)
    name = "linux-jammy / test (default, 1, 1, linux.2xlarge)"
    j = h.job(c, name, None, run_id=9, attempt=2, created=queued, day=BEFORE, test_config="default", queue_s=300)
    h.job(c, name, "failure", run_id=9, attempt=1, job_id=j, created=queued, test_config="default", queue_s=300)
    h.test_job(j, attempt=2)
    report, _ = metrics(tmp_path, h, [])
    m = report.headline
    assert (m["jobs"], m["failed_jobs"], m["infra_failed_jobs"]) == (1, 1, 0)


def test_a_chart_without_any_point_says_so_instead_of_an_axis_of_zeros():
    """With no point, an hours axis read 0.0 h at each of its five ticks."""
    chart = line_chart("Time to signal", [Series("p50", []), Series("p90", [])], ["2026-11-27", "2026-11-28"],
                       fmt=lambda v: f"{v / 3600:.1f} h")
    assert 'class="ytick"' not in chart and "0.0 h" not in chart
    assert "no data" in chart.split("</svg>")[0]  # in the plot, not only the legend
