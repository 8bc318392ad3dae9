"""Gap repair: a job whose completion webhook was lost is looked up through the (fake) REST API,
written as a `rest` record, and merged with the webhook when that arrives after all."""

import copy
import datetime as dt
import shutil

import duckdb
import pytest

from conftest import write_lines
from fake_github_actions import FakeActions, reply
from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.backfill import gone
from torchci_assets.backfill.gaps import find_gaps, repair_gaps
from torchci_assets.ingest.webhooks import ingest_webhook_day

REPO = "Codertocat/Hello-World"
DAY = "2021-09-13"
JOB, RUN = 289782451, 2202229078
JOBLESS_RUN = 2202229500
NOW = dt.datetime(2021, 9, 13, 3, 30, tzinfo=dt.timezone.utc)


def hook(octokit, event: str, action: str, received_at: str, edit=None) -> dict:
    """A real webhook payload of @octokit/webhooks-examples, in the archive's envelope."""
    payload = copy.deepcopy(next(p for p in octokit["api.github.com"][event] if p["action"] == action
                                 and p["repository"]["full_name"] == REPO or (event == "workflow_run" and p["action"] == action)))
    if edit:
        edit(payload)
    return {"event": event, "delivery_id": f"gh-{event}-{action}-{received_at}", "received_at": received_at,
            "payload": payload}


def completed_job(octokit) -> dict:
    """The job as GitHub shows it once done: the `completed` example, on the day the queued and
    in_progress examples happened."""
    job = copy.deepcopy(next(p for p in octokit["api.github.com"]["workflow_job"]
                             if p["action"] == "completed")["workflow_job"])
    job.update(created_at="2021-09-13T02:21:13Z", started_at="2021-09-13T02:21:13Z",
               completed_at="2021-09-13T02:27:40Z", run_attempt=1)
    return job


def jobless_run(octokit, payload) -> None:
    payload["repository"] = octokit["api.github.com"]["workflow_job"][1]["repository"]
    payload["workflow_run"].update(id=JOBLESS_RUN, status="queued", created_at="2021-09-13T02:00:00Z",
                                   updated_at="2021-09-13T02:00:00Z", run_attempt=1, conclusion=None)


def fake_api(httpserver, octokit, job: dict) -> FakeActions:
    api = FakeActions(httpserver, repo=REPO)
    api.add_run({"id": RUN, "run_attempt": 1, "status": "completed", "conclusion": "success", "name": "CI",
                 "created_at": "2021-09-13T02:21:00Z", "run_started_at": "2021-09-13T02:21:00Z",
                 "updated_at": "2021-09-13T02:28:00Z", "head_branch": "main"}, [job])
    lost = [dict(job, id=JOBLESS_RUN * 10 + i, run_id=JOBLESS_RUN, name=f"build ({i})") for i in (1, 2)]
    api.add_run({"id": JOBLESS_RUN, "run_attempt": 1, "status": "completed", "conclusion": "success", "name": "CI",
                 "created_at": "2021-09-13T02:00:00Z", "run_started_at": "2021-09-13T02:00:00Z",
                 "updated_at": "2021-09-13T02:30:00Z", "head_branch": "main"}, lost)
    return api


