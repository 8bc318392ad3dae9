"""`torchci backfill` against a fake GitHub Actions API on 127.0.0.1 (tests/fake_github_actions.py),
its bodies GitHub's OpenAPI examples with a simulated repository's values laid over them."""

import datetime as dt
import gzip
import zipfile
from pathlib import Path

import duckdb
import orjson
import pytest

from fake_github_actions import EXAMPLES, FakeActions, from_world, reply, secondary_limit
from resources.github import GitHubError, GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.backfill import history, shapes
from torchci_assets.backfill.files import Part
from torchci_assets.backfill.history import BackfillOptions, backfill
from torchci_assets.ingest.reports import ingest_test_run_day
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options, World

REPO = "pytorch/pytorch"
WEEK = [dt.date(2026, 11, 2) + dt.timedelta(days=i) for i in range(7)]
TODAY = dt.date(2026, 11, 20)
# The webhooks' own artefacts (redeliveries, out-of-order and old-version payloads, torn lines)
# are off: the REST API has none of them, and the ingest's handling of each is tested elsewhere.
SIM = Options(seed=3, commits_per_day=4, prs_per_day=3, configs=2, test_files=6, tests_per_file=5, backends=0,
              duplicate_rate=0, out_of_order_rate=0, old_payload_rate=0, torn_lines_per_day=0,
              time_regression_rate=0)


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def client(httpserver, **kw) -> GitHubResource:
    gh = GitHubResource(api_url=httpserver.url_for("").rstrip("/"), token="ghp_FAKE0123456789", **kw)
    gh._sleep = Sleeps()
    return gh


