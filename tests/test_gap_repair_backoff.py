"""Gap repair's cost on jobs that really run for hours, and on runs that wait long without jobs:
GitHub is asked about a job it showed running again after waits growing with the job's age, not on
every pass, while a lost completion is still repaired within the limit where the lake can tell it
is certainly lost (its run was heard completing, or GitHub never showed the job in the state the
lake has), and within a quarter of its age otherwise."""

import datetime as dt

import duckdb

from conftest import write_lines
from test_gap_repair import (DAY, JOB, JOBLESS_RUN, REPO, RUN, archive_with_lost_completion, client, completed_job,
                             fake_api, hook, jobs_in_lake)

from torchci_assets.backfill.gaps import repair_gaps
from torchci_assets.ingest.webhooks import ingest_webhook_day

STARTED = dt.datetime(2021, 9, 13, 2, 21, 15, tzinfo=dt.timezone.utc)  # the job's in_progress, heard
FIRST_PASS = dt.datetime(2021, 9, 13, 2, 55, tzinfo=dt.timezone.utc)
EVERY = dt.timedelta(minutes=5)


def the_run(status: str) -> dict:
    return {"id": RUN, "run_attempt": 1, "status": status, "conclusion": "success" if status == "completed" else None,
            "name": "CI", "created_at": "2021-09-13T02:21:00Z", "run_started_at": "2021-09-13T02:21:00Z",
            "updated_at": "2021-09-13T05:30:00Z", "head_branch": "main"}


def running(octokit, **values) -> dict:
    return dict(completed_job(octokit), status="in_progress", conclusion=None, completed_at=None, **values)


def done(octokit, at: str, **values) -> dict:
    return dict(completed_job(octokit), completed_at=at, conclusion="success", **values)


class Passes:
    """The schedule's passes over the test's lake, each followed by the refresh's ingest of the day."""

    def __init__(self, tmp_path, httpserver, octokit):
        self.tmp_path, self.httpserver = tmp_path, httpserver
        self.archive, self.lake = archive_with_lost_completion(tmp_path, octokit)
        self.api = fake_api(httpserver, octokit, completed_job(octokit))
        self.now = FIRST_PASS
        self.asked: list[dt.datetime] = []  # the passes that asked for RUN's jobs
        self.ingested = None  # the archive's files the lake was last ingested from

    def until(self, end: dt.datetime) -> None:
        while self.now <= end:
            before = self.api.count(rf"/runs/{RUN}/attempts/1/jobs$")
            repair_gaps(client(self.httpserver), self.archive, self.lake, self.now)
            self.refresh()
            if self.api.count(rf"/runs/{RUN}/attempts/1/jobs$") > before:
                self.asked.append(self.now)
            self.now += EVERY

    def refresh(self) -> None:
        """The refresh's ingest of the day, when the archive changed since the last one: the refresh
        sensor launches no run otherwise, and an ingest of the same files leaves the same lake."""
        files = self.archive.list_files("", ("",))
        if files != self.ingested:
            ingest_webhook_day(self.archive, self.lake, DAY, workers=1)
            self.ingested = files

    def completed(self, job_id: int = JOB) -> bool:
        return any(row[0] == job_id and row[2] == "completed" for row in jobs_in_lake(self.tmp_path))

    def until_completed(self, job_id: int, end: dt.datetime) -> dt.datetime:
        """The first pass after which the lake has the job completed."""
        while not self.completed(job_id):
            assert self.now <= end, f"job {job_id} not repaired by {end}"
            self.until(self.now)
        return self.now - EVERY


def test_a_job_github_shows_running_for_hours_is_asked_again_after_growing_waits(tmp_path, httpserver, octokit):
    passes = Passes(tmp_path, httpserver, octokit)
    passes.api.add_run(the_run("in_progress"), [running(octokit)])
    passes.until(STARTED + dt.timedelta(hours=3))
    # a pass every 5 minutes from the limit on would have asked 31 times
    assert 1 < len(passes.asked) <= 10, passes.asked
    waits = [b - a for a, b in zip(passes.asked, passes.asked[1:])]
    assert waits == sorted(waits) and waits[-1] >= 4 * EVERY
    for asked, wait in zip(passes.asked, waits):  # each wait at most a quarter of the job's age, and a pass
        assert wait <= (asked - STARTED) / 4 + EVERY

    # its completion is lost, and so is the run's: found within a quarter of its age (and a pass)
    lost = STARTED + dt.timedelta(hours=3, minutes=2)
    passes.api.add_run(the_run("in_progress"), [done(octokit, "2021-09-13T05:23:15Z")])
    repaired = passes.until_completed(JOB, lost + (lost - STARTED) / 4 + EVERY)
    assert repaired > lost
    assert jobs_in_lake(tmp_path)[0] == (JOB, RUN, "completed", "success", "2021-09-13 05:23:15+00")


def run_completed(octokit, received_at: str) -> dict:
    def edit(p):
        p["repository"] = octokit["api.github.com"]["workflow_job"][1]["repository"]
        p["workflow_run"].update(the_run("completed"))
    return hook(octokit, "workflow_run", "completed", received_at, edit)