def archive_with_lost_completion(tmp_path, octokit) -> tuple[Store, Lake]:
    day = tmp_path / "archive" / "webhooks" / f"day={DAY}"
    write_lines(day / "hooks-1.jsonl", [
        hook(octokit, "workflow_job", "queued", "2021-09-13T02:21:14.100Z"),
        hook(octokit, "workflow_job", "in_progress", "2021-09-13T02:21:15.200Z"),
        hook(octokit, "workflow_run", "requested", "2021-09-13T02:00:01.000Z", lambda p: jobless_run(octokit, p)),
    ], gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    return archive, lake


def jobs_in_lake(tmp_path) -> list[tuple]:
    return duckdb.sql(f"SELECT id, run_id, status, conclusion, completed_at::VARCHAR FROM "
                      f"'{tmp_path}/lake/workflow_job/day={DAY}/*.parquet' ORDER BY id").fetchall()


def client(httpserver) -> GitHubResource:
    return GitHubResource(api_url=httpserver.url_for("").rstrip("/"), token="ghp_FAKE0123456789")


def test_a_lost_completion_is_repaired_and_the_late_webhook_adds_no_row(tmp_path, httpserver, octokit):
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    assert jobs_in_lake(tmp_path) == [(JOB, RUN, "in_progress", None, None)]
    gaps = find_gaps(lake, NOW)
    assert gaps.stale_jobs == {(REPO, RUN, 1): {JOB}} and gaps.jobless_runs == {(REPO, JOBLESS_RUN, 1)}
    # not yet stale 30 minutes after it was last heard of
    assert not find_gaps(lake, dt.datetime(2021, 9, 13, 2, 50, tzinfo=dt.timezone.utc)).stale_jobs

    api = fake_api(httpserver, octokit, completed_job(octokit))
    report = repair_gaps(client(httpserver), archive, lake, NOW)
    assert (report.stale_jobs, report.jobless_runs, report.looked_up, report.repaired_jobs) == (1, 1, 2, 1)
    assert report.failed == []
    ingest_webhook_day(archive, lake, DAY, workers=1)
    repaired = jobs_in_lake(tmp_path)
    assert repaired == [(JOB, RUN, "completed", "failure", "2021-09-13 02:27:40+00"),
                        (JOBLESS_RUN * 10 + 1, JOBLESS_RUN, "completed", "failure", "2021-09-13 02:27:40+00"),
                        (JOBLESS_RUN * 10 + 2, JOBLESS_RUN, "completed", "failure", "2021-09-13 02:27:40+00")]
    sources = duckdb.sql(f"SELECT delivery_id FROM '{tmp_path}/lake/webhook_events/day={DAY}/*.parquet' "
                         "WHERE delivery_id LIKE 'rest-%' ORDER BY 1").fetchall()
    assert (f"rest-workflow_job-{JOB}-1-completed",) in sources

    # nothing left to repair: the next pass asks GitHub nothing
    api.requests.clear()
    assert repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=5)).looked_up == 0
    assert api.requests == []

    # GitHub's own completion arrives after all (a redelivery): one row, the same state
    def as_completed(p):
        p["workflow_job"].update(completed_job(octokit))
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-2.jsonl",
                [hook(octokit, "workflow_job", "completed", "2021-09-13T03:40:00.000Z", as_completed)], gz=False)
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert jobs_in_lake(tmp_path) == repaired


def test_a_pass_leaves_the_budget_s_reserve_to_the_writers_and_a_later_pass_asks_the_rest(tmp_path, httpserver,
                                                                                          octokit):
    """The relay and Dr. CI write with the same credentials: once GitHub says less than a fifth of the
    hour's limit is left, the pass asks no more, says so and what to set, and the run attempt it left
    is asked by a pass after the budget reset. Without a reserve (credentials of its own), it asks all."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.limit, api.remaining = 5000, 1000  # the first answer says 999 left
    lines: list[str] = []
    report = repair_gaps(client(httpserver), archive, lake, NOW, log=lines.append, pulls_of=REPO)
    assert (report.looked_up, report.kept_for_writers, report.failed, report.problem) == (1, 1, [], None)
    assert report.closes_kept and api.count(r"/pulls") == 0  # nor the hour's compare of pull requests
    assert any(line.startswith("gap repair: 1 run attempt(s) and the pull requests' closes left to a later pass: "
                               "GitHub's budget left is 996 of 5000 this hour (it resets in ")  # 4 requests made
               and "under the 20% kept for the relay" in line and "TORCHCI_GAP_REPAIR_RESERVE=0.2;" in line
               for line in lines), lines

    ingest_webhook_day(archive, lake, DAY, workers=1)  # the refresh takes what was answered
    api.remaining = 998  # a pass before the reset asks one lookup's worth, no more: the one left
    report = repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=5))
    assert (report.looked_up, report.kept_for_writers) == (1, 0)
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert [state for _, _, state, _, _ in jobs_in_lake(tmp_path)] == ["completed"] * 3

    archive2, lake2 = archive_with_lost_completion(tmp_path / "own", octokit)
    api.remaining = 10
    report = repair_gaps(client(httpserver), archive2, lake2, NOW, reserve=0)
    assert (report.looked_up, report.kept_for_writers) == (2, 0)


def test_a_job_never_heard_of_beside_a_stale_one_is_written_too(tmp_path, httpserver, octokit):
    """A short job of the same run attempt ran inside the outage that lost the stale job's
    completion: GitHub lists it with the stale job, and it is written with all its states, once
    (its attempt has jobs, so no later pass would look for it)."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    sibling = dict(completed_job(octokit), id=JOB + 1, name="lint", conclusion="success",
                   created_at="2021-09-13T02:22:00Z", started_at="2021-09-13T02:22:05Z", completed_at="2021-09-13T02:25:00Z")
    api.add_run(api.runs[RUN][1], [completed_job(octokit), sibling])
    report = repair_gaps(client(httpserver), archive, lake, NOW)
    assert (report.repaired_jobs, report.unheard_jobs) == (1, 1)
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert (JOB + 1, RUN, "completed", "success", "2021-09-13 02:25:00+00") in jobs_in_lake(tmp_path)
    states = duckdb.sql(f"SELECT delivery_id FROM '{tmp_path}/lake/webhook_events/day={DAY}/*.parquet' "
                        f"WHERE delivery_id LIKE 'rest-workflow_job-{JOB + 1}-%' ORDER BY 1").fetchall()
    assert [d for (d,) in states] == [f"rest-workflow_job-{JOB + 1}-1-{s}" for s in ("completed", "in_progress", "queued")]
    assert repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=5)).looked_up == 0


