"""`torchci backfill`'s pushes from GitHub's activity list (`/repos/{o}/{r}/activity`, the pushes with
their times; each push's commits from GitHub's compare of its two ends, as its webhook lists them),
against the fake GitHub API on 127.0.0.1 (tests/fake_github_actions.py), its items GitHub's OpenAPI
examples with the pushes' values laid over them; the walk down the branch's first parents is what is
read where the list gives nothing, or GitHub refuses it to the credentials. A rate limit on the list
is waited out, or stops the command, never walked in its place."""

import datetime as dt
import gzip
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from hud_lake import sha
from test_push_commits import stack_push

from conftest import envelope
from fake_github_actions import FakeActions, reply
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.backfill.history import BackfillOptions, backfill
from torchci_assets.ingest.webhooks import ingest_webhook_day

REPO = "pytorch/pytorch"
TODAY = dt.date(2026, 11, 20)
NOV_1, NOV_2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)


def client(httpserver, **kw) -> GitHubResource:
    gh = GitHubResource(api_url=httpserver.url_for("").rstrip("/"), token="ghp_FAKE0123456789", **kw)
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


def listed(push: dict) -> list[str]:
    """The commits a push delivery lists, oldest first."""
    return [c["id"] for c in push["payload"]["commits"]]


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
    second day: the first day's push below it is read, and the 250 are the one push's, at its time."""
    api = FakeActions(httpserver)
    p0, d1 = "0a" * 20, "1a" * 20
    api.add_commit("main", p0, "f" * 40, "before the days", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", d1, p0, "the first day's", "2026-11-01T10:00:00Z", "alice")
    run_shas = old_run(api, d1, 250, "bbbb")
    api.add_push("main", "f" * 40, p0, "2026-10-25T09:01:00Z")
    api.add_push("main", p0, d1, "2026-11-01T10:05:00Z")
    api.add_push("main", d1, run_shas[-1], "2026-11-02T12:00:00Z")
    got = run(httpserver, tmp_path, NOV_1, NOV_2)
    assert [(at[:19], sha) for at, sha in got] == [("2026-11-01T10:05:00", d1), ("2026-11-02T12:00:00", run_shas[-1])]
    assert [listed(p) for p in push_records(tmp_path)] == [[d1], run_shas]


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
    assert [(at[:19], sha) for at, sha in got] == [("2026-11-01T09:00:00", c2)]
    assert [listed(p) for p in push_records(tmp_path)] == [[c1, c2]]
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
    [push] = push_records(tmp_path)
    assert (push["payload"]["before"], push["payload"]["forced"]) == (z, True)


def push_records(root: Path) -> list[dict]:
    """Every push delivery the backfill wrote (the archive's lines), oldest first."""
    out = []
    for p in sorted(root.rglob("*.jsonl.gz")):
        out += [x for x in map(orjson.loads, gzip.decompress(p.read_bytes()).splitlines()) if x["event"] == "push"]
    return sorted(out, key=lambda x: x["received_at"])


def push_table(archive: Store, day: str, tmp: Path) -> list[dict]:
    """The push table's rows the ingest makes of the archive's day, without the delivery's own columns."""
    lake = Lake.at(str(tmp))
    ingest_webhook_day(archive, lake, day, workers=1)
    own = ("delivery_id", "received_at", "location", "head_commit_timestamp")
    return [{k: v for k, v in r.items() if k not in own} for f in lake.files("push", [day])
            for r in pq.read_table(f, filesystem=lake.store.fs).to_pylist()]


def test_a_push_of_three_commits_is_one_push_with_the_rows_githubs_webhook_gives(tmp_path, httpserver, octokit):
    """The merge bot lands a stack of three commits in one push: the backfill writes one push, its
    `commits` the three oldest first, as GitHub's push webhook lists them, and the ingest makes of it
    the row it makes of the live webhook of that push (each commit on main's line, the head alone
    a pushed head)."""
    api = FakeActions(httpserver)
    api.add_commit("main", sha(10), "f" * 40, "main's head before the days", "2026-10-25T09:00:00Z", "alice")
    for i in (11, 12, 13):
        api.add_commit("main", sha(i), sha(i - 1), f"change {i}", f"2026-11-01T0{i - 10}:00:00Z", "bob")
    api.add_push("main", "f" * 40, sha(10), "2026-10-25T09:01:00Z")
    api.add_push("main", sha(10), sha(13), "2026-11-01T12:00:00Z")
    run(httpserver, tmp_path / "backfilled", NOV_1, NOV_1)
    [push] = push_records(tmp_path / "backfilled")
    p = push["payload"]
    assert (push["received_at"], p["before"], p["after"], p["head_commit"]["id"]) == \
        ("2026-11-01T12:00:00.000Z", sha(10), sha(13), sha(13))
    assert [c["id"] for c in p["commits"]] == [sha(11), sha(12), sha(13)]
    live = Store(str(tmp_path / "live"))
    live.write_bytes("webhooks/day=2026-11-01/live.jsonl", orjson.dumps(envelope(
        "push", "live", stack_push(octokit, 10, [11, 12, 13]), "2026-11-01T12:00:00.000Z")) + b"\n")
    backfilled = push_table(Store(str(tmp_path / "backfilled")), "2026-11-01", tmp_path / "lake-backfilled")
    assert backfilled == push_table(live, "2026-11-01", tmp_path / "lake-live")
    assert backfilled[0]["commits"] == [sha(11), sha(12), sha(13)]


def walkable(api: FakeActions) -> tuple[str, str]:
    """Main's head before the days, and two commits of the first day pushed at once at noon."""
    api.add_commit("main", sha(10), "f" * 40, "main's head before the days", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", sha(11), sha(10), "change 11", "2026-11-01T01:00:00Z", "bob")
    api.add_commit("main", sha(12), sha(11), "change 12", "2026-11-01T02:00:00Z", "bob")
    api.add_push("main", "f" * 40, sha(10), "2026-10-25T09:01:00Z")
    api.add_push("main", sha(10), sha(12), "2026-11-01T12:00:00Z")
    return sha(11), sha(12)


def test_an_activity_list_the_credentials_may_not_read_is_walked_and_the_output_says_so_once(tmp_path, httpserver):
    """A GitHub App without the permission the activity list needs is refused it (403, "Resource not
    accessible by integration"): the pushes are the walk's, and the output says why, once."""
    api = FakeActions(httpserver)
    c1, c2 = walkable(api)
    docs = "https://docs.github.com/rest/repos/repos#list-repository-activities"
    api.fail(r"/activity$", reply(403, {"message": "Resource not accessible by integration", "documentation_url": docs}))
    said: list[str] = []
    backfill(client(httpserver), Store(str(tmp_path)), BackfillOptions(REPO, NOV_1, NOV_1), log=said.append,
             today=TODAY)
    walked = [("2026-11-01T01:00:00", c1), ("2026-11-01T02:00:00", c2)]  # each at its own date
    assert [(at[:19], after) for at, after in pushes(tmp_path)] == walked
    refused = [s for s in said if "activity list" in s]
    assert len(refused) == 1 and "Resource not accessible by integration" in refused[0], said
    assert api.count(r"/activity$") == 1


def limit_spent(reset: int) -> object:
    return reply(403, {"message": "API rate limit exceeded for installation ID 1.",
                       "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"},
                 {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset),
                  "X-RateLimit-Resource": "core"})


def test_a_spent_rate_limit_on_the_activity_list_is_waited_out_and_the_list_read(tmp_path, httpserver):
    api = FakeActions(httpserver)
    _, c2 = walkable(api)
    api.fail(r"/activity$", limit_spent(int(dt.datetime.now().timestamp()) + 600))
    gh = client(httpserver, max_total_wait_s=3900)  # the command's budget
    waits: list[float] = []
    gh._sleep = waits.append
    backfill(gh, Store(str(tmp_path)), BackfillOptions(REPO, NOV_1, NOV_1), log=lambda s: None, today=TODAY)
    assert len(waits) == 1 and 590 < waits[0] <= 602
    assert [(at[:19], after) for at, after in pushes(tmp_path)] == [("2026-11-01T12:00:00", c2)]


def test_a_rate_limit_on_the_activity_list_past_the_wait_budget_stops_and_says_when_to_run_again(
        tmp_path, httpserver, monkeypatch, capsys):
    """An hour's budget spent with its reset two hours off: no pushes walked in its place (the list
    would have said otherwise), the command stops with exit 75, naming when GitHub's limit resets.
    The reset falls a second before a whole minute, so the minute named is the reset's (+1 s), not
    the next one: the time the client spent since it reckoned its wait does not move it (it did, in
    a run in sixty)."""
    from torchci_assets.backfill.cli import EXIT_STOPPED
    from torchci_assets.cli import main

    api = FakeActions(httpserver)
    walkable(api)
    reset = (int(dt.datetime.now(dt.timezone.utc).timestamp()) + 7200) // 60 * 60 + 59
    api.fail(r"/activity$", limit_spent(reset))
    monkeypatch.setenv("GITHUB_API_URL", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_SECRETvalue0123456789")
    monkeypatch.setenv("TORCHCI_ARCHIVE_URI", str(tmp_path))
    assert main(["backfill", "--repo", REPO, "--days", "1"]) == EXIT_STOPPED
    err = capsys.readouterr().err
    at = dt.datetime.fromtimestamp(-(-(reset + 1) // 60) * 60, dt.timezone.utc)  # the reset's next minute
    assert f"run the same command again from {at:%Y-%m-%d %H:%M} UTC" in err, err
    assert pushes(tmp_path) == []


def test_a_pushed_merge_commit_lists_the_merged_branchs_commits_as_its_webhook_does(tmp_path, httpserver):
    """A merge commit pushed onto main: GitHub's push webhook lists every commit the push brought
    (`before..after`), the merged branch's two as well as the merge, not main's first parents alone."""
    api = FakeActions(httpserver)
    api.add_commit("main", sha(10), "f" * 40, "main's head before the days", "2026-10-25T09:00:00Z", "alice")
    api.add_commit("main", sha(21), sha(10), "feature 1", "2026-11-01T01:00:00Z", "bob")
    api.add_commit("main", sha(22), sha(21), "feature 2", "2026-11-01T02:00:00Z", "bob")
    api.add_commit("main", sha(11), sha(10), "Merge branch 'feature'", "2026-11-01T03:00:00Z", "alice")
    merge = next(c for c in api.commits["main"] if c["sha"] == sha(11))
    merge["parents"].append({"sha": sha(22), "url": "", "html_url": ""})
    api.add_push("main", "f" * 40, sha(10), "2026-10-25T09:01:00Z")
    api.add_push("main", sha(10), sha(11), "2026-11-01T04:00:00Z")
    run(httpserver, tmp_path, NOV_1, NOV_1)
    assert [(p["payload"]["before"], p["payload"]["after"], listed(p)) for p in push_records(tmp_path)] == \
        [(sha(10), sha(11), [sha(21), sha(22), sha(11)])]
