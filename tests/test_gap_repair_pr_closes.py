"""Gap repair of lost `pull_request closed` deliveries: a pull request GitHub closed leaves the HUD
and Dr. CI once the hour's first pass has compared the open ones, and no request more is made."""

import copy
import datetime as dt
import gzip
import json

import duckdb
import pytest
from conftest import write_lines
from dagster import Failure
from fake_github_actions import FakeActions, reply
from test_gap_repair import client

from resources.configured import ArchiveResource, LakeResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.backfill import gone
from torchci_assets.derived.hud.health import build_pr_jobs
from torchci_assets.ingest.webhooks import ingest_webhook_day

REPO = "Codertocat/Hello-World"
DAY, TODAY = "2021-09-13", "2021-09-14"
HOUR_START = dt.datetime(2021, 9, 14, 10, 2, tzinfo=dt.timezone.utc)


def opened(octokit, number: int) -> dict:
    """The `opened` example of @octokit/webhooks-examples, as pull request `number`."""
    payload = copy.deepcopy(next(p for p in octokit["api.github.com"]["pull_request"] if p["action"] == "opened"))
    payload["number"] = payload["pull_request"]["number"] = number
    payload["pull_request"].update(head={**payload["pull_request"]["head"], "sha": f"{number:040x}"},
                                   updated_at=f"{DAY}T08:0{number}:00Z")
    return {"event": "pull_request", "delivery_id": f"gh-opened-{number}", "received_at": f"{DAY}T08:0{number}:00.000Z",
            "payload": payload}


def lake_showing_open(tmp_path, octokit, numbers) -> tuple[Store, Lake]:
    """Pull requests opened yesterday, their close webhooks never received: pr_jobs shows them open."""
    write_lines(tmp_path / "archive" / "webhooks" / f"day={DAY}" / "hooks-1.jsonl",
                [opened(octokit, n) for n in numbers], gz=False)
    archive, lake = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "lake"))
    ingest_webhook_day(archive, lake, DAY, workers=1)
    build_pr_jobs(lake, DAY, REPO, now=dt.datetime(2021, 9, 13, 23, 0, tzinfo=dt.timezone.utc))
    return archive, lake


def pr_states(lake: Lake, day: str) -> dict[int, str]:
    return dict(duckdb.sql("SELECT DISTINCT number, pr_state FROM read_parquet($files)",
                           params={"files": lake.files("pr_jobs", [day])}).fetchall())


def run_pass(tmp_path, httpserver, monkeypatch, now: dt.datetime):
    import jobs.gap_repair
    from jobs.gap_repair import gap_repair_job

    config = tmp_path / "config.yaml"
    config.write_text(f"upstream:\n  repo: {REPO}\n")
    monkeypatch.setenv("TORCHCI_CONFIG", str(config))
    monkeypatch.setattr(jobs.gap_repair, "utcnow", lambda: now)
    result = gap_repair_job.execute_in_process(resources={
        "github": client(httpserver), "archive": ArchiveResource(uri=str(tmp_path / "archive")),
        "lake": LakeResource(uri=str(tmp_path / "lake"))})
    (out,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return out.event_specific_data.metadata


def github_with(httpserver) -> FakeActions:
    api = FakeActions(httpserver, repo=REPO)
    for number, state in ((1, "open"), (2, "closed"), (3, "open"), (4, "closed")):
        closed = "2021-09-13T20:00:00Z" if state == "closed" else None
        api.add_pull({"number": number, "state": state, "created_at": f"{DAY}T08:00:00Z",
                      "updated_at": closed or f"{DAY}T08:00:00Z", "closed_at": closed, "merged_at": closed})
    return api


def archived(tmp_path, day: str) -> list[dict]:
    """The records written into the archive's `day` (gzipped JSON lines, as gap repair writes them)."""
    return [json.loads(line) for f in sorted((tmp_path / "archive" / "webhooks" / f"day={day}").glob("*.gz"))
            for line in gzip.open(f, "rt")]


def pull_requests_asked(api: FakeActions) -> list[str]:
    return [path for path, _ in api.requests if "/pulls" in path]


def test_a_pull_request_whose_close_webhook_was_lost_is_closed_by_the_hours_first_pass(tmp_path, httpserver, octokit,
                                                                                       monkeypatch):
    archive, lake = lake_showing_open(tmp_path, octokit, (1, 2, 3))
    assert pr_states(lake, DAY) == {1: "open", 2: "open", 3: "open"}
    api = github_with(httpserver)

    # a pass later in the hour does not compare pull requests: no request about them
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(minutes=30))
    assert pull_requests_asked(api) == [] and "pull_requests_found_closed" not in meta

    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    assert meta["pull_requests_found_closed"].value == 1
    # one page of the open ones, then only the one missing from it (#4 was never shown open here)
    assert pull_requests_asked(api) == [f"/repos/{REPO}/pulls", f"/repos/{REPO}/pulls/2"]
    [line] = archived(tmp_path, TODAY)
    assert (line["event"], line["payload"]["action"], line["payload"]["number"]) == ("pull_request", "closed", 2)
    assert line["payload"]["pull_request"]["merged"] is True and line["received_at"] >= HOUR_START.isoformat()[:19]

    # the refresh of today ingests it: the HUD and Dr. CI no longer show #2 open
    ingest_webhook_day(archive, lake, TODAY, workers=1)
    build_pr_jobs(lake, TODAY, REPO, now=HOUR_START + dt.timedelta(minutes=3))
    assert pr_states(lake, TODAY) == {1: "open", 2: "closed", 3: "open"}

    # the next hour's pass finds nothing to ask about
    run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=1))
    assert pull_requests_asked(api)[2:] == [f"/repos/{REPO}/pulls"]


