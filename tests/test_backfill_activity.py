"""`torchci backfill`'s pushes from GitHub's activity list (`/repos/{o}/{r}/activity`, the pushes with
their times), against the fake GitHub API on 127.0.0.1 (tests/fake_github_actions.py), its items
GitHub's OpenAPI example with the pushes' values laid over it; the walk down the branch's first
parents is what is read where the list gives nothing."""

import datetime as dt
import gzip
from pathlib import Path

import orjson

from fake_github_actions import FakeActions, reply
from resources.github import GitHubResource
from resources.storage import Store
from torchci_assets.backfill.history import BackfillOptions, backfill

REPO = "pytorch/pytorch"
TODAY = dt.date(2026, 11, 20)
NOV_1, NOV_2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)


def client(httpserver) -> GitHubResource:
    gh = GitHubResource(api_url=httpserver.url_for("").rstrip("/"), token="ghp_FAKE0123456789")
    gh._sleep = lambda s: None
    return gh


def pushes(root: Path) -> list[tuple[str, str]]:
    """(received_at, after) of every push the backfill wrote, oldest first."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and str(p.relative_to(root)).startswith("webhooks/"):
            out += [(x["received_at"], x["payload"]["after"]) for x in map(orjson.loads, gzip.decompress(p.read_bytes()).splitlines())
                    if x["event"] == "push"]
    return sorted(out)


def run(httpserver, tmp_path: Path, since: dt.date, until: dt.date) -> list[tuple[str, str]]:
    backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, since, until), log=lambda s: None,
             today=TODAY)
    return pushes(tmp_path)


def old_run(api: FakeActions, parent: str, n: int, prefix: str) -> list[str]:
    """`n` commits on `parent`, all made in October (before the days read), oldest first."""
    shas = []
    for i in range(n):
        at = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=i)
        sha = f"{prefix}{i:036x}"
        api.add_commit("main", sha, parent, f"long-lived {i}", at.strftime("%Y-%m-%dT%H:%M:%SZ"), "bob")
        shas.append(sha)
        parent = sha
    return shas


def test_a_day_below_a_long_run_of_old_commits_pushed_at_once_keeps_its_pushes(tmp_path, httpserver):
    """A long-lived branch of 250 commits made in October, fast-forwarded onto main in one push on the
    second day: the first day's push below it is read, and the 250 are filed at the push's time."""
    api = FakeActions(httpserver)
    p0, d1 = "0a" * 20, "1a" * 20
    api.add_commit("main", p0, "f" * 40, "before the days", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", d1, p0, "the first day's", "2026-11-01T10:00:00Z", "alice")
    run_shas = old_run(api, d1, 250, "bbbb")
    api.add_push("main", "f" * 40, p0, "2026-10-25T09:01:00Z")
    api.add_push("main", p0, d1, "2026-11-01T10:05:00Z")
    api.add_push("main", d1, run_shas[-1], "2026-11-02T12:00:00Z")
    got = run(httpserver, tmp_path, NOV_1, NOV_2)
    assert [sha for _, sha in got] == [d1, *run_shas]
    assert got[0][0].startswith("2026-11-01T10:05:00")
    assert all(at.startswith("2026-11-02T12:00:00") for at, _ in got[1:]), got[1:3]


def test_commits_made_before_the_first_day_and_pushed_on_it_onto_as_old_ones_are_its_pushes(tmp_path, httpserver):
    """Two commits made in October, pushed on the first day onto main's October head: the walk can
    only file them at their own (October) dates; the activity list says when they were pushed."""
    api = FakeActions(httpserver)
    p0, c1, c2 = "0a" * 20, "1a" * 20, "1b" * 20
    api.add_commit("main", p0, "f" * 40, "main's head before the days", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", c1, p0, "made in October", "2026-10-28T09:00:00Z", "bob")
    api.add_commit("main", c2, c1, "also", "2026-10-29T09:00:00Z", "bob")
    api.add_push("main", "f" * 40, p0, "2026-10-25T09:01:00Z")
    api.add_push("main", p0, c2, "2026-11-01T09:00:00Z")
    got = run(httpserver, tmp_path, NOV_1, NOV_1)
    assert [sha for _, sha in got] == [c1, c2]
    assert all(at.startswith("2026-11-01T09:00:00") for at, _ in got), got
    # one request: the list is read back to the first push before the days
    assert api.count(r"/activity$") == 1


def test_days_older_than_the_activity_list_are_walked_and_a_missing_list_is_walked_whole(tmp_path, httpserver):
    """GitHub keeps its activity list for a while only: below its oldest push, the commits are filed as
    the walk files them (no later than that push); a list GitHub does not have (404) is no push at all."""
    api = FakeActions(httpserver)
    p0, d1, d2 = "0a" * 20, "1a" * 20, "2a" * 20
    api.add_commit("main", p0, "f" * 40, "before the days", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", d1, p0, "the first day's", "2026-11-01T10:00:00Z", "alice")
    api.add_commit("main", d2, d1, "made on the first day", "2026-11-01T23:00:00Z", "alice")
    api.add_push("main", d1, d2, "2026-11-02T08:00:00Z")  # the oldest push GitHub still lists
    got = run(httpserver, tmp_path / "kept", NOV_1, NOV_2)
    assert [(at[:19], sha) for at, sha in got] == [("2026-11-01T10:00:00", d1), ("2026-11-02T08:00:00", d2)], got
    api.fail(r"/activity$", reply(404, {"message": "Not Found"}))
    walked = run(httpserver, tmp_path / "walked", NOV_1, NOV_2)
    assert [(at[:19], sha) for at, sha in walked] == [("2026-11-01T10:00:00", d1), ("2026-11-01T23:00:00", d2)]


def test_a_force_push_files_its_head_and_not_the_history_below_it(tmp_path, httpserver):
    """A force push on the first day puts main back on a commit of October, below the head it
    replaced: the history under the new head was on the branch before (GitHub says only what the
    head was before the push, not what they share), so only the new head is a push of the day."""
    api = FakeActions(httpserver)
    p0, z, y = "0a" * 20, "0b" * 20, "1a" * 20
    shas = old_run(api, "f" * 40, 30, "cccc")
    api.add_commit("main", p0, shas[-1], "October's head", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", y, p0, "the fixed-up head", "2026-11-01T11:00:00Z", "alice")
    api.add_push("main", p0, z, "2026-10-26T09:00:00Z")  # z: a head the force push threw away
    api.add_push("main", z, y, "2026-11-01T12:00:00Z", kind="force_push")
    got = run(httpserver, tmp_path, NOV_1, NOV_1)
    assert [(at[:19], sha) for at, sha in got] == [("2026-11-01T12:00:00", y)], got[:3]
