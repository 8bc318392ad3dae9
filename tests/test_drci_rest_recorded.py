"""A job Dr. CI read from GitHub's REST API (its webhooks lost) is recorded in the archive, so the
HUD's pull-request page, built from `pr_jobs`, says what the comment below it says.

The lake is made by ingesting real webhook payloads (@octokit/webhooks-examples, tests/data/octokit):
the `pull_request` opened example, and a `workflow_job` example moved onto that pull request's head,
whose `completed` delivery never came. GitHub's REST API is a real HTTP server on 127.0.0.1
(fake_github_pulls.py) answering with GitHub's own job and run examples. What Dr. CI learned is
taken by the same ingest the intra-day refresh runs, as gap repair's records are.
"""

import copy
import datetime as dt
import gzip
import re
import shutil

import duckdb
import pyarrow as pa

from conftest import write_lines
from fake_github_pulls import FakePullRequests
from hud_lake import schema
from test_drci import gh
from test_drci_awaiting import envelope
from test_hud_drci_verdicts import page_kinds
from test_hud_pr_list import pr_row
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.classify import AWAITING_RESULTS, INFRA, NEW
from torchci_assets.derived.hud.health import build_pr_jobs
from torchci_assets.derived.site.site import publish_site
from torchci_assets.ingest.webhooks import ingest_webhook_day

DAY = "2019-05-15"  # the pull_request example's day
NOW = dt.datetime(2019, 5, 15, 16, 0, tzinfo=dt.timezone.utc)  # the job started 6 hours ago: stuck
REPO = "Codertocat/Hello-World"
RUN = 2202229078  # the workflow_job example's run
JOB = 289782451  # its id
NAME = "linux-jammy / test (default, 1, 1, linux.4xlarge)"
RECENTLY = "2019-05-15T15:30:00Z"  # the job's end, when its test reports may still land: a new failure


def opened_and_running(octokit) -> tuple[dict, dict]:
    """The pull request opened, and its test job's `in_progress` delivery (the `completed` one was lost)."""
    hooks = octokit["api.github.com"]
    opened = copy.deepcopy(next(p for p in hooks["pull_request"] if p["action"] == "opened"))
    job = copy.deepcopy(next(p for p in hooks["workflow_job"]
                             if p["action"] == "in_progress" and p["repository"]["full_name"] == REPO))
    job["repository"] = opened["repository"]
    job["workflow_job"].update(name=NAME, workflow_name="pull", head_sha=opened["pull_request"]["head"]["sha"],
                               head_branch=opened["pull_request"]["head"]["ref"],
                               created_at="2019-05-15T10:00:00Z", started_at="2019-05-15T10:00:05Z")
    return opened, job


def archive_hooks(tmp_path, name: str, hooks: list[dict]) -> None:
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / f"{name}.jsonl", hooks, gz=False)


def refresh(tmp_path, now: dt.datetime = NOW) -> Lake:
    """What the intra-day refresh does once files landed: the day ingested again, its pr_jobs built."""
    lake = Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(Store(str(tmp_path / "archive")), lake, DAY, workers=1)
    build_pr_jobs(lake, DAY, REPO, now=now)
    return lake


def github_shows(fake: FakePullRequests, opened: dict, attempt: int, job_id: int, run: dict | None = None,
                 **job) -> None:
    """GitHub's REST answer for the head: its `pull` run, at `attempt`, whose job `job_id` failed. The run
    completed with the job, unless `run` says otherwise (its status, conclusion, updated_at)."""
    head = opened["pull_request"]["head"]
    ended = {"status": "completed", "conclusion": "failure",
             "updated_at": job.get("completed_at", "2019-05-15T11:00:00Z")}
    fake.runs[head["sha"]] = [{"id": RUN, "name": "pull", "workflow_id": 161335, "head_sha": head["sha"],
                               "head_branch": head["ref"], "run_attempt": attempt, "repository": opened["repository"],
                               **ended, **(run or {})}]
    fake.jobs[RUN] = [{"id": job_id, "run_id": RUN, "run_attempt": attempt, "workflow_name": "pull", "name": NAME,
                       "head_sha": head["sha"], "head_branch": head["ref"], "status": "completed",
                       "conclusion": "failure", "created_at": "2019-05-15T10:00:00Z",
                       "started_at": "2019-05-15T10:00:05Z", "completed_at": "2019-05-15T11:00:00Z", **job}]


