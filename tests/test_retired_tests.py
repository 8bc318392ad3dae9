"""DISABLED issues of deleted tests: found from the daily test aggregates and closed once, against
the fake GitHub API."""

import datetime as dt
import shutil

import pyarrow as pa
import pytest
from fake_github_issues import FakeIssueTracker, json_response
from test_reenable import DAY  # 12 days before the real clock, by which the fake GitHub dates issues

from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from torchci_assets.derived.flakiness.issues import LEDGER_TABLE
from torchci_assets.derived.flakiness.lists import DISABLED_TESTS_PATH, dumps
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.flakiness import retired
from torchci_assets.derived.flakiness.retired import RETIRED_MARKER, find_absent

REPO = "pytorch/pytorch"
ON = DisabledIssuesConfig(enabled=True)
GONE, ALIVE = "test_gone (__main__.TestA)", "test_alive (__main__.TestA)"
MOVED, NEVER = "test_moved (__main__.TestB)", "test_never (__main__.TestC)"
EARLY = "test_early (__main__.TestD)"
BOT = "pytorch-bot[bot]"  # PyTorch's bot, which files DISABLED issues


def day(offset: int) -> str:
    return (dt.date.fromisoformat(DAY) - dt.timedelta(days=offset)).isoformat()


def stats(rows: list[tuple[str, str, str]], on: str) -> pa.Table:
    """test_daily_stats rows (file, classname, name) of one day, with the columns the search reads."""
    at = dt.datetime.fromisoformat(f"{on}T12:00:00+00:00")
    return pa.Table.from_pylist([{"file": f, "classname": c, "name": n, "skipped": 1, "last_seen": at}
                                 for f, c, n in rows])


@pytest.fixture
def lake(tmp_path) -> Lake:
    """Twenty days before the window: every test runs. In the window (the 7 days up to DAY):
    test_gone is gone while test_a.py reports; test_b.py stopped altogether; test_d.py reported
    (another test) only on the window's first day; test_never never ran."""
    lk = Lake.at(str(tmp_path / "lake"))
    before = [("test_a.py", "test_a.TestA", "test_gone"), ("test_a.py", "test_a.TestA", "test_alive"),
              ("test_b.py", "TestB", "test_moved"), ("test_d.py", "TestD", "test_early")]
    for n in range(7, 27):
        lk.write("test_daily_stats", day(n), stats(before, day(n)))
    for n in range(0, 7):
        today = [("test_a.py", "test_a.TestA", "test_alive")] + ([("test_d.py", "TestD", "test_other")] if n == 6 else [])
        lk.write("test_daily_stats", day(n), stats(today, day(n)))
    return lk


def test_a_test_gone_while_its_file_reports_is_retired_and_the_others_are_not(lake):
    found = find_absent(lake, DAY, [GONE, ALIVE, MOVED, NEVER, EARLY])
    assert [(a.test, a.status, a.file) for a in found.absent] == [
        (EARLY, "file_gone", "test_d.py"), (GONE, "retired", "test_a.py"),
        (MOVED, "file_gone", "test_b.py"), (NEVER, "unknown", None)]
    assert found.of("retired")[0].last_seen.date().isoformat() == day(7)


def test_each_days_stats_are_read_once_and_a_rewritten_day_again(lake, extracts_made):
    """Every refresh asks about 27 days here (37 in a deployment): each test_daily_stats file is
    read once (what the search needs of it is kept), and a day rewritten since is read again."""
    first = find_absent(lake, DAY, [GONE, ALIVE, MOVED, NEVER, EARLY])
    assert len(extracts_made) == 27
    extracts_made.clear()
    assert find_absent(lake, DAY, [GONE, ALIVE, MOVED, NEVER, EARLY]) == first and extracts_made == []
    lake.write("test_daily_stats", day(2), stats([("test_a.py", "test_a.TestA", "test_gone")], day(2)))  # back
    again = find_absent(lake, DAY, [GONE, ALIVE, MOVED, NEVER, EARLY])
    assert extracts_made == [f"day={day(2)}/data.parquet"] and GONE not in [a.test for a in again.absent]


def test_a_window_with_a_missing_day_decides_nothing(lake, tmp_path):
    shutil.rmtree(tmp_path / "lake" / "test_daily_stats" / f"day={day(3)}")
    found = find_absent(lake, DAY, [GONE])
    assert found.absent == [] and day(3) in found.skipped


def github(httpserver, **kw) -> GitHubResource:
    kw.setdefault("backoff_base_s", 0.0)
    return GitHubResource(api_url=httpserver.url_for(""), token="t0ken", search_interval_s=0.0, **kw)


def retire(lake, gh, outputs, settings=ON, log=None):
    """The lifecycle step as the asset runs it (no filing before it: the open issues are read)."""
    return run_lifecycle(gh, lake, outputs, DAY, "run-0001", REPO, settings, "test config",
                         log=(log.append if log is not None else lambda s: None)).retirement


