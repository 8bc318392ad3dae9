"""A GitHub write said once when something else happens between a run that stopped half-way and
the next one: another comment of this project lands on the issue, a human reopens it in the same
second, or a human puts back a platform this project re-enabled.

Each run writes to a fake GitHub on 127.0.0.1 (fake_github_issues.py). A run that stopped after
its comment and before its change is played by GitHub refusing the change (the run gives up on
that issue, as a killed one does); the crash harness proper is test_github_writes_crash.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from fake_github_issues import FakeIssueTracker, json_response
from test_reenable import BOT, DAY, FIXED, HALF, REPO, clean, github, lake_with

from resources.github import GitHubError
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from torchci_assets.derived.flakiness.aggregates import AGGREGATE_LABEL, aggregate_body, aggregate_title, with_list
from torchci_assets.derived.flakiness.issue_text import MARKER, Evidence, condense
from torchci_assets.derived.flakiness.issues import IssueTracker, Wanted, file_disabled_issues
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.flakiness.reenable import MIN_DAYS, MIN_JOBS, Decision, PlatformRuns, act

REFUSED = {"message": "Validation Failed", "status": "422"}  # a change GitHub refuses: the run stops there
CLEAN = {"linux": PlatformRuns(MIN_JOBS, 0, MIN_JOBS, MIN_DAYS)}


def saying(fake: FakeIssueTracker, number: int, start: str) -> list[str]:
    return [c for c in fake.comments.get(number, []) if c.startswith(start)]


def test_a_widening_stopped_after_its_comment_is_not_said_again_after_a_daily_evidence_comment(httpserver, tmp_path):
    """The filing said it adds linux and stopped before the edit; the re-enabling then appended
    the day's rerun evidence (a marked comment of this project, which changes nothing). The next
    filing makes the edit and does not say it again."""
    fake = FakeIssueTracker(httpserver)
    n = fake.add(f"DISABLED {HALF}", "Platforms: mac\n\nflaky", age=dt.timedelta(days=20), user=BOT)["number"]
    gh, lake = github(httpserver), lake_with(tmp_path, [])
    on_linux = Wanted(HALF, ["mac"], ["mac", "linux"], 3)

    def filing(run_id: str):
        file_disabled_issues(IssueTracker(gh, REPO), lake, DAY, [on_linux], {HALF: Evidence(HALF)}, ["skipped"], 10,
                             run_id)

    fake.fail("update", json_response(422, REFUSED))
    filing("run-1")
    assert fake.issues[n]["body"].startswith("Platforms: mac\n")
    act(gh, REPO, dict(fake.issues[n]), Decision(HALF, "evidence"), {"mac": PlatformRuns(3, 2, 5, 5)}, DAY)
    filing("run-2")
    assert fake.issues[n]["body"].startswith("Platforms: mac, linux\n")
    assert len(saying(fake, n, "It flaked on linux as well")) == 1
    assert len(saying(fake, n, "Still flaky")) == 1


def test_a_close_stopped_after_its_comment_in_the_second_of_a_reopening_is_not_said_again(httpserver):
    """A human closed the issue and reopened it; in that same second (GitHub's times have no
    finer grain) the re-enabling said it closes the issue and stopped before the close. The next
    run closes it without a second comment: the issue was never closed after the comment."""
    fake = FakeIssueTracker(httpserver)
    reopened_at = dt.datetime(2026, 11, 20, 6, 0, 0, tzinfo=dt.timezone.utc)
    now = [reopened_at - dt.timedelta(minutes=5)]
    fake.clock = lambda: now[0]
    n = fake.add(f"DISABLED {FIXED}", "Platforms: linux", age=dt.timedelta(days=20), user=BOT)["number"]
    fake.close(n)
    now[0] = reopened_at
    gh, close = github(httpserver), Decision(FIXED, "close", dropped=["linux"])
    gh.request("PATCH", f"/repos/{REPO}/issues/{n}", json_body={"state": "open"})  # the human reopens it
    fake.fail("update", json_response(422, REFUSED))
    with pytest.raises(GitHubError):  # the run stops at the refused close
        act(gh, REPO, dict(fake.issues[n]), close, CLEAN, DAY)
    now[0] = reopened_at + dt.timedelta(hours=1)
    act(gh, REPO, dict(fake.issues[n]), close, CLEAN, DAY)
    assert fake.issues[n]["state"] == "closed"
    assert len(saying(fake, n, f"Re-enabling `{FIXED}`")) == 1


def test_a_close_a_human_undid_in_the_second_it_was_made_is_said_again(httpserver):
    """The other order within one second: closed with its comment, then reopened by a human in the
    same second. Clean again, it is closed again, and said again."""
    fake = FakeIssueTracker(httpserver)
    at = dt.datetime(2026, 11, 20, 6, 0, 0, tzinfo=dt.timezone.utc)
    fake.clock = lambda: at
    n = fake.add(f"DISABLED {FIXED}", "Platforms: linux", age=dt.timedelta(days=20), user=BOT)["number"]
    gh, close = github(httpserver), Decision(FIXED, "close", dropped=["linux"])
    act(gh, REPO, dict(fake.issues[n]), close, CLEAN, DAY)
    gh.request("PATCH", f"/repos/{REPO}/issues/{n}", json_body={"state": "open"})
    act(gh, REPO, dict(fake.issues[n]), close, CLEAN, DAY)
    assert fake.issues[n]["state"] == "closed"
    assert len(saying(fake, n, f"Re-enabling `{FIXED}`")) == 2


def lifecycle(httpserver, lake, tmp_path, run_id: str):
    return run_lifecycle(github(httpserver), lake, Store(str(tmp_path / "outputs")), DAY, run_id, REPO,
                         DisabledIssuesConfig(enabled=True), "test config")


def test_a_platform_a_human_put_back_is_re_enabled_again_with_a_comment_once(httpserver, tmp_path):
    """Re-enabled on linux (narrowed to win), a maintainer edits linux back onto the line; still
    clean there, the next run narrows it again and says so again, once, a run stopped between
    that comment and the edit included."""
    fake = FakeIssueTracker(httpserver)
    n = fake.add(f"DISABLED {HALF}", "Platforms: linux, win\n\nflaky", age=dt.timedelta(days=20), user=BOT)["number"]
    lake = lake_with(tmp_path, clean(HALF, "linux"))
    lifecycle(httpserver, lake, tmp_path, "run-1")
    assert fake.issues[n]["body"].startswith("Platforms: win\n")
    github(httpserver).request("PATCH", f"/repos/{REPO}/issues/{n}", json_body={"body": "Platforms: linux, win\n\nflaky"})
    fake.fail("update", json_response(422, REFUSED))
    lifecycle(httpserver, lake, tmp_path, "run-2")
    assert fake.issues[n]["body"].startswith("Platforms: linux, win\n")
    lifecycle(httpserver, lake, tmp_path, "run-3")
    assert fake.issues[n]["body"].startswith("Platforms: win\n")
    assert len(saying(fake, n, f"Re-enabling `{HALF}` on linux")) == 2


def test_an_aggregates_line_a_human_put_back_is_narrowed_again_with_a_comment_once(httpserver, tmp_path):
    """The same in an aggregate: its first test's line narrowed to win, a maintainer puts linux
    back with the list's own words; the next run narrows it again, said again, once."""
    fake = FakeIssueTracker(httpserver)
    tests = [f"test_op_{i} (__main__.TestBurst)" for i in range(6)]
    lines = {t: ["linux", "win"] for t in tests}
    agg = fake.add(aggregate_title("test_burst.py"), aggregate_body("test_burst.py", lines, f"Platforms: linux\n{MARKER}"),
                   age=dt.timedelta(days=20), user=BOT, labels=["skipped", AGGREGATE_LABEL])
    n, lake = agg["number"], lake_with(tmp_path, clean(tests[0], "linux"))
    lifecycle(httpserver, lake, tmp_path, "run-1")
    assert condense([fake.issues[n]])[tests[0]][2] == ["win"]
    put_back = with_list(fake.issues[n]["body"], lines)
    github(httpserver).request("PATCH", f"/repos/{REPO}/issues/{n}", json_body={"body": put_back})
    fake.fail("update", json_response(422, REFUSED))
    lifecycle(httpserver, lake, tmp_path, "run-2")
    assert condense([fake.issues[n]])[tests[0]][2] == ["linux", "win"]
    lifecycle(httpserver, lake, tmp_path, "run-3")
    assert condense([fake.issues[n]])[tests[0]][2] == ["win"]
    assert len(saying(fake, n, "Re-enabling tests of this issue")) == 2