def pr_jobs_states(tmp_path) -> list[tuple]:
    return duckdb.sql(f"SELECT job_id, state FROM '{tmp_path}/lake/pr_jobs/day={DAY}/*.parquet' "
                      "WHERE job_id IS NOT NULL ORDER BY job_id").fetchall()


def jobs_in_lake(tmp_path) -> list[tuple]:
    return duckdb.sql(f"SELECT id, run_attempt, status, conclusion, runner_name FROM "
                      f"'{tmp_path}/lake/workflow_job/day={DAY}/*.parquet' ORDER BY id").fetchall()


def test_a_failure_dr_ci_read_from_the_rest_api_reaches_pr_jobs_and_is_read_once(tmp_path, httpserver, octokit):
    opened, job = opened_and_running(octokit)
    archive_hooks(tmp_path, "hooks-1", [envelope("pull_request", "2019-05-15T09:50:00Z", opened),
                                        envelope("workflow_job", "2019-05-15T10:00:06Z", job)])
    lake = refresh(tmp_path)
    assert pr_jobs_states(tmp_path) == [(JOB, "pending")]
    fake = FakePullRequests(httpserver, REPO)
    github_shows(fake, opened, 1, JOB, completed_at=RECENTLY)
    archive = Store(str(tmp_path / "archive"))
    report = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW, archive=archive)
    [row] = report.rows
    assert (report.refreshed_heads, row["new"], row["pending"]) == (1, 1, 0)
    assert "state read from the REST API" in row["body"]

    lake = refresh(tmp_path)
    assert pr_jobs_states(tmp_path) == [(JOB, "failure")]  # was pending, for as long as the webhook stayed lost
    publish_site(lake, Store(str(tmp_path / "out")), DAY, REPO)
    assert page_kinds(tmp_path, 2) == {JOB: "new"}
    assert pr_row(tmp_path, 2)["new"] == "1" and pr_row(tmp_path, 2).get("pen", "") == ""

    # the head is no longer stale: the next comment asks GitHub's Actions API nothing, and lists the
    # job failing from the lake
    fake.requests.clear()
    again = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW + dt.timedelta(minutes=2), archive=archive)
    assert again.refresh_requests == 0 and fake.count("GET", "/actions/") == 0
    [row] = again.rows
    assert [j["job_id"] for j in row["jobs"]] == [JOB] and row["pending"] == 0
    assert "state read from the REST API" not in row["body"]


def test_a_rerun_whose_deliveries_were_all_lost_is_not_pending_on_the_page(tmp_path, httpserver, octokit):
    """The run was re-run and every delivery of its second attempt lost: GitHub lists the second
    attempt's job (another id), which failed. The page showed the first attempt's job pending."""
    opened, job = opened_and_running(octokit)
    archive_hooks(tmp_path, "hooks-1", [envelope("pull_request", "2019-05-15T09:50:00Z", opened),
                                        envelope("workflow_job", "2019-05-15T10:00:06Z", job)])
    lake = refresh(tmp_path)
    fake = FakePullRequests(httpserver, REPO)
    github_shows(fake, opened, 2, JOB + 1, created_at="2019-05-15T10:30:00Z", started_at="2019-05-15T10:30:05Z",
                 completed_at=RECENTLY)
    [row] = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW, archive=Store(str(tmp_path / "archive"))).rows
    assert [j["job_id"] for j in row["jobs"]] == [JOB + 1] and row["new"] == 1

    lake = refresh(tmp_path)
    publish_site(lake, Store(str(tmp_path / "out")), DAY, REPO)
    assert page_kinds(tmp_path, 2) == {JOB + 1: "new"}
    assert pr_row(tmp_path, 2).get("pen", "") == ""
    page = (tmp_path / "out" / "hud" / "pr" / "2.html").read_text()
    assert not re.search(rf"/job/{JOB}\"", page)  # the first attempt's job, replaced by the second's