def test_a_pull_request_reopened_since_the_list_was_read_gets_no_close(tmp_path, httpserver, octokit, monkeypatch):
    archive, lake = lake_showing_open(tmp_path, octokit, (2,))
    api = github_with(httpserver)
    api.fail(r"/pulls$", reply(200, []))  # the list read while #2 was closed; reopened before it is asked about
    api.add_pull({"number": 2, "state": "open", "created_at": f"{DAY}T08:00:00Z", "updated_at": f"{TODAY}T09:00:00Z",
                  "closed_at": None, "merged_at": None})
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    assert meta["pull_requests_found_closed"].value == 0
    assert pull_requests_asked(api) == [f"/repos/{REPO}/pulls", f"/repos/{REPO}/pulls/2"]
    assert archived(tmp_path, TODAY) == []


def test_a_pull_request_github_no_longer_has_does_not_keep_the_others_open(tmp_path, httpserver, octokit, monkeypatch):
    """A pull request GitHub deleted (spam, say) answers 404: it is counted, and the pull requests
    after it are still asked about and closed, on this pass and every later one."""
    archive, lake = lake_showing_open(tmp_path, octokit, (1, 2, 3))
    api = github_with(httpserver)
    api.pulls = [p for p in api.pulls if p["number"] != 1]  # deleted: its lookup answers 404
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    assert pull_requests_asked(api) == [f"/repos/{REPO}/pulls", f"/repos/{REPO}/pulls/1", f"/repos/{REPO}/pulls/2"]
    assert meta["pull_requests_found_closed"].value == 1 and meta["pull_requests_suspected_gone"].value == 1
    assert meta["failed"].value == 0
    assert [(r["payload"]["action"], r["payload"]["number"]) for r in archived(tmp_path, TODAY)] == [("closed", 2)]


def test_a_pull_request_github_no_longer_has_is_asked_about_twice(tmp_path, httpserver, octokit, monkeypatch):
    """A deleted pull request stays deleted: the next hour's pass hears 404 again and remembers it,
    and later passes do not ask for it again, though the lake still shows it open."""
    lake_showing_open(tmp_path, octokit, (1, 3))
    api = github_with(httpserver)
    api.pulls = [p for p in api.pulls if p["number"] != 1]
    run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=1))
    assert (meta["pull_requests_gone"].value, meta["pull_requests_suspected_gone"].value) == (1, 0)
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=2))
    listed, asked = f"/repos/{REPO}/pulls", f"/repos/{REPO}/pulls/1"
    assert pull_requests_asked(api) == [listed, asked, listed, asked, listed]
    assert meta["pull_requests_gone"].value == 0 and meta["pull_requests_known_gone"].value == 1
    assert meta["failed"].value == 0


def test_a_pull_request_github_answers_404_for_once_is_asked_again_and_closed(tmp_path, httpserver, octokit,
                                                                             monkeypatch):
    """GitHub answers 404 for a pull request it has (a passing error behind its load balancers): the
    next hour's pass asks again, finds it closed and writes the close, instead of showing it open on
    the HUD and in Dr. CI for good."""
    lake_showing_open(tmp_path, octokit, (2,))
    api = github_with(httpserver)
    api.fail(r"/pulls/2$", reply(404, {"message": "Not Found"}))
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    assert (meta["pull_requests_gone"].value, meta["pull_requests_found_closed"].value) == (0, 0)
    assert archived(tmp_path, TODAY) == []
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=1))
    assert meta["pull_requests_found_closed"].value == 1
    assert pull_requests_asked(api).count(f"/repos/{REPO}/pulls/2") == 2
    assert [(r["payload"]["action"], r["payload"]["number"]) for r in archived(tmp_path, TODAY)] == [("closed", 2)]


def deleted_then_left_alone(tmp_path, httpserver, monkeypatch, api, number: int, at: dt.datetime, asked: int) -> None:
    """The pass at `at` takes pull request `number` for deleted, and the next one does not ask again:
    GitHub was asked about it `asked` times in all."""
    meta = run_pass(tmp_path, httpserver, monkeypatch, at)
    assert (meta["pull_requests_gone"].value, meta["pull_requests_suspected_gone"].value) == (1, 0)
    meta = run_pass(tmp_path, httpserver, monkeypatch, at + dt.timedelta(hours=1))
    assert meta["pull_requests_known_gone"].value == 1
    assert pull_requests_asked(api).count(f"/repos/{REPO}/pulls/{number}") == asked