def test_a_repair_that_finds_the_job_still_running_loses_to_the_webhook_completion(tmp_path, httpserver, octokit):
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    running = dict(completed_job(octokit), status="in_progress", conclusion=None, completed_at=None)
    fake_api(httpserver, octokit, running)
    for minutes in (0, 5):  # two passes write the same record under two file names
        repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=minutes))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert jobs_in_lake(tmp_path)[0] == (JOB, RUN, "in_progress", None, None)
    rest_ids = duckdb.sql(f"SELECT count(*) FROM '{tmp_path}/lake/webhook_events/day={DAY}/*.parquet' "
                          f"WHERE delivery_id = 'rest-workflow_job-{JOB}-1-in_progress'").fetchall()
    assert rest_ids == [(1,)]  # deduplicated
    def as_completed(p):
        p["workflow_job"].update(completed_job(octokit))
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-2.jsonl",
                [hook(octokit, "workflow_job", "completed", "2021-09-13T02:27:41.000Z", as_completed)], gz=False)
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert jobs_in_lake(tmp_path)[0] == (JOB, RUN, "completed", "failure", "2021-09-13 02:27:40+00")


def test_a_run_whose_jobs_all_landed_the_day_before_its_window_is_not_jobless(tmp_path, octokit):
    """Its jobs done before midnight (D-3), its `completed` just after (D-2): two days later the run
    is in the window and its jobs are not. Nothing was lost, so nothing is looked up; else every
    5-minute pass of that day would fetch it and write its jobs again."""
    job = completed_job(octokit)
    job.update(created_at="2021-09-13T23:50:00Z", started_at="2021-09-13T23:50:05Z",
               completed_at="2021-09-13T23:59:58Z", run_id=RUN, run_attempt=1)

    def as_job(state):
        def edit(p):
            p["workflow_job"].update(job, status=state)
            if state != "completed":
                p["workflow_job"].update(conclusion=None, completed_at=None)
        return edit

    def as_run(status, updated):
        def edit(p):
            p["workflow_run"].update(id=RUN, run_attempt=1, status=status, created_at="2021-09-13T23:49:00Z",
                                     updated_at=updated, conclusion="success" if status == "completed" else None)
        return edit

    write_lines(tmp_path / "archive" / "webhooks" / "day=2021-09-13" / "hooks.jsonl", [
        hook(octokit, "workflow_run", "requested", "2021-09-13T23:49:01.000Z", as_run("queued", "2021-09-13T23:49:00Z")),
        hook(octokit, "workflow_job", "queued", "2021-09-13T23:50:01.000Z", as_job("queued")),
        hook(octokit, "workflow_job", "completed", "2021-09-13T23:59:59.000Z", as_job("completed"))], gz=False)
    write_lines(tmp_path / "archive" / "webhooks" / "day=2021-09-14" / "hooks.jsonl", [
        hook(octokit, "workflow_run", "completed", "2021-09-14T00:00:02.000Z",
             as_run("completed", "2021-09-14T00:00:01Z"))], gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    for day in ("2021-09-13", "2021-09-14"):
        ingest_webhook_day(archive, lake, day, workers=1)
    assert find_gaps(lake, dt.datetime(2021, 9, 16, 12, 0, tzinfo=dt.timezone.utc)).attempts == []


def test_the_scheduled_job_runs_in_dagster(tmp_path, httpserver, monkeypatch):
    from jobs.gap_repair import gap_repair_job, gap_repair_schedule, repair_limit
    from torchci_assets.definitions import defs

    (schedule,) = [s for s in defs.schedules if s.name == gap_repair_schedule.name]
    assert schedule.cron_schedule == "*/5 * * * *" and schedule.job_name == gap_repair_job.name
    # what the UI shows: what it does, and why it may be off
    assert "GitHub's REST API" in schedule.description and "GITHUB_TOKEN" in schedule.description
    assert repair_limit() == dt.timedelta(minutes=25)
    monkeypatch.setenv("TORCHCI_GAP_REPAIR_MINUTES", "3")
    with pytest.raises(ValueError, match="more than the 5-minute"):
        repair_limit()
    monkeypatch.delenv("TORCHCI_GAP_REPAIR_MINUTES")
    import jobs.gap_repair

    # an empty lake asks GitHub nothing, in the hour's first pass (which compares the open pull
    # requests) as in any other: the fake API answers no request here
    for at in (NOW.replace(minute=2), NOW):
        monkeypatch.setattr(jobs.gap_repair, "utcnow", lambda at=at: at)
        result = gap_repair_job.execute_in_process(resources={
            "github": client(httpserver), "archive": ArchiveResource(uri=str(tmp_path / "archive")),
            "lake": LakeResource(uri=str(tmp_path / "lake"))})
        assert result.success
        (mat,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
        assert mat.event_specific_data.metadata["looked_up"].value == 0
    assert httpserver.log == []


def test_runs_cancelled_while_pending_are_gaps_until_answered_and_the_newest_gaps_come_first(tmp_path, octokit,
                                                                                            monkeypatch):
    """A run cancelled before any job of it was heard of may have had jobs whose deliveries were lost,
    so it is a gap like any run without jobs (until GitHub has answered for it: see the next test).
    Under the bound the newest jobless runs are taken, so a burst of old ones cannot crowd out a recent loss."""
    from torchci_assets.backfill import gaps as gaps_module

    def run(run_id, status, conclusion, created):
        def edit(p):
            jobless_run(octokit, p)
            p["workflow_run"].update(id=run_id, status=status, conclusion=conclusion, created_at=created,
                                     updated_at=created)
        return edit

    cancelled = [hook(octokit, "workflow_run", "completed", f"2021-09-13T01:0{i}:01.000Z",
                      run(3000 + i, "completed", "cancelled", f"2021-09-13T01:0{i}:00Z")) for i in range(3)]
    skipped = [hook(octokit, "workflow_run", "completed", "2021-09-13T01:30:01.000Z",
                    run(3500, "completed", "skipped", "2021-09-13T01:30:00Z"))]
    lost = [hook(octokit, "workflow_run", "requested", f"2021-09-13T0{h}:00:01.000Z",
                 run(run_id, "queued", None, f"2021-09-13T0{h}:00:00Z")) for run_id, h in ((4000, 0), (4001, 2))]
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks.jsonl", cancelled + skipped + lost, gz=False)
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(Store(str(tmp_path / "archive")), lake, DAY, workers=1)
    jobless = {(REPO, run_id, 1) for run_id in (3000, 3001, 3002, 4000, 4001)}
    assert find_gaps(lake, NOW).jobless_runs == jobless
    shutil.rmtree(tmp_path / "lake" / "webhook_events")  # a lake without it knows of no answer
    assert find_gaps(lake, NOW).jobless_runs == jobless
    monkeypatch.setattr(gaps_module, "MAX_RUNS", 1)
    assert find_gaps(lake, NOW).jobless_runs == {(REPO, 4001, 1)}


CANCELLED_AT = "2021-09-13T02:24:00Z"
HEAD = "3484a3fb816e0859fd6e1cea078d76385ff50625"  # the head of the octokit job examples
QUEUED_RUN, EMPTY_RUN = 2202229600, 2202229700


def cancelled_run(run_id: int, created: str) -> dict:
    return {"id": run_id, "run_attempt": 1, "status": "completed", "conclusion": "cancelled", "name": "CI",
            "created_at": created, "run_started_at": created, "updated_at": CANCELLED_AT, "head_branch": "main",
            "head_sha": HEAD, "event": "pull_request"}


def job_of_cancelled_run(octokit, run_id: int, job_id: int, name: str, status: str = "completed") -> dict:
    """A job of a run cancelled before a runner took it, as GitHub lists it afterwards (`status`
    "queued": GitHub left it so, as it sometimes does)."""
    done = status == "completed"
    return dict(completed_job(octokit), id=job_id, run_id=run_id, name=name, status=status,
                conclusion="cancelled" if done else None, completed_at=CANCELLED_AT if done else None,
                steps=[], runner_id=None, runner_name=None, runner_group_id=None, runner_group_name=None)


def archive_of_cancelled_runs(tmp_path, octokit, queued_job: dict) -> tuple[Store, Lake]:
    """A pull request whose head's three runs were cancelled while pending, in an outage that lost
    job deliveries: RUN's job was heard `queued` but not its completion, QUEUED_RUN's two jobs and
    EMPTY_RUN (replaced in its concurrency group before it had any) not at all. Every run's
    `completed` (cancelled) arrived."""
    def run_hook(run_id, created):
        def edit(p):
            p["repository"] = octokit["api.github.com"]["workflow_job"][1]["repository"]
            p["workflow_run"].update(cancelled_run(run_id, created))
        return hook(octokit, "workflow_run", "completed", f"{CANCELLED_AT[:-1]}.{run_id % 1000:03d}Z", edit)

    def pr(p):
        p["pull_request"]["head"]["sha"] = HEAD

    def queued(p):
        p["workflow_job"].update(queued_job, status="queued", conclusion=None, completed_at=None)

    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-1.jsonl", [
        hook(octokit, "pull_request", "opened", "2021-09-13T02:20:00.000Z", pr),
        hook(octokit, "workflow_job", "queued", "2021-09-13T02:21:14.100Z", queued),
        *(run_hook(run_id, created) for run_id, created in (
            (RUN, "2021-09-13T02:21:00Z"), (QUEUED_RUN, "2021-09-13T02:21:00Z"), (EMPTY_RUN, "2021-09-13T02:23:00Z")))],
        gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    return archive, lake


def pull_request_jobs(lake: Lake) -> set[tuple]:
    """Dr. CI's view of the pull request's jobs: pr_jobs as the HUD and the comment read it."""
    from torchci_assets.derived.hud.health import build_pr_jobs

    build_pr_jobs(lake, DAY, REPO, now=NOW)
    rows = duckdb.sql(f"SELECT job_id, run_id, state, cancelled FROM '{lake.store.root}/pr_jobs/day={DAY}/*.parquet' "
                      "WHERE job_id IS NOT NULL").fetchall()
    return set(rows)


def test_a_run_cancelled_while_pending_is_asked_once_and_its_lost_jobs_show_cancelled(tmp_path, httpserver, octokit):
    queued_job = job_of_cancelled_run(octokit, RUN, JOB, "linters")
    lost = [job_of_cancelled_run(octokit, QUEUED_RUN, QUEUED_RUN * 10 + i, f"build ({i})") for i in (1, 2)]
    archive, lake = archive_of_cancelled_runs(tmp_path, octokit, queued_job)
    api = FakeActions(httpserver, repo=REPO)
    api.add_run(cancelled_run(RUN, "2021-09-13T02:21:00Z"), [queued_job])
    api.add_run(cancelled_run(QUEUED_RUN, "2021-09-13T02:21:00Z"), lost)
    api.add_run(cancelled_run(EMPTY_RUN, "2021-09-13T02:23:00Z"), [])

    report = repair_gaps(client(httpserver), archive, lake, NOW)
    assert (report.stale_jobs, report.jobless_runs, report.looked_up, report.failed) == (1, 2, 3, [])
    ingest_webhook_day(archive, lake, DAY, workers=1)
    cancelled = [(JOB, RUN), (QUEUED_RUN * 10 + 1, QUEUED_RUN), (QUEUED_RUN * 10 + 2, QUEUED_RUN)]
    assert jobs_in_lake(tmp_path) == sorted((job, run, "completed", "cancelled", "2021-09-13 02:24:00+00")
                                            for job, run in cancelled)
    # the HUD and Dr. CI: every lost job failed by cancellation (Dr. CI's CANCELLED), none missing
    assert pull_request_jobs(lake) == {(job, run, "failure", True) for job, run in cancelled}

    # GitHub has answered for the three completed runs, EMPTY_RUN with no job: no pass asks again
    api.requests.clear()
    for minutes in (5, 60, 600):
        assert repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=minutes)).looked_up == 0
    assert api.requests == []