def test_a_record_read_twice_counts_once_and_the_late_webhook_wins(tmp_path, httpserver, octokit):
    """Two comments written before the refresh ingests read the same answer, and gap repair wrote the
    same records: one row. GitHub's own
    `completed` delivery, arriving after all (received after the moment the REST record is filed at),
    is the job's row (its runner), still one row."""
    opened, job = opened_and_running(octokit)
    archive_hooks(tmp_path, "hooks-1", [envelope("pull_request", "2019-05-15T09:50:00Z", opened),
                                        envelope("workflow_job", "2019-05-15T10:00:06Z", job)])
    lake = refresh(tmp_path)
    fake = FakePullRequests(httpserver, REPO)
    github_shows(fake, opened, 1, JOB, runner_name="read from REST")
    archive = Store(str(tmp_path / "archive"))
    for minutes in (0, 2):
        build_comments(lake, gh(httpserver), DAY, REPO, now=NOW + dt.timedelta(minutes=minutes), archive=archive)
    folder = tmp_path / "archive" / "webhooks" / f"day={DAY}"
    [written] = folder.glob("rest-drci-*.jsonl.gz")  # the same answer, the same file
    shutil.copy(written, folder / "rest-repair-20190515T160500.jsonl.gz")  # and the same records by gap repair
    lake = refresh(tmp_path)
    assert jobs_in_lake(tmp_path) == [(JOB, 1, "completed", "failure", "read from REST")]
    events = duckdb.sql(f"SELECT count(*) FROM '{tmp_path}/lake/webhook_events/day={DAY}/*.parquet' "
                        f"WHERE delivery_id = 'rest-workflow_job-{JOB}-1-completed'").fetchall()
    assert events == [(1,)]

    completed = copy.deepcopy(job)
    completed["action"] = "completed"
    completed["workflow_job"].update(status="completed", conclusion="failure", completed_at="2019-05-15T11:00:00Z",
                                     runner_name="GitHub Actions 5")
    archive_hooks(tmp_path, "hooks-2", [envelope("workflow_job", "2019-05-15T11:00:01Z", completed)])
    lake = refresh(tmp_path)
    assert jobs_in_lake(tmp_path) == [(JOB, 1, "completed", "failure", "GitHub Actions 5")]
    assert pr_jobs_states(tmp_path) == [(JOB, "failure")]


RUNNING = {"status": "in_progress", "conclusion": None, "updated_at": "2019-05-15T10:00:00Z"}


def run_delivery(octokit, opened: dict, **run) -> dict:
    """A `workflow_run` delivery of the job's run (GitHub's example moved onto it): `run` sets its status,
    conclusion and updated_at."""
    action = "completed" if run["status"] == "completed" else "in_progress"
    hook = copy.deepcopy(next(p for p in octokit["api.github.com"]["workflow_run"] if p["action"] == "completed"))
    hook["action"] = action
    head = opened["pull_request"]["head"]
    hook["repository"] = opened["repository"]
    hook["workflow_run"].update(id=RUN, run_attempt=1, name="pull", event="pull_request", head_sha=head["sha"],
                                head_branch=head["ref"], created_at="2019-05-15T09:59:00Z", **run)
    return envelope("workflow_run", hook["workflow_run"]["updated_at"], hook)


def running_shard(job: dict) -> dict:
    """Another shard of the job's run, started at noon and still running."""
    shard = copy.deepcopy(job)
    shard["workflow_job"].update(id=JOB + 7, name=NAME.replace("1, 1,", "2, 2,"), created_at="2019-05-15T12:00:00Z",
                                 started_at="2019-05-15T12:00:05Z")
    return shard