def ledger(lake) -> list[dict]:
    con = connect()
    if not lake.register(con, LEDGER_TABLE, [DAY], name="l"):
        return []
    return con.sql('SELECT * FROM l ORDER BY "at"').to_arrow_table().to_pylist()


def test_the_issue_of_a_deleted_test_is_commented_and_closed_once(httpserver, lake, tmp_path):
    fake = FakeIssueTracker(httpserver)
    gone = fake.add(f"DISABLED {GONE}", "Platforms: linux", user=BOT)
    moved = fake.add(f"DISABLED {MOVED}", "Platforms: win", user=BOT)
    fake.add(f"DISABLED {ALIVE}", "", user=BOT)
    outputs = Store(str(tmp_path / "outputs"))
    result = retire(lake, github(httpserver), outputs)
    assert [r["test"] for r in result.rows] == [GONE] and [a.test for a in result.of("file_gone")] == [MOVED]
    assert fake.issues[gone["number"]]["state"] == "closed" and fake.issues[moved["number"]]["state"] == "open"
    (comment,) = fake.comments[gone["number"]]
    assert RETIRED_MARKER in comment and "test_a.py" in comment and "reopen" in comment
    assert [(r["test"], r["action"], r["issue_number"]) for r in ledger(lake)] == [(GONE, "closed", gone["number"])]

    again = retire(lake, github(httpserver), outputs)  # closed now: nothing more to do
    assert again.rows == [] and len(fake.comments[gone["number"]]) == 1


def test_an_issue_titled_with_a_dotted_suite_is_closed_with_a_comment_naming_it_so(httpserver, lake, tmp_path):
    """PyTorch's runner matches a disabled test by its class name alone, so `test_gone (test_a.TestA)`
    is the deleted test's issue; the comment names the test as the title does."""
    fake = FakeIssueTracker(httpserver)
    dotted = fake.add("DISABLED test_gone (test_a.TestA)", "Platforms: linux", user=BOT)
    result = retire(lake, github(httpserver), Store(str(tmp_path / "outputs")))
    assert [r["test"] for r in result.rows] == [GONE] and fake.issues[dotted["number"]]["state"] == "closed"
    (comment,) = fake.comments[dotted["number"]]
    assert comment.startswith("Closing: `test_gone (test_a.TestA)` has not appeared in any test report")


def test_a_crash_between_the_comment_and_the_close_comments_once(httpserver, lake, tmp_path):
    fake = FakeIssueTracker(httpserver)
    gone = fake.add(f"DISABLED {GONE}", "Platforms: linux", user=BOT)
    fake.fail("update", json_response(502, {"message": "Bad Gateway"}))
    outputs = Store(str(tmp_path / "outputs"))
    first = retire(lake, github(httpserver, max_retries=0), outputs)
    assert first.rows == [] and GONE in first.failed and fake.issues[gone["number"]]["state"] == "open"
    second = retire(lake, github(httpserver, max_retries=0), outputs)
    assert [r["action"] for r in second.rows] == ["closed"] and "already there" in second.rows[0]["detail"]
    assert fake.issues[gone["number"]]["state"] == "closed" and len(fake.comments[gone["number"]]) == 1


def test_many_deletions_at_once_are_refused_as_a_likely_outage(httpserver, lake, tmp_path):
    fake = FakeIssueTracker(httpserver)
    for i in range(12):
        fake.add(f"DISABLED test_gone{i} (__main__.TestA)", "", user=BOT)
    for n in range(7, 27):  # twelve tests of test_a.py that ran before the window and not in it
        lake.write("test_daily_stats", day(n), stats(
            [("test_a.py", "TestA", f"test_gone{i}") for i in range(12)] + [("test_a.py", "TestA", "test_alive")], day(n)))
    result = retire(lake, github(httpserver), Store(str(tmp_path / "outputs")))
    assert result.rows == [] and "12 of 12" in result.skipped
    assert all(i["state"] == "open" for i in fake.issues.values())


def test_without_credentials_it_logs_and_records_what_it_would_close(httpserver, lake, tmp_path):
    fake = FakeIssueTracker(httpserver)
    outputs = Store(str(tmp_path / "outputs"))
    outputs.write_bytes(DISABLED_TESTS_PATH, dumps({GONE: ["local-1", "", []], ALIVE: ["local-2", "", []]}))
    logs = []
    result = retire(lake, GitHubResource(api_url=httpserver.url_for("")), outputs, log=logs)
    assert fake.requests == []
    assert [(r["test"], r["action"]) for r in ledger(lake)] == [(GONE, "dry_run")] == \
        [(r["test"], r["action"]) for r in result.rows]
    assert any(m.startswith(f"DRY RUN: would comment on the DISABLED issue of {GONE} and close it as deleted") for m in logs)
    assert "does not say" not in result.rows[0]["detail"]  # a local id names no issue: a live run files one