def test_a_job_its_completed_run_still_lists_queued_is_asked_for_once(tmp_path, httpserver, octokit):
    """GitHub answers for a cancelled run with its job still `queued`: the answer of a completed run
    does not change, so the job is not looked up again on every pass of the next two days."""
    ghost = job_of_cancelled_run(octokit, RUN, JOB, "linters", status="queued")
    archive, lake = archive_of_cancelled_runs(tmp_path, octokit, ghost)
    api = FakeActions(httpserver, repo=REPO)
    api.add_run(cancelled_run(RUN, "2021-09-13T02:21:00Z"), [ghost])
    api.add_run(cancelled_run(QUEUED_RUN, "2021-09-13T02:21:00Z"), [])
    api.add_run(cancelled_run(EMPTY_RUN, "2021-09-13T02:23:00Z"), [])
    repair_gaps(client(httpserver), archive, lake, NOW)
    assert api.count(rf"/runs/{RUN}/attempts/1/jobs$") == 1
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert jobs_in_lake(tmp_path) == [(JOB, RUN, "queued", None, None)]
    api.requests.clear()
    assert repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=5)).looked_up == 0
    assert api.requests == []


FAILED_RUN = 2202229800


def failed_run() -> dict:
    return {"id": FAILED_RUN, "run_attempt": 1, "status": "completed", "conclusion": "failure", "name": "CI",
            "created_at": "2021-09-13T02:21:00Z", "run_started_at": "2021-09-13T02:21:00Z",
            "updated_at": "2021-09-13T02:28:00Z", "head_branch": "main", "head_sha": HEAD, "event": "pull_request"}