def verdict_read_then_from_the_lake(tmp_path, httpserver, octokit, completed_at: str, run: dict | None = None,
                                    heard: tuple[dict, ...] = (), shard: bool = False,
                                    reports: tuple[str | None] = ()) -> list[tuple[str, str]]:
    """(class, the job's line of the body) of the test job as Dr. CI first reads it from the REST API (its
    `completed` webhook lost), then at the same instant from the lake once its `rest` record is ingested.
    `run`: the state of the job's workflow run as GitHub answers (none: completed with the job); `heard`:
    the run's deliveries the lake has, in the order they arrived (none: the lake never heard of the run);
    `shard`: another shard of the run is still running; `reports`: the job's test reports landed, with this
    infrastructure reason (None: none) in `test_jobs`."""
    opened, job = opened_and_running(octokit)
    others = [envelope("workflow_job", "2019-05-15T12:00:06Z", running_shard(job))] if shard else []
    archive_hooks(tmp_path, "hooks-1", [envelope("pull_request", "2019-05-15T09:50:00Z", opened),
                                        envelope("workflow_job", "2019-05-15T10:00:06Z", job), *others,
                                        *(run_delivery(octokit, opened, **state) for state in heard)])
    lake = refresh(tmp_path)
    for reason in reports:
        lake.write("test_jobs", DAY, pa.Table.from_pylist(
            [{"job_id": JOB, "workflow_run_attempt": 1, "infra_suspect": reason is not None, "infra_reason": reason}],
            schema=schema("test_jobs")))
    fake = FakePullRequests(httpserver, REPO)
    github_shows(fake, opened, 1, JOB, run=run, completed_at=completed_at)
    if shard:
        fake.jobs[RUN].append({**fake.jobs[RUN][0], **running_shard(job)["workflow_job"], "status": "in_progress",
                               "conclusion": None, "completed_at": None})
    archive, said = Store(str(tmp_path / "archive")), []
    for refreshed in (1, 0):
        report = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW, archive=archive)
        [row] = report.rows
        [v] = report.verdicts[2]
        assert row["refreshed_jobs"] == refreshed
        said.append((v.cls, next(line for line in row["body"].splitlines() if f"/job/{JOB})" in line)))
        lake = refresh(tmp_path)
    return said


def test_a_test_job_without_reports_read_from_the_rest_api_is_what_the_lake_calls_it_next(tmp_path, httpserver,
                                                                                         octokit):
    """The job ended five hours ago and no test report of it ever landed: infrastructure, whether its state
    came from GitHub's REST API or, a refresh later, from the lake (not NEW first, then INFRA: told it is
    theirs, then told to retry). Each line says where its state came from."""
    [(read, read_line), (lake, lake_line)] = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit,
                                                                             "2019-05-15T11:00:00Z")
    assert (read, lake) == (INFRA, INFRA)
    assert "(no test results)" in read_line and "(no test results)" in lake_line
    assert "state read from the REST API" in read_line and "REST" not in lake_line


def test_a_test_job_that_just_ended_without_reports_is_new_until_they_are_due(tmp_path, httpserver, octokit):
    """Ten minutes after the job ended its reports may still land: no path calls it an infrastructure failure
    yet (the lake's pr_jobs already says "no test results"), and both say what is awaited."""
    [(read, read_line), (lake, lake_line)] = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit,
                                                                             "2019-05-15T15:50:00Z")
    assert (read, lake) == (NEW, NEW)
    assert duckdb.sql(f"SELECT failure_class, infra_reason FROM '{tmp_path}/lake/pr_jobs/day={DAY}/*.parquet' "
                      f"WHERE job_id = {JOB}").fetchall() == [("infra", "no-test-results")]
    assert f"({AWAITING_RESULTS})" in read_line and f"({AWAITING_RESULTS})" in lake_line


ENDED = "2019-05-15T11:00:00Z"  # the job's end, five hours before NOW: overdue by the job's end


def test_a_test_job_without_reports_in_a_run_still_running_is_new_until_the_run_ends(tmp_path, httpserver, octokit):
    """PyTorch uploads a run's test reports once the whole run completed (upload-test-stats runs on the
    run's `completed`): a shard that failed five hours ago while another shard still runs has no report
    yet, and neither path calls it an infrastructure failure. It was INFRA ("no test results") on both.
    The HUD's page of the pull request says what the comment says (`pr_jobs` alone says "no test results")."""
    [(read, read_line), (lake, lake_line)] = verdict_read_then_from_the_lake(
        tmp_path, httpserver, octokit, ENDED, RUNNING, (RUNNING,), shard=True)
    assert (read, lake) == (NEW, NEW)
    assert f"({AWAITING_RESULTS})" in read_line and f"({AWAITING_RESULTS})" in lake_line
    publish_site(Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out")), DAY, REPO)
    assert page_kinds(tmp_path, 2) == {JOB: "new", JOB + 7: "pending"}


def test_a_test_job_without_reports_is_new_until_they_are_due_after_its_run_ended(tmp_path, httpserver, octokit):
    """The run completed half an hour ago: its reports may still be on their way, whatever the job's end.
    Its deliveries came out of order: the lake keeps it completed."""
    ended = {"status": "completed", "conclusion": "failure", "updated_at": "2019-05-15T15:30:00Z"}
    said = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit, ENDED, ended, (ended, RUNNING))
    assert [cls for cls, _ in said] == [NEW, NEW]