def files(root: Path) -> dict[str, bytes]:
    """Every archive file a backfill wrote (the cursor aside), by path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not str(p.relative_to(root)).startswith("backfill/")}


def lines(archive: dict[str, bytes]) -> list[dict]:
    return [orjson.loads(x) for k, v in archive.items() if k.startswith("webhooks/")
            for x in gzip.decompress(v).splitlines()]


@pytest.fixture(scope="module")
def world_api_days():
    return World(SIM), WEEK[:2]


def with_branches(api: FakeActions, *names: str) -> FakeActions:
    """`names` (default main) as branches of the repository, each headed by a commit from before the
    days read: GitHub answers 404 for a branch it does not have, and a backfill stops there."""
    for name in names or ("main",):
        api.add_commit(name, "f" * 40, "e" * 40, "an older head", "2026-10-01T00:00:00Z", "alice")
    return api


def simulated_api(httpserver, days, **kw) -> FakeActions:
    api = FakeActions(httpserver)
    from_world(api, World(SIM), days, **kw)
    return api


# ---- the equivalence: a backfilled week gives the lake its webhooks give ------------------------

def _ingest(archive: Path, lake: Path, days: list[dt.date]) -> None:
    for d in days:
        ingest_webhook_day(Store(str(archive)), Lake.at(str(lake)), d.isoformat(), workers=1)
        ingest_test_run_day(Store(str(archive)), Lake.at(str(lake)), d.isoformat())


def _rows(con, lake: Path, table: str, day: dt.date, exclude: list[str], where: str) -> str:
    cols = f"* EXCLUDE ({', '.join(exclude)})" if exclude else "*"
    return (f"SELECT {cols} FROM read_parquet('{lake}/{table}/day={day}/*.parquet', hive_partitioning=false) "
            f"WHERE {where}")


# The window's first day (its webhooks also end runs created the day before, which the backfill
# does not read), a day inside it and its last day: a longer window only repeats the day inside.
COMPARED = WEEK[:3]


def test_backfilled_days_give_the_tables_their_webhooks_give(tmp_path, httpserver):
    """Three simulated days: once as their webhook archive, once read back through the fake REST API
    by `backfill`; both ingested, the typed tables agree row for row on every day. Compared are
    every column but the arrival instant (a webhook lands a second after the event, a REST record at
    it) and a push's delivery id; the runs are those created in the window (the webhook archive's
    first day also holds the end of runs created the day before, which a backfill from that day
    does not read), and the pushes to main (the viable/strict branch is not backfilled)."""
    generate_archive(tmp_path / "hooks", COMPARED, SIM, log=lambda s: None)
    api = simulated_api(httpserver, COMPARED)
    progress = backfill(client(httpserver), Store(str(tmp_path / "rest")),
                        BackfillOptions(REPO, COMPARED[0], COMPARED[-1], prs=True), log=lambda s: None, today=TODAY)
    n = len(COMPARED)  # some of everything every day: runs, reports, logs
    assert progress.runs > 21 * n and progress.reports > 42 * n and progress.logs > 7 * n, progress
    assert progress.reports_expired == progress.logs_missing == 0
    _ingest(tmp_path / "hooks", tmp_path / "lake-hooks", COMPARED)
    _ingest(tmp_path / "rest", tmp_path / "lake-rest", COMPARED)
    in_week = f"run_id >= {min(api.runs)}"
    checks = [("workflow_job", ["received_at"], in_week), ("workflow_run", [], f"id >= {min(api.runs)}"),
              ("push", ["received_at", "delivery_id"], "ref = 'refs/heads/main'"),
              ("test_run", [], f"workflow_id >= {min(api.runs)}")]
    con = duckdb.connect()
    compared = {}
    for table, exclude, where in checks:
        for day in COMPARED:
            hooks = _rows(con, tmp_path / "lake-hooks", table, day, exclude, where)
            rest = _rows(con, tmp_path / "lake-rest", table, day, exclude, where)
            only_hooks = con.sql(f"{hooks} EXCEPT ALL {rest}").fetchall()
            only_rest = con.sql(f"{rest} EXCEPT ALL {hooks}").fetchall()
            assert (only_hooks, only_rest) == ([], []), f"{table} day={day}"
            compared[table] = compared.get(table, 0) + con.sql(f"SELECT count(*) FROM ({rest})").fetchall()[0][0]
    assert compared["workflow_job"] > 114 * n and compared["test_run"] > 142 * n
    assert compared["push"] == SIM.commits_per_day * n
    # the REST records say where they came from; the webhook archive's do not
    events = con.sql(f"SELECT delivery_id FROM read_parquet('{tmp_path}/lake-rest/webhook_events/*/*.parquet')").fetchall()
    assert events and all(d.startswith("rest-") for (d,) in events)
    assert all(line["source"] == "rest" for line in lines(files(tmp_path / "rest")))


# ---- the REST API's awkward parts ---------------------------------------------------------------

def test_pages_are_followed_through_link_headers(tmp_path, httpserver):
    api = simulated_api(httpserver, WEEK[:1], reports=False, logs=False)
    backfill(client(httpserver), Store(str(tmp_path / "one-page")), BackfillOptions(REPO, WEEK[0], WEEK[0]),
             log=lambda s: None, today=TODAY)
    api.requests.clear()
    backfill(client(httpserver), Store(str(tmp_path / "paged")),
             BackfillOptions(REPO, WEEK[0], WEEK[0], page_size=3), log=lambda s: None, today=TODAY)
    assert any(p.endswith("/actions/runs") and a.get("page") == "2" for p, a in api.requests)
    assert any(p.endswith("/jobs") and a.get("page") == "2" for p, a in api.requests)
    assert files(tmp_path / "paged") == files(tmp_path / "one-page")


def test_a_day_github_would_cut_at_its_list_cap_is_read_whole_in_smaller_windows(tmp_path, httpserver, monkeypatch):
    api = simulated_api(httpserver, WEEK[:1], reports=False, logs=False)
    runs = backfill(client(httpserver), Store(str(tmp_path / "whole")), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                    log=lambda s: None, today=TODAY).runs
    assert runs > 8
    api.list_cap = 4  # GitHub serves 1,000 of a filtered list; here 4, so the day must be split
    monkeypatch.setattr("torchci_assets.backfill.history.LIST_CAP", 4)
    api.requests.clear()
    progress = backfill(client(httpserver), Store(str(tmp_path / "split")), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                        log=lambda s: None, today=TODAY)
    assert progress.runs == runs and progress.runs_cut == 0
    assert files(tmp_path / "split") == files(tmp_path / "whole")
    assert sum(p.endswith("/actions/runs") for p, _ in api.requests) > 3


def test_a_second_holding_more_runs_than_github_lists_is_counted_and_named(tmp_path, httpserver, monkeypatch):
    api = with_branches(FakeActions(httpserver))
    for i in range(6):  # six runs created in the same second: no `created` filter tells them apart
        run, jobs = _attempt_objects(1, "success")
        run["id"], jobs[0]["id"], jobs[0]["run_id"] = 600 + i, 9100 + i, 600 + i
        api.add_run(run, jobs)
    api.list_cap = 4
    monkeypatch.setattr("torchci_assets.backfill.history.LIST_CAP", 4)
    said: list[str] = []
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                        log=said.append, today=TODAY)
    assert (progress.runs, progress.runs_cut) == (4, 2)
    assert any("only 4 of the 6 runs created at 2026-11-02T11:00:00Z; 2 are not read" in s for s in said)
    assert "2 GitHub would not list" in said[-1]


def _attempt_objects(attempt: int, conclusion: str) -> tuple[dict, list[dict]]:
    t0 = dt.datetime(2026, 11, 2, 10, tzinfo=dt.timezone.utc) + dt.timedelta(hours=attempt)
    iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    run = {"id": 555, "name": "pull", "run_attempt": attempt, "head_branch": "main", "event": "push",
           "status": "completed", "conclusion": conclusion, "created_at": iso(t0), "run_started_at": iso(t0),
           "updated_at": iso(t0 + dt.timedelta(minutes=30))}
    job = {"id": 9000 + attempt, "run_id": 555, "run_attempt": attempt, "workflow_name": "pull",
           "name": "linux-jammy-py3.10-gcc11 / test (default, 1, 1, linux.2xlarge)", "status": "completed",
           "conclusion": conclusion, "created_at": iso(t0), "started_at": iso(t0 + dt.timedelta(minutes=2)),
           "completed_at": iso(t0 + dt.timedelta(minutes=29)), "labels": ["linux.2xlarge"], "head_branch": "main"}
    return run, [job]


def _artifact_zip(names: dict[str, bytes]) -> bytes:
    path = Path(__file__).parent / "data" / "junit-artifact"
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, source in names.items():
            zf.writestr(member, (path / source).read_bytes())
    return buf.getvalue()


def test_a_run_with_three_attempts_expired_artifact_and_missing_log(tmp_path, httpserver):
    api = with_branches(FakeActions(httpserver))
    for attempt, conclusion in ((1, "failure"), (2, "failure"), (3, "success")):
        run, jobs = _attempt_objects(attempt, conclusion)
        api.add_run(run, jobs)
    zip_bytes = _artifact_zip({"test/test-reports/python-pytest/test_ops/test_ops-1.xml": "test_ops.xml"})
    api.add_artifact(555, "test-reports-runattempt1-test-default-1-1-linux.2xlarge_9001.zip", None, "2026-11-02T11:29:00Z")
    api.add_artifact(555, "test-reports-runattempt3-test-default-1-1-linux.2xlarge_9003.zip", zip_bytes,
                     "2026-11-02T13:29:00Z")
    api.add_artifact(555, "build-artifacts", b"not a report", "2026-11-02T13:29:00Z")
    api.add_log(9001, b"\xef\xbb\xbf2026-11-02T11:28:00.0000000Z ##[error]Process completed with exit code 1.\n")
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                        log=lambda s: None, today=TODAY)
    assert (progress.runs, progress.attempts, progress.jobs) == (1, 3, 3)
    assert (progress.reports, progress.reports_expired) == (1, 1)
    assert (progress.logs, progress.logs_missing) == (1, 1)  # attempt 2's log 404s
    # attempts 1 and 2 are read by their own URL; the expired artifact answered 410
    assert api.count(r"/attempts/[12]$") == 2 and api.count(r"/artifacts/\d+/zip$") == 2
    archive = files(tmp_path)
    assert "logs/day=2026-11-02/9001.log" in archive
    zips = [k for k in archive if k.endswith(".zip")]
    assert zips == ["test-reports/day=2026-11-02/555/3/9003/test-reports-runattempt3-test-default-1-1-linux.2xlarge_9003.zip"]
    _ingest(tmp_path, tmp_path / "lake", WEEK[:1])
    con = duckdb.connect()
    jobs = con.sql(f"SELECT id, run_attempt, status, conclusion FROM '{tmp_path}/lake/workflow_job/*/*.parquet' "
                   "ORDER BY run_attempt").fetchall()
    assert jobs == [(9001, 1, "completed", "failure"), (9002, 2, "completed", "failure"),
                    (9003, 3, "completed", "success")]
    runs = con.sql(f"SELECT run_attempt, status, conclusion FROM '{tmp_path}/lake/workflow_run/*/*.parquet' "
                   "ORDER BY run_attempt").fetchall()
    assert runs == [(1, "completed", "failure"), (2, "completed", "failure"), (3, "completed", "success")]
    tests = con.sql(f"SELECT job_id, workflow_run_attempt, count(*) FROM '{tmp_path}/lake/test_run/*/*.parquet' "
                    "GROUP BY ALL").fetchall()
    assert tests == [(9003, 3, 4)]


def test_a_report_named_without_a_job_id_is_filed_under_its_attempts_only_job(tmp_path, httpserver):
    """An artifact named `runattempt<n>` but without `_<job id>` belongs to attempt n's only job;
    one whose attempt had several jobs cannot be placed, and is counted, not guessed."""
    api = with_branches(FakeActions(httpserver))
    for attempt in (1, 2):
        run, jobs = _attempt_objects(attempt, "success")
        if attempt == 1:
            jobs.append(dict(jobs[0], id=8001, name="linux-jammy-py3.10-gcc11 / test (default, 2, 2, linux.2xlarge)"))
        api.add_run(run, jobs)
    zip_bytes = _artifact_zip({"test/test-reports/python-pytest/test_ops/test_ops-1.xml": "test_ops.xml"})
    api.add_artifact(555, "test-reports-runattempt1-test-default.zip", zip_bytes, "2026-11-02T11:29:00Z")
    api.add_artifact(555, "test-reports-runattempt2-test-default.zip", zip_bytes, "2026-11-02T12:29:00Z")
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                        log=lambda s: None, today=TODAY)
    assert (progress.reports, progress.reports_unattributed) == (1, 1)
    assert "reports 1 (0 expired, 1 without a job (1 no job of that name)), " in progress.line()
    assert [k for k in files(tmp_path) if k.endswith(".zip")] == [
        "test-reports/day=2026-11-02/555/2/9002/test-reports-runattempt2-test-default.zip"]


def test_a_run_still_going_is_read_again_until_it_completes(tmp_path, httpserver):
    api = with_branches(FakeActions(httpserver))
    run, jobs = _attempt_objects(1, "success")
    api.add_run(run, jobs)
    going, going_jobs = _attempt_objects(1, None)
    going.update(id=556, status="in_progress")
    going_jobs[0].update(id=9101, run_id=556, status="in_progress", completed_at=None)
    api.add_run(going, going_jobs)
    store, opts = Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0])
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    cursor = orjson.loads((tmp_path / "backfill" / "pytorch" / "pytorch.json").read_bytes())
    assert cursor["unfinished"] == {WEEK[0].isoformat(): [556]} and cursor["days_done"] == []
    # it completes; the next backfill reads that run alone, and the day is done
    api.add_run(dict(going, status="completed", conclusion="success"),
                [dict(going_jobs[0], status="completed", conclusion="success", completed_at=jobs[0]["completed_at"])])
    api.requests.clear()
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    assert api.count(r"/runs/\d+/attempts/1/jobs$") == 1 and api.count(r"/runs/556/") == 2
    cursor = orjson.loads((tmp_path / "backfill" / "pytorch" / "pytorch.json").read_bytes())
    assert cursor["days_done"] == [WEEK[0].isoformat()] and cursor["unfinished"] == {}
    _ingest(tmp_path, tmp_path / "lake", WEEK[:1])
    states = duckdb.sql(f"SELECT id, status FROM '{tmp_path}/lake/workflow_job/*/*.parquet' ORDER BY id").fetchall()
    assert states == [(9001, "completed"), (9101, "completed")]


def test_a_run_re_run_after_it_was_read_is_read_again(tmp_path, httpserver):
    """A day read while it was today, its run complete; the run is re-run that day: the same
    command, later, reads the new attempt, as a backfill from scratch would."""
    api = with_branches(FakeActions(httpserver))
    run, jobs = _attempt_objects(1, "failure")
    api.add_run(run, jobs)
    store, opts = Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0])
    backfill(client(httpserver), store, opts, log=lambda s: None, today=WEEK[0])
    rerun, rerun_jobs = _attempt_objects(2, "success")
    api.add_run(dict(rerun, created_at=run["created_at"]), rerun_jobs)  # GitHub lists the latest attempt
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    _ingest(tmp_path, tmp_path / "lake", WEEK[:1])
    jobs = duckdb.sql(f"SELECT id, run_attempt, conclusion FROM '{tmp_path}/lake/workflow_job/*/*.parquet' "
                      "ORDER BY id").fetchall()
    assert jobs == [(9001, 1, "failure"), (9002, 2, "success")]
    cursor = orjson.loads((tmp_path / "backfill" / "pytorch" / "pytorch.json").read_bytes())
    assert cursor["days_done"] == [WEEK[0].isoformat()] and cursor["attempts"] == {}  # a done day keeps none


def test_a_day_read_without_prs_is_read_again_with_them_and_branches_keep_their_own_files(tmp_path, httpserver):
    """The cursor is per options: `--prs` after a backfill without it reads the pull requests'
    runs of the days already done; a backfill without `--prs` after one with it has nothing left;
    another branch's days are its own, and its parts never replace main's."""
    api = with_branches(FakeActions(httpserver), "main", "release/2.5")
    for run_id, branch, event in ((1000, "main", "push"), (1001, "feature-x", "pull_request"),
                                  (1002, "release/2.5", "push")):
        run, jobs = _attempt_objects(1, "success")
        run.update(id=run_id, head_branch=branch, event=event)
        jobs[0].update(id=run_id + 8000, run_id=run_id, head_branch=branch)
        api.add_run(run, jobs)
    store = Store(str(tmp_path))
    read = lambda **kw: backfill(client(httpserver), store, BackfillOptions(REPO, WEEK[0], WEEK[0], **kw),  # noqa: E731
                                 log=lambda s: None, today=TODAY).runs
    assert [read(), read(prs=True), read(), read(branch="release/2.5")] == [1, 2, 0, 1]
    assert {line["payload"]["workflow_job"]["id"] for line in lines(files(tmp_path))
            if line["event"] == "workflow_job"} == {9000, 9001, 9002}
    assert sorted(p.name for p in (tmp_path / "backfill" / "pytorch").iterdir()) == [
        "pytorch+prs.json", "pytorch.json", "pytorch@release~2f2.5.json"]


def test_a_secondary_rate_limit_is_waited_out_and_the_result_is_unchanged(tmp_path, httpserver):
    api = simulated_api(httpserver, WEEK[:1])
    backfill(client(httpserver), Store(str(tmp_path / "clean")), BackfillOptions(REPO, WEEK[0], WEEK[0]),
             log=lambda s: None, today=TODAY)
    api.fail(r"/attempts/1/jobs$", secondary_limit(30), secondary_limit(30))
    gh = client(httpserver)
    progress = backfill(gh, Store(str(tmp_path / "limited")), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                        log=lambda s: None, today=TODAY)
    assert gh._sleep == [30.0, 30.0]  # GitHub's Retry-After, twice
    assert progress.budget.remaining is not None and progress.budget.limit == 15_000
    assert files(tmp_path / "limited") == files(tmp_path / "clean")


def test_a_spent_hourly_budget_is_waited_out_until_its_reset(tmp_path, httpserver):
    api = simulated_api(httpserver, WEEK[:1], reports=False, logs=False)
    api.limit, api.remaining, api.reset = 5_000, 12, int(dt.datetime.now().timestamp()) + 600
    gh = client(httpserver, max_total_wait_s=3900)
    progress = backfill(gh, Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0]), log=lambda s: None,
                        today=TODAY)
    assert len(gh._sleep) == 1 and 590 < gh._sleep[0] <= 602  # until X-RateLimit-Reset, once
    assert progress.budget.limit == 5_000 and progress.budget.requests == api.count(r"^/repos/")


def test_a_limit_that_outlasts_the_wait_budget_stops_and_the_same_command_continues(tmp_path, httpserver):
    api = simulated_api(httpserver, WEEK[:2])
    backfill(client(httpserver), Store(str(tmp_path / "clean")), BackfillOptions(REPO, WEEK[0], WEEK[1], part_runs=3),
             log=lambda s: None, today=TODAY)
    api.requests.clear()
    # mid-run: after a few parts of the first day, GitHub keeps answering "secondary rate limit"
    run_ids = sorted(i for i, by in api.runs.items() if by[1]["head_branch"] == "main"
                     and by[1]["created_at"].startswith(WEEK[0].isoformat()))
    api.fail(rf"/runs/{run_ids[7]}/attempts/1/jobs$", *[secondary_limit(60)] * 4)
    store = Store(str(tmp_path / "resumed"))
    opts = BackfillOptions(REPO, WEEK[0], WEEK[1], part_runs=3)
    with pytest.raises(GitHubError) as stop:
        backfill(client(httpserver, max_total_wait_s=100), store, opts, log=lambda s: None, today=TODAY)
    assert stop.value.status == 403
    cursor = orjson.loads((tmp_path / "resumed" / "backfill" / "pytorch" / "pytorch.json").read_bytes())
    assert cursor["last_run_ids"] == {WEEK[0].isoformat(): run_ids[5]}  # two parts of 3
    api.requests.clear()
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    # the parts written before the stop are not read again
    assert api.count(rf"/runs/({run_ids[0]}|{run_ids[5]})/attempts/1/jobs$") == 0
    assert files(tmp_path / "resumed") == files(tmp_path / "clean")


def test_a_crash_mid_backfill_then_the_same_command_gives_the_same_archive(tmp_path, httpserver, monkeypatch):
    simulated_api(httpserver, WEEK[:2])
    opts = BackfillOptions(REPO, WEEK[0], WEEK[1], part_runs=4, prs=True)
    backfill(client(httpserver), Store(str(tmp_path / "clean")), opts, log=lambda s: None, today=TODAY)
    write_day = Part.write_day
    calls = []

    def crash_on_the_fifth_part(self, day):
        calls.append(self.name)
        write_day(self, day)
        if len(set(calls)) == 5:  # the process dies with the part's first file written, the cursor not saved
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(Part, "write_day", crash_on_the_fifth_part)
    store = Store(str(tmp_path / "crashed"))
    with pytest.raises(KeyboardInterrupt):
        backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    assert len(set(calls)) == 5
    monkeypatch.setattr(Part, "write_day", write_day)
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    assert files(tmp_path / "crashed") == files(tmp_path / "clean")
    ids = [line["delivery_id"] for line in lines(files(tmp_path / "crashed"))]
    assert len(ids) == len(set(ids))
    # a finished backfill run again reads nothing but the repository and the pull requests
    again = backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    assert again.runs == 0 and again.budget.requests == 1


def test_a_merged_branchs_own_commits_are_not_pushes_to_main(tmp_path, httpserver):
    """GitHub lists every commit reachable from main, a merged pull request's own commits too; only
    main's first-parent chain was pushed: the merge is one push from main's previous head."""
    api = FakeActions(httpserver)
    b, c1, c2, m = "b" * 40, "c1" * 20, "c2" * 20, "e" * 40
    api.add_commit("main", b, "a" * 40, "previous head", "2026-11-01T09:00:00Z", "alice")
    api.add_commit("main", c1, b, "wip", "2026-10-29T15:00:00Z", "bob")  # the branch's, days before
    api.add_commit("main", c2, c1, "address review", "2026-11-02T08:00:00Z", "bob")
    api.add_commit("main", m, b, "Merge pull request #77 from bob/feature", "2026-11-02T10:00:00Z", "web-flow")
    api.commits["main"][0]["parents"].append({"sha": c2, "url": "", "html_url": ""})
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, dt.date(2026, 10, 29), WEEK[0]),
                        log=lambda s: None, today=TODAY)
    pushes = [line["payload"] for line in lines(files(tmp_path)) if line["event"] == "push"]
    assert progress.pushes == 2 and sorted((p["before"][:2], p["after"][:2]) for p in pushes) == [("aa", "bb"), ("bb", "ee")]


def test_commits_dated_before_the_window_but_pushed_in_it_are_pushes_and_so_are_those_before_them(tmp_path, httpserver):
    """A commit made weeks before it was pushed (a local commit pushed late, a branch fast-forwarded
    onto main) keeps its old dates; pushed after a commit of the window, it was pushed in the window
    too, no earlier than that commit. The window's pushes before it are read on past it."""
    api = FakeActions(httpserver)
    p0, p1, x1, x2, h = "0a" * 20, "1a" * 20, "1b" * 20, "1c" * 20, "2a" * 20
    api.add_commit("main", p0, "f" * 40, "before the window", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", p1, p0, "the window's first", "2026-11-01T10:00:00Z", "alice")
    api.add_commit("main", x1, p1, "made weeks ago", "2026-10-10T08:00:00Z", "bob", committed="2026-10-12T08:00:00Z")
    api.add_commit("main", x2, x1, "its follow-up", "2026-10-11T08:00:00Z", "bob", committed="2026-10-12T08:05:00Z")
    api.add_commit("main", h, x2, "the head", "2026-11-02T09:00:00Z", "carol")
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, dt.date(2026, 11, 1), WEEK[0]),
                        log=lambda s: None, today=TODAY)
    pushes = sorted((line["received_at"], line["payload"]["after"][:4]) for line in lines(files(tmp_path))
                    if line["event"] == "push")
    assert progress.pushes == 4, pushes
    # filed in the order they were pushed, the late ones just after the commit they were pushed on
    assert [sha for _, sha in pushes] == ["1a1a", "1b1b", "1c1c", "2a2a"]
    assert pushes[1][0] > "2026-11-01T10:00:00" and pushes[2][0] < "2026-11-01T10:00:01"
    # the payload keeps the commit's own dates
    late = next(line["payload"] for line in lines(files(tmp_path)) if line["payload"].get("after") == x1)
    assert late["head_commit"]["timestamp"] == "2026-10-12T08:00:00Z"