def test_a_failed_run_whose_failing_job_was_never_heard_of_is_asked_once(tmp_path, httpserver, octokit):
    """The run concluded `failure` and its one job heard of passed: the failing job's deliveries were
    all lost. Without it the pull request looked green; GitHub is asked once for the run's jobs."""
    passed = dict(completed_job(octokit), run_id=FAILED_RUN, name="linters", conclusion="success")
    failing = dict(completed_job(octokit), id=JOB + 1, run_id=FAILED_RUN, name="build", conclusion="failure")

    def run_done(p):
        p["repository"] = octokit["api.github.com"]["workflow_job"][1]["repository"]
        p["workflow_run"].update(failed_run())

    def pr(p):
        p["pull_request"]["head"]["sha"] = HEAD

    def job_done(p):
        p["workflow_job"].update(passed)

    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-1.jsonl", [
        hook(octokit, "pull_request", "opened", "2021-09-13T02:20:00.000Z", pr),
        hook(octokit, "workflow_job", "completed", "2021-09-13T02:27:41.000Z", job_done),
        hook(octokit, "workflow_run", "completed", "2021-09-13T02:28:01.000Z", run_done)], gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert pull_request_jobs(lake) == {(JOB, FAILED_RUN, "success", False)}  # green, though the run failed
    api = FakeActions(httpserver, repo=REPO)
    api.add_run(failed_run(), [passed, failing])

    report = repair_gaps(client(httpserver), archive, lake, NOW)
    assert (report.unexplained_runs, report.looked_up, report.unheard_jobs, report.failed) == (1, 1, 1, [])
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert pull_request_jobs(lake) == {(JOB, FAILED_RUN, "success", False), (JOB + 1, FAILED_RUN, "failure", False)}
    api.requests.clear()
    for minutes in (5, 600):  # answered: never asked again
        assert repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=minutes)).looked_up == 0
    assert api.requests == []