def test_the_dry_runs_plan_names_a_test_as_its_published_entry_writes_it(httpserver, lake, tmp_path):
    """An entry written with a dotted suite (its issue's title, or its aggregate's line) disables the
    test in PyTorch's runner; the plan names the issue by that entry, as the live comment does."""
    outputs = Store(str(tmp_path / "outputs"))
    outputs.write_bytes(DISABLED_TESTS_PATH, dumps({"test_gone (test_a.TestA)": ["1", "", []], ALIVE: ["2", "", []]}))
    retire(lake, GitHubResource(api_url=httpserver.url_for("")), outputs)
    (row,) = ledger(lake)
    assert row["test"] == GONE and row["detail"].startswith(
        "would comment on the DISABLED issue of test_gone (test_a.TestA) and close it as deleted")
    # the only entry naming #1: the list does not say whether it is the test's issue or an aggregate's last line
    assert row["detail"].endswith("; the published list does not say whether #1 is its own issue or an aggregate "
                                  "listing it alone, on which a live run drops its line and closes the aggregate, "
                                  "with one comment")


def test_a_strangers_issue_of_a_deleted_test_is_left_alone_and_a_maintainers_is_closed(httpserver, lake, tmp_path):
    """Anyone can open a DISABLED issue: one whose author may not disable tests disables nothing
    and is not this project's to comment on or close, however gone its test is."""
    fake = FakeIssueTracker(httpserver)
    theirs = fake.add(f"DISABLED {GONE}", "Platforms: linux", user="a-stranger")
    outputs, logs = Store(str(tmp_path / "outputs")), []
    assert retire(lake, github(httpserver), outputs, log=logs).rows == []
    assert fake.issues[theirs["number"]]["state"] == "open" and theirs["number"] not in fake.comments
    assert f"#{theirs['number']} ({GONE}) is left alone: its author a-stranger may not disable tests" in logs

    fake.permissions["a-maintainer"] = "write"  # a maintainer files one too: that one is retired
    mine = fake.add(f"DISABLED {GONE}", "Platforms: linux", user="a-maintainer")
    result = retire(lake, github(httpserver), outputs)
    assert [(r["test"], r["issue_number"]) for r in result.rows] == [(GONE, mine["number"])]
    assert fake.issues[mine["number"]]["state"] == "closed"
    assert fake.issues[theirs["number"]]["state"] == "open" and theirs["number"] not in fake.comments


def test_a_strangers_issue_takes_none_of_the_runs_closes(httpserver, lake, tmp_path, monkeypatch):
    """The issues closed per run are capped: a stranger's issue, left alone, must not use the cap
    up and keep the bot's issue of another deleted test open."""
    also = "test_also_gone (__main__.TestA)"  # before GONE in the order closes are made
    for n in range(7, 27):
        lake.write("test_daily_stats", day(n), stats([("test_a.py", "test_a.TestA", "test_gone"),
                                                      ("test_a.py", "test_a.TestA", "test_also_gone"),
                                                      ("test_a.py", "test_a.TestA", "test_alive")], day(n)))
    monkeypatch.setattr(retired, "MAX_CLOSED_PER_RUN", 1)
    fake = FakeIssueTracker(httpserver)
    theirs = fake.add(f"DISABLED {also}", "", user="a-stranger")
    mine = fake.add(f"DISABLED {GONE}", "", user=BOT)
    result = retire(lake, github(httpserver), Store(str(tmp_path / "outputs")))
    assert [r["test"] for r in result.rows] == [GONE] and [a.test for a in result.of("retired")] == [also, GONE]
    assert fake.issues[mine["number"]]["state"] == "closed" and fake.issues[theirs["number"]]["state"] == "open"


def test_an_issue_a_human_reopened_and_retired_again_is_said_again(httpserver, lake, tmp_path):
    """Closed as deleted, reopened by a human (as the comment invites), then closed as deleted
    again: the second close says why too. A close GitHub refused is still said once (above)."""
    fake = FakeIssueTracker(httpserver)
    issue = fake.add(f"DISABLED {GONE}", "Platforms: linux", user=BOT)
    gh, gone = github(httpserver), retired.Absent(GONE, "test_a.py", None, "retired")
    retired.close_retired(gh, REPO, dict(issue), gone)
    gh.request("PATCH", f"/repos/{REPO}/issues/{issue['number']}", json_body={"state": "open"})
    assert "already there" not in retired.close_retired(gh, REPO, dict(fake.issues[issue["number"]]), gone)
    assert fake.issues[issue["number"]]["state"] == "closed" and len(fake.comments[issue["number"]]) == 2
