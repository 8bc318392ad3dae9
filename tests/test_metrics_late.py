"""`ci_metrics_daily` counts a job once, on the day its completion arrived in the archive, however late
that is: a completion GitHub redelivered, or the gap repair fetched, days after the job completed."""

import datetime as dt

import pyarrow.parquet as pq
from hud_lake import REPO, History, sha

from resources.lake import Lake, connect
from torchci_assets.derived.hud.inputs import register
from torchci_assets.derived.hud.metrics import build_ci_metrics, earlier_days

START = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)
DAYS = [(START + dt.timedelta(days=i)).date().isoformat() for i in range(7)]  # 10-01 .. 10-07


def late_job(h: History, job_id: int, completed_day: int, arrivals: list[int], heard_running: bool = True) -> None:
    """A job that ran on DAYS[completed_day]; `arrivals`: the days its `completed` delivery landed in."""
    created = START + dt.timedelta(days=completed_day, hours=9)
    name = f"late-{job_id} / test (default, 1, 1, linux.2xlarge)"
    if heard_running:  # its in_progress delivery came in time, its completion was lost
        h.job(sha(1), name, None, job_id=job_id, run_id=job_id, created=created, day=DAYS[completed_day],
              queue_s=7000)
    for day in arrivals:
        h.job(sha(1), name, "success", job_id=job_id, run_id=job_id, created=created, day=DAYS[day], queue_s=7000)


def jobs_per_day(tmp_path, h: History) -> dict[str, int]:
    """Each day's headline job count, every day built in order, as the daily schedule builds them."""
    for i, day in enumerate(DAYS):  # one ordinary job a day: every day has its partitions
        h.job(sha(1), "daily / build", "success", run_id=100 + i, created=START + dt.timedelta(days=i, hours=3),
              day=day, queue_s=60)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    return {day: build_ci_metrics(lake, day, REPO, ("refs/heads/main",)).headline["jobs"] - 1 for day in DAYS}


def test_a_completion_arriving_two_days_late_is_counted_on_the_day_it_arrived(tmp_path):
    """Its only completion (the gap repair's, or a delivery redelivered after an outage) lands two
    days after the job completed: it was counted on no day."""
    h = History()
    late_job(h, 901, completed_day=1, arrivals=[3])
    assert jobs_per_day(tmp_path, h) == {d: int(d == DAYS[3]) for d in DAYS}


def test_a_late_completion_redelivered_later_still_is_counted_once(tmp_path):
    """The late completion, then copies of it the day after and three days after: once, on its first
    arrival; a job whose first completion came on time is not counted again by a copy three days on."""
    h = History()
    late_job(h, 902, completed_day=0, arrivals=[2, 3, 5])
    late_job(h, 903, completed_day=1, arrivals=[1, 4], heard_running=False)
    counts = jobs_per_day(tmp_path, h)
    assert counts == {d: int(d in (DAYS[1], DAYS[2])) for d in DAYS}


def test_a_day_built_again_later_gives_the_same_rows(tmp_path):
    """Rebuilding the day of a late arrival after later copies landed changes none of its rows."""
    h = History()
    late_job(h, 904, completed_day=0, arrivals=[3, 4])
    jobs_per_day(tmp_path, h)
    lake = Lake.at(str(tmp_path / "lake"))
    first = pq.read_table(lake.files("ci_metrics_daily", [DAYS[3]])).to_pylist()
    build_ci_metrics(lake, DAYS[3], REPO, ("refs/heads/main",))
    assert pq.read_table(lake.files("ci_metrics_daily", [DAYS[3]])).to_pylist() == first
    assert any(r["dimension"] == "day" and r["jobs"] == 2 for r in first)


def test_a_day_without_a_late_completion_reads_the_day_before_alone(tmp_path):
    """The earlier days are read for a late completion only: an ordinary day costs that day and the
    day before, however many days the lake holds."""
    h = History()
    late_job(h, 905, completed_day=2, arrivals=[4])
    jobs_per_day(tmp_path, h)
    lake = Lake.at(str(tmp_path / "lake"))
    con = connect()
    for day, expected in ((DAYS[5], [DAYS[4]]), (DAYS[4], DAYS[2:4])):
        register(con, lake, "workflow_job", [day], "jobs_today")
        assert earlier_days(con, lake, (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()) == expected
    con.close()
