"""`torchci backfill` as a team starting from its own repository uses it: a default branch that is
not main, pull requests older than the days read, PyTorch's ciflow tag pushes, a token without a
permission, and `make run` afterwards. Against the fake GitHub API on 127.0.0.1
(tests/fake_github_actions.py) filled from the simulator's world, through the real command."""

import datetime as dt
import gzip
import os
import subprocess
from pathlib import Path

import duckdb
import orjson

from fake_github_actions import FakeActions, from_world, reply, secondary_limit
from resources.lake import Lake
from resources.storage import Store
from test_backfill import REPO, SIM, TODAY, WEEK, client, with_branches
from torchci_assets.archive_days import archive_days
from torchci_assets.backfill.history import BackfillOptions, backfill
from torchci_assets.cli import main
from torchci_assets.derived.hud.health import build_pr_jobs
from torchci_assets.ingest.webhooks import ingest_webhook_day
from torchci_assets.simulate.world import World

ROOT = Path(__file__).resolve().parent.parent
TEAM = "acme/widgets"
# the command reads up to the real today: the world's days are the two before it
NOW_DAY = dt.datetime.now(dt.timezone.utc).date()
DAYS = [NOW_DAY - dt.timedelta(days=2), NOW_DAY - dt.timedelta(days=1)]


def team_api(httpserver, default_branch: str) -> FakeActions:
    """The simulated repository as acme/widgets, its main branch renamed `default_branch`."""
    api = FakeActions(httpserver, repo=TEAM, default_branch=default_branch)
    from_world(api, World(SIM), DAYS, reports=False, logs=False)
    for attempts in api.runs.values():
        for run in attempts.values():
            if run["head_branch"] == "main":
                run["head_branch"] = default_branch
    for jobs in api.jobs.values():
        for job in jobs:
            if job.get("head_branch") == "main":
                job["head_branch"] = default_branch
    api.commits[default_branch] = api.commits.pop("main")
    return api