def test_a_failed_run_a_heard_job_explains_is_not_asked_for(tmp_path, httpserver, octokit):
    failing = dict(completed_job(octokit), run_id=FAILED_RUN, name="build", conclusion="failure")

    def run_done(p):
        p["repository"] = octokit["api.github.com"]["workflow_job"][1]["repository"]
        p["workflow_run"].update(failed_run())

    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-1.jsonl", [
        hook(octokit, "workflow_job", "completed", "2021-09-13T02:27:41.000Z", lambda p: p["workflow_job"].update(failing)),
        hook(octokit, "workflow_run", "completed", "2021-09-13T02:28:01.000Z", run_done)], gz=False)
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(Store(str(tmp_path / "archive")), lake, DAY, workers=1)
    assert find_gaps(lake, NOW).attempts == []


BAD_CREDENTIALS = {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}


def run_job(tmp_path, httpserver, monkeypatch, now: dt.datetime = NOW):
    """The scheduled job, run by Dagster in this process at `now`."""
    import jobs.gap_repair
    from jobs.gap_repair import gap_repair_job

    monkeypatch.setattr(jobs.gap_repair, "utcnow", lambda: now)
    return gap_repair_job.execute_in_process(raise_on_error=False, resources={
        "github": client(httpserver), "archive": ArchiveResource(uri=str(tmp_path / "archive")),
        "lake": LakeResource(uri=str(tmp_path / "lake"))})