def test_a_test_job_without_reports_is_infra_once_due_after_its_run_ended(tmp_path, httpserver, octokit):
    """The run completed two hours ago and no report landed: infrastructure, on both paths."""
    ended = {"status": "completed", "conclusion": "failure", "updated_at": "2019-05-15T14:00:00Z"}
    said = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit, ENDED, ended, (RUNNING, ended))
    assert [cls for cls, _ in said] == [INFRA, INFRA]
    assert all("(no test results)" in line for _, line in said)


def test_a_run_whose_completion_was_lost_ends_with_its_last_job(tmp_path, httpserver, octokit):
    """The lake heard the run start, never end, and none of its jobs runs any more: its reports are due after
    its last job's end, not never."""
    said = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit, ENDED, heard=(RUNNING,))
    assert [cls for cls, _ in said] == [INFRA, INFRA]


def test_a_test_job_whose_reports_landed_suspect_is_infra_for_that_reason_on_both_paths(tmp_path, httpserver,
                                                                                      octokit):
    """Its reports landed, most of its tests failing with one message: `test_jobs` marks the job suspect, and
    `pr_jobs` calls it infrastructure for that reason. Read from GitHub's REST API it was NEW (only whether
    reports landed was looked up), then INFRA a refresh later from the lake."""
    said = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit, ENDED, reports=("shared-message",))
    assert [cls for cls, _ in said] == [INFRA, INFRA]
    assert all("(many tests failed with one message)" in line for _, line in said), said


def test_a_test_job_whose_reports_landed_unsuspected_is_not_infra_on_either_path(tmp_path, httpserver, octokit):
    said = verdict_read_then_from_the_lake(tmp_path, httpserver, octokit, ENDED, reports=(None,))
    assert [cls for cls, _ in said] == [NEW, NEW]


def test_a_head_read_again_is_matched_with_its_finished_jobs_too(tmp_path, httpserver, octokit):
    """Dr. CI loads a head's finished jobs without a row each (at PyTorch's scale, most of a day's rows).
    A head read again from the REST API gets them back first: GitHub's listing of a green job the lake
    has is then no change and no record; only the stuck job is."""
    opened, job = opened_and_running(octokit)
    green = copy.deepcopy(job)
    green["action"] = "completed"
    green["workflow_job"].update(id=JOB + 1, name="linux-jammy / build", status="completed", conclusion="success",
                                 completed_at="2019-05-15T10:30:00Z")
    archive_hooks(tmp_path, "hooks-1", [envelope("pull_request", "2019-05-15T09:50:00Z", opened),
                                        envelope("workflow_job", "2019-05-15T10:00:06Z", job),
                                        envelope("workflow_job", "2019-05-15T10:30:01Z", green)])
    lake = refresh(tmp_path)
    assert pr_jobs_states(tmp_path) == [(JOB, "pending"), (JOB + 1, "success")]
    fake = FakePullRequests(httpserver, REPO)
    github_shows(fake, opened, 1, JOB, completed_at=RECENTLY)
    fake.jobs[RUN].append({**fake.jobs[RUN][0], "id": JOB + 1, "name": "linux-jammy / build", "conclusion": "success",
                           "completed_at": "2019-05-15T10:30:00Z"})
    archive = Store(str(tmp_path / "archive"))
    report = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW, archive=archive)
    [row] = report.rows
    assert (report.refreshed_heads, row["refreshed_jobs"], row["new"], row["pending"]) == (1, 1, 1, 0)
    recorded = [p for p in (tmp_path / "archive" / "webhooks").rglob("*") if p.is_file() and "hooks-1" not in p.name]
    texts = [(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()).decode() for p in recorded]
    assert any(f'"id": {JOB}' in t or f'"id":{JOB}' in t for t in texts), [p.name for p in recorded]
    assert not any(str(JOB + 1) in t for t in texts)