def test_a_pull_request_github_says_is_gone_is_not_asked_about_again(tmp_path, httpserver, octokit, monkeypatch):
    """410 is GitHub saying the pull request was deleted, no passing error: one answer is enough."""
    lake_showing_open(tmp_path, octokit, (1,))
    api = github_with(httpserver)
    api.pulls = [p for p in api.pulls if p["number"] != 1]
    api.fail(r"/pulls/1$", reply(410, {"message": "This issue was deleted"}))
    deleted_then_left_alone(tmp_path, httpserver, monkeypatch, api, 1, HOUR_START, asked=1)


def test_a_first_404_is_remembered_through_a_pass_that_does_not_get_to_ask_again(tmp_path, httpserver, octokit,
                                                                               monkeypatch):
    """A pass asks about at most `MAX_LOOKUPS` pull requests: one GitHub answered 404 for once, past
    the limit on the next pass, keeps its note, so its next 404 makes it deleted (not a first 404
    again, which with more pull requests to ask about than the limit would keep it open for good)."""
    api, _ = noted_404s_then_one_lookup(tmp_path, httpserver, octokit, monkeypatch)
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=2))
    assert (meta["pull_requests_gone"].value, meta["pull_requests_suspected_gone"].value) == (1, 0)
    assert pull_requests_asked(api).count(f"/repos/{REPO}/pulls/3") == 2
    assert gone.load(Store(str(tmp_path / "archive"))).pulls == {REPO: [2, 3]}


def test_a_first_404_is_remembered_through_a_pass_github_refuses_the_list_to(tmp_path, httpserver, octokit,
                                                                           monkeypatch):
    """A pass that cannot read the list of open pull requests (a refusal) hears nothing of them: the
    first 404 an earlier pass heard stays noted, and the next 404 makes the pull request deleted."""
    lake_showing_open(tmp_path, octokit, (2,))
    api = github_with(httpserver)
    api.pulls = [p for p in api.pulls if p["number"] != 2]
    run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    api.fail(r"/pulls$", reply(403, {"message": "Resource not accessible by integration"}))
    with pytest.raises(Failure, match="Pull requests: read"):
        run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=1))
    assert pull_requests_asked(api).count(f"/repos/{REPO}/pulls/2") == 1
    meta = run_pass(tmp_path, httpserver, monkeypatch, HOUR_START + dt.timedelta(hours=2))
    assert (meta["pull_requests_gone"].value, meta["pull_requests_suspected_gone"].value) == (1, 0)


def noted_404s_then_one_lookup(tmp_path, httpserver, octokit, monkeypatch) -> tuple[FakeActions, list[str]]:
    """Pull requests #1-#3 shown open here and missing from GitHub's list (it lags), #2 and #3 deleted:
    an hour's pass asking about all three notes two first 404s; the next hour's may ask about one.
    The second pass's log lines."""
    import torchci_assets.backfill.pr_closes
    from torchci_assets.backfill.gaps import repair_gaps

    archive, lake = lake_showing_open(tmp_path, octokit, (1, 2, 3))
    api = github_with(httpserver)
    api.pulls = [p for p in api.pulls if p["number"] not in (2, 3)]
    api.fail(r"/pulls$", reply(200, []), reply(200, []))
    run_pass(tmp_path, httpserver, monkeypatch, HOUR_START)
    assert pull_requests_asked(api).count(f"/repos/{REPO}/pulls/3") == 1
    monkeypatch.setattr(torchci_assets.backfill.pr_closes, "MAX_LOOKUPS", 1)
    lines: list[str] = []
    repair_gaps(client(httpserver), archive, lake, HOUR_START + dt.timedelta(hours=1), log=lines.append,
                pulls_of=REPO)
    return api, lines


def test_a_pull_request_github_answered_404_for_is_asked_before_the_others(tmp_path, httpserver, octokit,
                                                                            monkeypatch):
    """With more pull requests to ask about than a pass's lookups, the ones GitHub answered 404 for
    once come first: the second 404 makes one deleted this hour, instead of it waiting, open on the
    HUD and in Dr. CI, until every pull request before it in number order is cleared."""
    api, _ = noted_404s_then_one_lookup(tmp_path, httpserver, octokit, monkeypatch)
    assert pull_requests_asked(api)[-2:] == [f"/repos/{REPO}/pulls", f"/repos/{REPO}/pulls/2"]
    assert gone.load(Store(str(tmp_path / "archive"))).pulls == {REPO: [2]}


def test_the_pass_counts_first_404s_it_kept_but_did_not_ask_about(tmp_path, httpserver, octokit, monkeypatch):
    api, lines = noted_404s_then_one_lookup(tmp_path, httpserver, octokit, monkeypatch)
    assert pull_requests_asked(api).count(f"/repos/{REPO}/pulls/3") == 1  # past the pass's one lookup
    [line] = [line for line in lines if line.startswith("gap repair:")]
    assert "1 GitHub no longer has (#2), 1 more answered 404 for before, not asked this pass" in line