def step_failure(result) -> str:
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failure.event_specific_data.error.message


def test_credentials_github_refuses_fail_the_run_and_keep_what_was_repaired(tmp_path, httpserver, octokit,
                                                                            monkeypatch):
    """A token revoked in the middle of a pass: the run attempt looked up before is written, the
    run fails saying which credentials to fix, and no further lookup is sent (each would be refused)."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.fail(rf"/runs/{JOBLESS_RUN}/", *[reply(401, BAD_CREDENTIALS)] * 5)
    result = run_job(tmp_path, httpserver, monkeypatch)
    assert not result.success
    message = step_failure(result)
    assert "GitHub refused the credentials" in message and "GITHUB_TOKEN" in message and "Bad credentials" in message
    assert "ghp_FAKE" not in message
    assert api.count(rf"/runs/{JOBLESS_RUN}/") == 1
    ingest_webhook_day(archive, lake, DAY, workers=1)
    assert jobs_in_lake(tmp_path) == [(JOB, RUN, "completed", "failure", "2021-09-13 02:27:40+00")]


def test_a_repository_the_credentials_cannot_read_fails_the_run(tmp_path, httpserver, octokit, monkeypatch):
    archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.fail(r"^/repos/", *[reply(403, {"message": "Resource not accessible by personal access token"})] * 5)
    result = run_job(tmp_path, httpserver, monkeypatch)
    assert not result.success
    message = step_failure(result)
    assert f"refused to show {REPO}" in message and "Actions: read" in message
    assert "1 more run attempt not asked" in message
    assert len(api.requests) == 1


def test_a_rate_limit_among_answers_is_a_warning_and_no_answer_at_all_fails(tmp_path, httpserver, octokit,
                                                                            monkeypatch):
    """A rate limit is no refusal: the pass that got other answers succeeds, the lookup it missed is
    asked again on the next pass. A pass that got no answer at all repaired nothing: it fails."""
    archive, lake = archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    exhausted = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW.timestamp()) + 10**9)}
    limited = reply(403, {"message": "API rate limit exceeded for user ID 1."}, exhausted)
    api.fail(rf"/runs/{JOBLESS_RUN}/", limited)
    result = run_job(tmp_path, httpserver, monkeypatch)
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert output.event_specific_data.metadata["failed"].value == 1
    assert output.event_specific_data.metadata["looked_up"].value == 1
    ingest_webhook_day(archive, lake, DAY, workers=1)

    api.fail(r"^/repos/", *[reply(404, {"message": "Not Found"})] * 5)  # JOBLESS_RUN's run attempt alone is left
    result = run_job(tmp_path, httpserver, monkeypatch)
    assert not result.success
    assert "GitHub answered no lookup of this pass (1 failed" in step_failure(result)


def test_runs_deleted_on_github_are_no_failure_and_the_pass_succeeds(tmp_path, httpserver, octokit, monkeypatch):
    """Workflow runs can be deleted (a run that printed a secret, a clean-up): GitHub answers 404 for
    them while the repository answers. That is GitHub's answer, not a lookup that failed: the pass
    succeeds, counting them (suspected: a first 404 is confirmed later, tests/test_gap_repair_gone.py),
    instead of failing as if GitHub could not be reached."""
    archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.runs.clear()
    result = run_job(tmp_path, httpserver, monkeypatch)
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    meta = output.event_specific_data.metadata
    assert (meta["failed"].value, meta["looked_up"].value, meta["runs_suspected_gone"].value) == (0, 0, 2)
    assert api.count(r"/runs/\d+/attempts/1$") == 2


def test_an_unreadable_note_of_deleted_runs_costs_the_lookups_again_not_the_pass(tmp_path, httpserver, octokit,
                                                                                monkeypatch):
    """The notes of deleted runs only save requests: torn or edited by hand, the pass asks about the
    runs again, succeeds and writes the notes anew."""
    archive_with_lost_completion(tmp_path, octokit)
    api = fake_api(httpserver, octokit, completed_job(octokit))
    api.runs.clear()
    api.jobs.clear()
    run_job(tmp_path, httpserver, monkeypatch)
    store = Store(str(tmp_path / "archive"))
    for torn in (b'{"runs": {"a#1/1": "not a time"}}', b'{"runs": ', b'[1, 2]'):
        store.write_bytes(gone.PATH, torn)
        asked = api.count(r"/runs/\d+/attempts/1")
        result = run_job(tmp_path, httpserver, monkeypatch, now=NOW + dt.timedelta(minutes=5))
        assert result.success
        assert api.count(r"/runs/\d+/attempts/1") == asked + 2
        assert len(gone.load(store).suspected) == 2


RERUN = 2202229800


def test_a_re_run_attempt_without_jobs_is_asked_about_by_its_own_age_not_the_first_attempts(
        tmp_path, httpserver, octokit):
    """A re-run's `created_at` is its first attempt's, hours ago: its second attempt, requested two
    minutes ago and still waiting for its jobs, is no gap before the limit has passed since it was
    requested, as a new run's attempt is not."""
    def rerun(p):
        jobless_run(octokit, p)
        p["workflow_run"].update(id=RERUN, run_attempt=2, created_at="2021-09-13T00:30:00Z",
                                 updated_at="2021-09-13T03:28:00Z", run_started_at="2021-09-13T03:28:00Z")

    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks.jsonl",
                [hook(octokit, "workflow_run", "requested", "2021-09-13T03:28:01.000Z", rerun)], gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    api = FakeActions(httpserver, repo=REPO)
    api.add_run({"id": RERUN, "run_attempt": 2, "status": "queued", "conclusion": None, "name": "CI",
                 "created_at": "2021-09-13T00:30:00Z", "run_started_at": "2021-09-13T03:28:00Z",
                 "updated_at": "2021-09-13T03:28:00Z", "head_branch": "main"}, [])
    for minutes in (0, 5, 25):
        report = repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=minutes))
        assert (report.jobless_runs, api.count(rf"/runs/{RERUN}/attempts/2")) == (0, 0)
    report = repair_gaps(client(httpserver), archive, lake, NOW + dt.timedelta(minutes=30))
    assert (report.jobless_runs, report.looked_up) == (1, 1)
    assert api.count(rf"/runs/{RERUN}/attempts/2") >= 1


def test_two_overlapping_passes_keep_each_others_notes_of_deleted_runs(tmp_path):
    """A pass reads the notes at its start and writes them at its end, minutes later on a busy day:
    a pass started meanwhile (the schedule does not wait) must not lose the notes the other wrote."""
    store = Store(str(tmp_path / "archive"))
    old = (REPO, 1, 1)
    first = gone.load(store)
    first.add_run(old, NOW - dt.timedelta(days=5))  # older than any pass reads: forgotten below
    gone.save(store, first)
    slow, quick = gone.load(store), gone.load(store)
    quick.add_run((REPO, 2, 1), NOW)
    quick.set_pulls(REPO, [7])
    gone.save(store, quick)
    slow.add_run((REPO, 3, 1), NOW)
    slow.set_pulls("other/repo", [9])
    slow.forget_runs_before(NOW - dt.timedelta(days=4))
    gone.save(store, slow)
    notes = gone.load(store)
    assert sorted(notes.runs) == [gone.Gone.run_key((REPO, n, 1)) for n in (2, 3)]
    assert notes.pulls == {REPO: [7], "other/repo": [9]}