def command_env(monkeypatch, httpserver, archive: Path) -> None:
    monkeypatch.setenv("GITHUB_API_URL", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_FAKE0123456789")
    monkeypatch.setenv("TORCHCI_ARCHIVE_URI", str(archive))


def records(archive: Path) -> list[dict]:
    return [orjson.loads(x) for p in sorted(archive.glob("webhooks/day=*/*.jsonl.gz"))
            for x in gzip.decompress(p.read_bytes()).splitlines()]


# ---- the repository's default branch ------------------------------------------------------------

def test_a_master_repository_is_read_on_its_default_branch(tmp_path, httpserver, monkeypatch, capsys):
    api = team_api(httpserver, "master")
    command_env(monkeypatch, httpserver, tmp_path)
    assert main(["backfill", "--repo", TEAM, "--since", DAYS[0].isoformat()]) == 0
    recs = records(tmp_path)
    master_runs = {i for i, a in api.runs.items() if a[max(a)]["head_branch"] == "master"}
    read = {r["payload"]["workflow_run"]["id"] for r in recs if r["event"] == "workflow_run"}
    assert len(master_runs) > 10 and read == master_runs
    pushes = {r["payload"]["after"] for r in recs if r["event"] == "push"}
    assert pushes == {c["sha"] for c in api.commits["master"]}
    assert {r["payload"]["ref"] for r in recs if r["event"] == "push"} == {"refs/heads/master"}
    assert "branch master, the repository's default" in capsys.readouterr().out


def test_a_branch_github_does_not_have_stops_with_what_to_check(tmp_path, httpserver, monkeypatch, capsys):
    """`--branch main` on a repository without one: exit 2 and one line, no day marked done (read
    as an empty history, the days would never be read again)."""
    team_api(httpserver, "master")
    command_env(monkeypatch, httpserver, tmp_path)
    assert main(["backfill", "--repo", TEAM, "--since", DAYS[0].isoformat(), "--branch", "main"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no branch main in acme/widgets" in err
    assert "check --branch; left out, the repository's default branch is read (master)" in err
    assert "run the same command again" not in err
    cursors = list(tmp_path.glob("backfill/**/*.json"))
    assert all(orjson.loads(p.read_bytes())["days_done"] == [] for p in cursors)
    assert not (tmp_path / "webhooks").exists()


# ---- refusals running the command again cannot fix -----------------------------------------------

def test_a_backfill_into_the_simulated_sample_stops_before_reading_github(tmp_path, httpserver, monkeypatch, capsys):
    """The README's first command, `make run`, leaves its simulated pytorch/pytorch archive in
    ./var/archive: a team's backfill there would be mixed with it in every test statistic (test
    times, flaky and slow tests read every repository's reports). Exit 2 naming what to do."""
    with_branches(FakeActions(httpserver, repo=TEAM))
    command_env(monkeypatch, httpserver, tmp_path / "archive")
    assert main(["simulate", "--out", str(tmp_path / "archive"), "--days", "1", "--configs", "1",
                 "--test-files", "2", "--commits-per-day", "2", "--prs-per-day", "1", "--no-test-reports"]) == 0
    capsys.readouterr()
    assert main(["backfill", "--repo", TEAM, "--days", "2"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "holds a simulated archive (ground-truth.json" in err
    assert "make clean" in err and "TORCHCI_ARCHIVE_URI" in err
    assert httpserver.log == [] and not (tmp_path / "archive" / "backfill").exists()


def test_a_token_without_actions_permission_exits_2_and_a_rate_limit_still_75(tmp_path, httpserver,
                                                                               monkeypatch, capsys):
    api = team_api(httpserver, "main")
    command_env(monkeypatch, httpserver, tmp_path)
    refusal = reply(403, {"message": "Resource not accessible by personal access token",
                          "documentation_url": "https://docs.github.com/rest/actions/workflow-runs"})
    api.fail(r"/actions/runs$", refusal)
    assert main(["backfill", "--repo", TEAM, "--since", DAYS[0].isoformat()]) == 2
    err = capsys.readouterr().err
    assert "Resource not accessible by personal access token" in err and "Actions: read" in err
    assert "Pull requests: read for --prs" in err and "run the same command again" not in err
    # a secondary rate limit whose advice outlasts the command's wait budget: the same command continues
    api.fail(r"/actions/runs$", secondary_limit(retry_after=5000))
    assert main(["backfill", "--repo", TEAM, "--since", DAYS[0].isoformat()]) == 75
    assert "run the same command again" in capsys.readouterr().err


# ---- pull requests older than the days read --------------------------------------------------------

def test_old_pull_requests_are_filed_on_the_first_day_and_keep_their_state(tmp_path, httpserver):
    """Pull requests opened (and one merged) years ago but updated in the days read: their records
    land on the first day, so the archive, and the day partitions, start there; their payloads
    keep GitHub's timestamps, and the latest record is still each one's state."""
    api = with_branches(FakeActions(httpserver))
    updated = f"{WEEK[1]}T12:00:00Z"
    api.add_pull({"number": 4242, "state": "open", "created_at": "2023-06-01T10:00:00Z", "updated_at": updated,
                  "closed_at": None, "merged_at": None})
    api.add_pull({"number": 4243, "state": "closed", "created_at": "2023-06-01T10:00:00Z", "updated_at": updated,
                  "closed_at": "2023-06-02T10:00:00Z", "merged_at": "2023-06-02T10:00:00Z"})
    api.add_pull({"number": 4244, "state": "closed", "created_at": "2023-06-01T10:00:00Z", "updated_at": updated,
                  "closed_at": f"{WEEK[1]}T09:00:00Z", "merged_at": None})
    store = Store(str(tmp_path))
    backfill(client(httpserver), store, BackfillOptions(REPO, WEEK[0], WEEK[1], prs=True), log=lambda s: None,
             today=TODAY)
    assert archive_days(store) == [WEEK[0].isoformat(), WEEK[1].isoformat()]
    placed = {(r["payload"]["number"], r["payload"]["action"]): (r["received_at"], r["payload"]["pull_request"])
              for r in records(tmp_path)}
    assert placed[(4243, "opened")][0] == f"{WEEK[0]}T00:00:00.000Z"
    assert placed[(4243, "closed")][0] == f"{WEEK[0]}T00:00:00.001Z"
    assert placed[(4244, "closed")][0] == f"{WEEK[1]}T09:00:00.000Z"  # closed in the days read: when it was
    assert placed[(4243, "closed")][1]["closed_at"] == "2023-06-02T10:00:00Z"
    assert placed[(4242, "opened")][1]["created_at"] == "2023-06-01T10:00:00Z"
    lake = Lake.at(str(tmp_path / "lake"))
    for day in WEEK[:2]:
        ingest_webhook_day(store, lake, day.isoformat(), workers=1)
    states = duckdb.sql(f"SELECT number, arg_max(state, received_at), arg_max(merged, received_at) "
                     f"FROM '{tmp_path}/lake/pull_request/*/*.parquet' GROUP BY number ORDER BY number").fetchall()
    assert states == [(4242, "open", False), (4243, "closed", True), (4244, "closed", False)]


def test_a_pull_request_updated_while_the_list_is_paged_is_not_missed(tmp_path, httpserver):
    """GitHub pages the pull requests sorted by update, newest first, by page number: one updated
    while a later page is read moves to the first page, already read, and the pages after shift by
    one. It is read all the same, once, in its newest state."""
    api = with_branches(FakeActions(httpserver))
    for n in range(1, 8):
        api.add_pull({"number": n, "state": "open", "created_at": f"{WEEK[0]}T0{n}:00:00Z",
                      "updated_at": f"{WEEK[1]}T0{n}:00:00Z", "closed_at": None, "merged_at": None})
    route = api._route

    def merge_1_as_page_2_is_read(request, rest):
        if rest == "/pulls" and request.args.get("page") == "2":
            api.add_pull({**next(p for p in api.pulls if p["number"] == 1), "state": "closed",
                          "updated_at": f"{WEEK[1]}T12:00:00Z", "closed_at": f"{WEEK[1]}T12:00:00Z",
                          "merged_at": f"{WEEK[1]}T12:00:00Z"})
        return route(request, rest)

    api._route = merge_1_as_page_2_is_read
    backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, WEEK[0], WEEK[1], prs=True, page_size=3),
             log=lambda s: None, today=TODAY)
    pulled = [(r["payload"]["number"], r["payload"]["action"]) for r in records(tmp_path)
              if r["event"] == "pull_request"]
    assert sorted(pulled) == sorted([(n, "opened") for n in range(1, 8)] + [(1, "closed")])


# ---- ciflow tag pushes ------------------------------------------------------------------------------

def _ciflow_run(api: FakeActions, pr: dict, run_id: int, tag: str) -> None:
    """A trunk run of the pull request's head, started by pushing `tag` (as PyTorch's bot does for a
    `ciflow/trunk` label), with one failed test job."""
    template = next(a[max(a)] for a in api.runs.values() if a[max(a)]["head_sha"] == pr["head"]["sha"])
    run = dict(template, id=run_id, run_attempt=1, event="push", head_branch=tag, name="trunk",
               path=".github/workflows/trunk.yml", pull_requests=[])
    job = {"id": run_id + 1, "run_id": run_id, "head_sha": pr["head"]["sha"], "head_branch": tag,
           "run_attempt": 1, "workflow_name": "trunk", "status": "completed", "conclusion": "failure",
           "name": "linux-jammy-py3.10-gcc11 / test (default, 1, 1, linux.2xlarge)", "labels": ["linux.2xlarge"],
           "created_at": template["created_at"], "started_at": template["created_at"],
           "completed_at": template["updated_at"]}
    api.add_run(run, [job])


def test_ciflow_tag_push_runs_are_read_with_prs_and_shown_with_their_pull_request(tmp_path, httpserver):
    api = with_branches(FakeActions(httpserver))
    from_world(api, World(SIM), WEEK[:1], reports=False, logs=False)
    pr = api.pulls[0]
    _ciflow_run(api, pr, 99_000_000_001, f"ciflow/trunk/{pr['number']}")
    _ciflow_run(api, pr, 99_000_000_011, "feature-x")  # a push to another branch: not the pull request's
    store = Store(str(tmp_path))
    backfill(client(httpserver), store, BackfillOptions(REPO, WEEK[0], WEEK[0], prs=True), log=lambda s: None,
             today=TODAY)
    read = {r["payload"]["workflow_run"]["id"] for r in records(tmp_path) if r["event"] == "workflow_run"}
    assert 99_000_000_001 in read and 99_000_000_011 not in read
    listed = [a for p, a in api.requests if p.endswith("/actions/runs") and a.get("event") == "push"]
    assert listed and all(a["created"].startswith(f"{WEEK[0]}T00:00:00Z..") for a in listed)  # one day's
    lake = Lake.at(str(tmp_path / "lake"))
    for day in WEEK[:2]:
        ingest_webhook_day(store, lake, day.isoformat(), workers=1)
    build_pr_jobs(lake, WEEK[1].isoformat(), REPO)
    rows = duckdb.sql(f"SELECT workflow, name, state FROM '{tmp_path}/lake/pr_jobs/day={WEEK[1]}/*.parquet' "
                      f"WHERE number = {pr['number']} AND workflow = 'trunk'").fetchall()
    assert rows == [("trunk", "linux-jammy-py3.10-gcc11 / test (default, 1, 1, linux.2xlarge)", "failure")]


def test_days_an_older_prs_backfill_finished_get_their_ciflow_runs_once(tmp_path, httpserver):
    """A `--prs` cursor written before ciflow tag runs were read: running the backfill again reads
    those days' ciflow runs, and only them; a third run reads nothing more."""
    api = with_branches(FakeActions(httpserver))
    from_world(api, World(SIM), WEEK[:1], reports=False, logs=False)
    pr = api.pulls[0]
    _ciflow_run(api, pr, 99_000_000_001, f"ciflow/trunk/{pr['number']}")
    store = Store(str(tmp_path))
    opts = BackfillOptions(REPO, WEEK[0], WEEK[0], prs=True)
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    cursor_path = "backfill/pytorch/pytorch+prs.json"
    old = orjson.loads(store.read_bytes(cursor_path))
    old.pop("ciflow_read", None)  # as the older backfill wrote it
    for path in (tmp_path / "webhooks").rglob("*.gz"):  # and the archive without the ciflow run
        kept = [x for x in gzip.decompress(path.read_bytes()).splitlines() if b"99000000001" not in x]
        path.write_bytes(gzip.compress(b"".join(x + b"\n" for x in kept)))
    store.write_bytes(cursor_path, orjson.dumps(old))
    assert 99_000_000_001 not in {r["payload"]["workflow_run"]["id"] for r in records(tmp_path)
                                  if r["event"] == "workflow_run"}
    api.requests.clear()
    said: list[str] = []
    progress = backfill(client(httpserver), store, opts, log=said.append, today=TODAY)
    assert progress.runs == 1  # the ciflow run; the day's other runs are not read again
    assert any("ciflow tag runs of 1 days" in s for s in said)
    assert 99_000_000_001 in {r["payload"]["workflow_run"]["id"] for r in records(tmp_path)
                              if r["event"] == "workflow_run"}
    api.requests.clear()
    assert backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY).runs == 0
    assert not any(p.endswith("/actions/runs") for p, _ in api.requests)


def test_the_day_an_older_prs_backfill_left_unfinished_gets_its_ciflow_runs_too(tmp_path, httpserver, monkeypatch):
    """`torchci backfill --prs` reads up to today, which it leaves unfinished: after the upgrade the
    same command reads on from that day's last run, and its ciflow runs from before it too."""
    import torchci_assets.backfill.history as history

    api = with_branches(FakeActions(httpserver))
    from_world(api, World(SIM), WEEK[:1], reports=False, logs=False)
    ciflow_id = min(api.runs) - 1000  # created that day, listed below the day's last run id
    _ciflow_run(api, api.pulls[0], ciflow_id, f"ciflow/trunk/{api.pulls[0]['number']}")
    store = Store(str(tmp_path))
    opts = BackfillOptions(REPO, WEEK[0], WEEK[0], prs=True)
    with monkeypatch.context() as m:  # the older backfill, which did not list ciflow tag runs
        m.setattr(history, "run_queries", lambda o: [({"branch": o.branch}, None), ({"event": "pull_request"}, None)])
        backfill(client(httpserver), store, opts, log=lambda s: None, today=WEEK[0])
    cursor_path = "backfill/pytorch/pytorch+prs.json"
    old = orjson.loads(store.read_bytes(cursor_path))
    old.pop("ciflow_read", None)
    assert old["days_done"] == [] and WEEK[0].isoformat() in old["last_run_ids"]
    store.write_bytes(cursor_path, orjson.dumps(old))
    backfill(client(httpserver), store, opts, log=lambda s: None, today=TODAY)
    assert ciflow_id in {r["payload"]["workflow_run"]["id"] for r in records(tmp_path) if r["event"] == "workflow_run"}


# ---- make run after a backfill ---------------------------------------------------------------------

def _make_run(tmp_path: Path, archive: Path) -> list[str]:
    """`make run` with `torchci` a stand-in that notes its arguments: the commands it would run."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "torchci").write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    (bin_dir / "torchci").chmod(0o755)
    calls.write_text("")
    env = dict(os.environ, TORCHCI_ARCHIVE_URI=str(archive))
    done = subprocess.run(["make", "-s", "-o", "install", "run", f"BIN={bin_dir}"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [line.split()[0] for line in calls.read_text().splitlines()]


def test_make_run_simulates_only_where_there_is_no_archive(tmp_path, httpserver, monkeypatch):
    """A backfill whose days held no webhook yet (a quiet repository) leaves its cursor, and no
    webhooks/ folder: `make run` must not fill that archive with a simulated pytorch/pytorch."""
    with_branches(FakeActions(httpserver, repo=TEAM))
    command_env(monkeypatch, httpserver, tmp_path / "team")
    assert main(["backfill", "--repo", TEAM, "--since", DAYS[0].isoformat()]) == 0
    assert (tmp_path / "team" / "backfill").is_dir() and not (tmp_path / "team" / "webhooks").exists()
    assert _make_run(tmp_path, tmp_path / "team") == ["run"]
    assert _make_run(tmp_path, tmp_path / "fresh") == ["simulate", "run"]  # a fresh clone: the sample