def test_the_walk_past_the_window_reads_a_bounded_part_of_a_long_history(tmp_path, httpserver):
    """Five commits in the window on top of 2,000 older ones: the walk reads on past the window's
    first commit for a bounded number (history.WALK_PAST), not the whole history."""
    api = FakeActions(httpserver)
    parent = "f" * 40
    start = dt.datetime(2026, 8, 1, tzinfo=dt.timezone.utc)
    for i in range(2005):
        at = start + dt.timedelta(hours=i) if i < 2000 else dt.datetime(2026, 11, 2, i - 2000, tzinfo=dt.timezone.utc)
        sha = f"{i:040x}"
        api.add_commit("main", sha, parent, f"commit {i}", at.strftime("%Y-%m-%dT%H:%M:%SZ"), "alice")
        parent = sha
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[0]),
                        log=lambda s: None, today=TODAY)
    assert progress.pushes == 5
    # the list read as far as 5 + WALK_PAST commits, 100 a page (the whole history: 21 pages)
    assert api.count(r"/commits$") == -(-(5 + history.WALK_PAST) // 100) == 3


def test_a_merged_branch_longer_than_the_walks_reach_past_the_window_is_read_through(tmp_path, httpserver):
    """A merge of a 300-commit branch made in the window: GitHub lists its commits between the merge
    and main's previous head, all dated in the window; the walk reads through them to that head."""
    api = FakeActions(httpserver)
    before, prev, merge = "0a" * 20, "1a" * 20, "2a" * 20
    api.add_commit("main", before, "f" * 40, "before the window", "2026-10-30T09:00:00Z", "alice")
    api.add_commit("main", prev, before, "the window's first", "2026-11-01T01:00:00Z", "alice")
    side = prev
    for i in range(300):
        at = dt.datetime(2026, 11, 1, 2, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=i)
        api.add_commit("main", f"{i:040x}", side, f"feature {i}", at.strftime("%Y-%m-%dT%H:%M:%SZ"), "bob")
        side = f"{i:040x}"
    api.add_commit("main", merge, prev, "Merge pull request #78 from bob/feature", "2026-11-02T10:00:00Z", "web-flow")
    api.commits["main"][0]["parents"].append({"sha": side, "url": "", "html_url": ""})
    progress = backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, dt.date(2026, 11, 1), WEEK[0]),
                        log=lambda s: None, today=TODAY)
    pushes = sorted(line["payload"]["after"][:2] for line in lines(files(tmp_path)) if line["event"] == "push")
    assert progress.pushes == 2 and pushes == ["1a", "2a"]