def test_a_job_whose_run_was_heard_completing_is_repaired_within_the_limit(tmp_path, httpserver, octokit):
    """GitHub showed the job running for two hours; its completion is lost, its run's arrives: the
    job is certainly a gap, asked about at the next pass, not after a wait grown with its age."""
    passes = Passes(tmp_path, httpserver, octokit)
    passes.api.add_run(the_run("in_progress"), [running(octokit)])
    passes.until(dt.datetime(2021, 9, 13, 4, 20, tzinfo=dt.timezone.utc))
    passes.api.add_run(the_run("completed"), [done(octokit, "2021-09-13T04:21:00Z")])
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-2.jsonl",
                [run_completed(octokit, "2021-09-13T04:21:30.000Z")], gz=False)
    ingest_webhook_day(passes.archive, passes.lake, DAY, workers=1)
    repaired = passes.until_completed(JOB, dt.datetime(2021, 9, 13, 4, 51, tzinfo=dt.timezone.utc))
    assert repaired == dt.datetime(2021, 9, 13, 4, 25, tzinfo=dt.timezone.utc)
    # answered completed: never asked again
    asked = len(passes.api.requests)
    passes.until(passes.now + dt.timedelta(hours=1))
    assert len(passes.api.requests) == asked


def test_a_job_github_never_showed_running_is_asked_at_the_limit_beside_one_backing_off(tmp_path, httpserver,
                                                                                       octokit):
    """A second job of the run starts while the first has been running for an hour and a half, and
    its completion is lost: GitHub never showed it running, so it is asked about at the limit, not
    at the older job's next turn."""
    passes = Passes(tmp_path, httpserver, octokit)
    passes.api.add_run(the_run("in_progress"), [running(octokit)])
    passes.until(dt.datetime(2021, 9, 13, 3, 40, tzinfo=dt.timezone.utc))
    second = dict(id=JOB + 1, name="test (2)", created_at="2021-09-13T03:42:00Z", started_at="2021-09-13T03:42:00Z")
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-2.jsonl", [
        hook(octokit, "workflow_job", "in_progress", "2021-09-13T03:42:01.000Z",
             lambda p: p["workflow_job"].update(running(octokit, **second)))], gz=False)
    ingest_webhook_day(passes.archive, passes.lake, DAY, workers=1)
    passes.api.add_run(the_run("in_progress"), [running(octokit), done(octokit, "2021-09-13T03:50:00Z", **second)])
    repaired = passes.until_completed(JOB + 1, dt.datetime(2021, 9, 13, 5, 0, tzinfo=dt.timezone.utc))
    # last heard 03:42:01, stale after the 30-minute limit: the first pass from then on
    assert repaired == dt.datetime(2021, 9, 13, 4, 15, tzinfo=dt.timezone.utc)
    assert not passes.completed(JOB)


def test_a_lookup_of_an_attempt_github_shows_running_asks_for_its_jobs_alone(tmp_path, httpserver, octokit):
    """The jobs of an attempt, one in progress, prove the attempt still running: its run is not
    asked for on that lookup (a request each, on a PyTorch-sized day half of gap repair's). Once the
    jobs show it may have ended, the run is read before its jobs, written completed, and the attempt
    is never asked about again."""
    passes = Passes(tmp_path, httpserver, octokit)
    passes.api.add_run(the_run("in_progress"), [running(octokit)])
    passes.until(STARTED + dt.timedelta(hours=3))
    assert len(passes.asked) > 1
    assert passes.api.count(rf"/runs/{RUN}/attempts/1$") == 0

    # its completion and its run's are lost: the lookup that finds it done reads the run too
    passes.api.add_run(the_run("completed"), [done(octokit, "2021-09-13T05:23:15Z")])
    passes.until_completed(JOB, dt.datetime(2021, 9, 13, 6, 30, tzinfo=dt.timezone.utc))
    assert passes.api.count(rf"/runs/{RUN}/attempts/1$") == 1
    runs = duckdb.sql(f"SELECT status FROM '{tmp_path}/lake/workflow_run/day={DAY}/*.parquet' "
                      f"WHERE id = {RUN}").fetchall()
    assert ("completed",) in runs
    asked = len(passes.api.requests)
    passes.until(passes.now + dt.timedelta(hours=2))
    assert len(passes.api.requests) == asked


def test_a_run_github_shows_without_jobs_is_asked_again_after_growing_waits(tmp_path, httpserver, octokit):
    """A run the lake heard requested, no job since: GitHub lists none either while it waits (for a
    runner, its concurrency group). Once GitHub has shown it so, it is asked again when its age has
    grown by a quarter, not on every pass; jobs it starts, their deliveries all lost, are found
    within a quarter of its age (and a pass)."""
    created = dt.datetime(2021, 9, 13, 2, 0, tzinfo=dt.timezone.utc)
    waiting = dict(the_run("queued"), id=JOBLESS_RUN, created_at="2021-09-13T02:00:00Z",
                   run_started_at="2021-09-13T02:00:00Z")
    passes = Passes(tmp_path, httpserver, octokit)
    passes.api.add_run(waiting, [])
    passes.until(created + dt.timedelta(hours=3))
    # a pass every 5 minutes from the limit on would have asked 27 times
    assert 1 < passes.api.count(rf"/runs/{JOBLESS_RUN}/attempts/1$") <= 10

    started = passes.now
    job = running(octokit, id=JOBLESS_RUN * 10, run_id=JOBLESS_RUN, name="build", created_at="2021-09-13T05:00:00Z",
                  started_at="2021-09-13T05:01:00Z")
    passes.api.add_run(dict(waiting, status="in_progress"), [job])
    while not any(row[1] == JOBLESS_RUN for row in jobs_in_lake(tmp_path)):
        assert passes.now <= started + (started - created) / 4 + EVERY, "the run's jobs not found in time"
        passes.until(passes.now)