# ---- REST shapes against webhook shapes ---------------------------------------------------------

def test_a_download_streams_to_the_archive_whole_or_not_at_all(tmp_path, httpserver):
    """Artifacts run to gigabytes: 48 MB pass through a megabyte at a time, not held whole; a
    download cut off mid-body leaves no file, and an expired one (410) is counted missing."""
    import tracemalloc

    from werkzeug import Response

    from torchci_assets.backfill.rest import RestReader

    body = bytes(range(256)) * (48 << 12)  # 48 MiB
    httpserver.expect_request("/big").respond_with_data(body, content_type="application/zip")
    cut = Response((chunk for chunk in (body[:1 << 20],)), headers={"Content-Length": str(len(body))})
    httpserver.expect_request("/cut").respond_with_response(cut)
    httpserver.expect_request("/gone").respond_with_json({"message": "Gone"}, status=410)
    reader = RestReader(GitHubResource(api_url=httpserver.url_for(""), token="t0ken", max_retries=0))
    store = Store(str(tmp_path / "archive"))
    tracemalloc.start()
    try:
        assert reader.download("/big", store, "test-reports/day=2026-11-01/1/1/2/a.zip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert store.read_bytes("test-reports/day=2026-11-01/1/1/2/a.zip") == body
    assert peak < 16 << 20, peak  # a few chunks in flight (the same for 96 MiB), not the 48 of the body
    with pytest.raises(Exception):
        reader.download("/cut", store, "logs/day=2026-11-01/3.log")
    assert not store.exists("logs/day=2026-11-01/3.log") and store.list_files("logs/day=2026-11-01", ("",)) == []
    assert not reader.download("/gone", store, "logs/day=2026-11-01/4.log") and reader.budget.missing == 1


def test_a_download_cut_off_is_asked_for_again_and_one_cut_every_time_stops_the_backfill(tmp_path, httpserver):
    """GitHub's storage resets a connection midway: the file is asked for again, with backoff,
    and written whole; cut every time, the backfill stops with a GitHubError (exit 75: the same
    command continues), no file left behind."""
    from werkzeug import Response

    from torchci_assets.backfill.rest import RestReader

    body = bytes(range(256)) * 8192  # 2 MiB
    cut = lambda: Response(iter([body[:1 << 20]]), headers={"Content-Length": str(len(body))})  # noqa: E731
    once = Script(cut(), Response(body, content_type="application/zip"))
    httpserver.expect_request("/once").respond_with_handler(once)
    always = Script(*[cut() for _ in range(3)])
    httpserver.expect_request("/always").respond_with_handler(always)
    gh = client(httpserver, max_retries=2)
    reader, store = RestReader(gh), Store(str(tmp_path))
    assert reader.download("/once", store, "logs/day=2026-11-01/1.log") and len(once.calls) == 2
    assert store.read_bytes("logs/day=2026-11-01/1.log") == body and gh._sleep == [1.0]
    with pytest.raises(GitHubError, match="download cut off 3 times: ChunkedEncodingError") as stop:
        reader.download("/always", store, "logs/day=2026-11-01/2.log")
    assert stop.value.status is None and len(always.calls) == 3 and gh._sleep == [1.0, 1.0, 2.0]
    assert not store.exists("logs/day=2026-11-01/2.log")


class Script:
    """Serves the given responses in order, counting requests."""

    def __init__(self, *responses):
        self.responses, self.calls = list(responses), []

    def __call__(self, request):
        self.calls.append(request.path)
        return self.responses[len(self.calls) - 1]


def test_the_openapi_job_example_becomes_webhook_deliveries():
    """GitHub's own example job lacks created_at and run_attempt (older API versions): it still
    gives the deliveries its timestamps prove, with the webhook's keys."""
    job = dict(EXAMPLES["job"])
    out = shapes.job_deliveries(job, {"full_name": "octo-org/octo-repo"})
    envs = [orjson.loads(line) for _, line in out]
    assert [e["payload"]["action"] for e in envs] == ["in_progress", "completed"]
    assert [e["received_at"] for e in envs] == ["2020-01-20T17:42:40.000Z", "2020-01-20T17:44:39.000Z"]
    assert envs[0]["payload"]["workflow_job"]["conclusion"] is None
    assert envs[1]["payload"]["workflow_job"] == job
    assert envs[1]["delivery_id"] == "rest-workflow_job-399444496-1-completed" and envs[1]["source"] == "rest"


def test_rest_only_job_states_are_the_webhook_queued_state():
    for status in ("requested", "pending"):
        job = dict(EXAMPLES["job"], status=status, conclusion=None, completed_at=None,
                   created_at="2020-01-20T17:40:00Z")
        ((day, line),) = shapes.job_deliveries(job, {"full_name": "o/r"})
        env = orjson.loads(line)
        assert (day, env["payload"]["action"], env["payload"]["workflow_job"]["status"]) == ("2020-01-20", "queued", "queued")
        assert env["payload"]["workflow_job"]["started_at"] == "2020-01-20T17:40:00Z"
        assert env["payload"]["workflow_job"]["runner_name"] is None


def test_a_skipped_job_only_completes_and_a_simple_pull_request_knows_if_it_merged():
    job = dict(EXAMPLES["job"], conclusion="skipped", created_at="2020-01-20T17:44:39Z")
    assert [orjson.loads(x)["payload"]["action"] for _, x in shapes.job_deliveries(job, {})] == ["completed"]
    pr = dict(EXAMPLES["pull-request-simple-items"][0], state="closed", closed_at="2011-01-27T19:01:12Z",
              merged_at="2011-01-27T19:01:12Z")
    opened, closed = (orjson.loads(x)["payload"] for _, x in shapes.pull_request_deliveries(pr, {"full_name": "o/r"}))
    assert (opened["action"], opened["pull_request"]["state"], opened["pull_request"]["merged"]) == ("opened", "open", False)
    assert (closed["action"], closed["pull_request"]["state"], closed["pull_request"]["merged"]) == ("closed", "closed", True)


# ---- the command ----------------------------------------------------------------------------------

def test_the_command_reads_credentials_from_the_environment_and_reports_the_budget(tmp_path, httpserver,
                                                                                 monkeypatch, capsys):
    from torchci_assets.backfill.cli import EXIT_STOPPED
    from torchci_assets.cli import main

    api = simulated_api(httpserver, [dt.date.today()], reports=False, logs=False)
    monkeypatch.setenv("GITHUB_API_URL", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_SECRETvalue0123456789")
    monkeypatch.setenv("TORCHCI_ARCHIVE_URI", str(tmp_path))
    assert main(["backfill", "--repo", REPO, "--days", "1"]) == 0
    out = capsys.readouterr().out
    assert "budget left" in out and "done" in out
    assert api.count(r"/actions/runs$") >= 1 and list(tmp_path.glob("webhooks/day=*/rest-pytorch-pytorch-*.jsonl.gz"))
    api.fail(r"^/repos/pytorch/pytorch$", reply(422, {"message": "Unprocessable"}))
    assert main(["backfill", "--repo", REPO, "--since", dt.date.today().isoformat()]) == EXIT_STOPPED
    captured = capsys.readouterr()
    assert "run the same command again" in captured.err and "ghp_SECRET" not in captured.out + captured.err
    # refusals running the command again cannot fix: exit 2, and what to check
    api.fail(r"^/repos/pytorch/pytorch$", reply(401, {"message": "Bad credentials"}))
    assert main(["backfill", "--repo", REPO, "--since", dt.date.today().isoformat()]) == 2
    captured = capsys.readouterr()
    assert "GitHub refused the credentials" in captured.err and "check GITHUB_TOKEN" in captured.err
    assert "run the same command again" not in captured.err and "ghp_SECRET" not in captured.out + captured.err
    api.fail(r"^/repos/pytorch/pytorch$", reply(404, {"message": "Not Found"}))
    assert main(["backfill", "--repo", REPO, "--since", dt.date.today().isoformat()]) == 2
    assert "no repository pytorch/pytorch that these credentials can see" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["backfill", "--repo", "not a repo", "--days", "1"])


def test_the_command_acts_as_a_github_app_installation(tmp_path, httpserver, monkeypatch, capsys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from torchci_assets.cli import main

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    api = simulated_api(httpserver, [dt.date.today()], reports=False, logs=False)
    for name in ("GITHUB_TOKEN", "GITHUB_APP_INSTALLATION_ID"):  # the repository's installation is looked up
        monkeypatch.delenv(name, raising=False)
    for name, value in (("GITHUB_API_URL", httpserver.url_for("").rstrip("/")), ("GITHUB_APP_ID", "123456"),
                        ("GITHUB_APP_PRIVATE_KEY", pem), ("TORCHCI_ARCHIVE_URI", str(tmp_path))):
        monkeypatch.setenv(name, value)
    assert main(["backfill", "--repo", REPO, "--days", "1"]) == 0
    assert len(api.installation_lookups) == 1 and api.installation_lookups[0].startswith("Bearer ey")
    assert api.minted == ["ghs_fakeinstallation0000"]
    assert api.authorizations and set(api.authorizations) == {"Bearer ghs_fakeinstallation0000"}
    out = capsys.readouterr()
    assert "ghs_fake" not in out.out + out.err and "PRIVATE KEY" not in out.out + out.err
