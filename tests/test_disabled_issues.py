"""Flaky verdicts become DISABLED issues, and the disabled list comes from the issues.

The `disabled_issues` and `disabled_tests` assets run through Dagster on a lake built from a
hand-made CI history (the real daily aggregates and flaky verdict, as in test_flaky.py), against
a real HTTP server on 127.0.0.1 playing GitHub's issues and search API (fake_github_issues.py).
"""

import datetime as dt
import json
import re
import shutil
import threading
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from fake_github_issues import ACCOUNT, FakeIssueTracker, Scripted, json_response
from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.config import DisabledIssuesConfig
from test_flaky import LINUX, START, WIN, History, main_history
from torchci_assets.derived.flakiness import issues as issues_module
from torchci_assets.derived.flakiness.assets import disabled_issues_asset, disabled_tests_asset, unstable_jobs_asset
from torchci_assets.derived.flakiness.flaky import build_flaky_tests
from torchci_assets.derived.flakiness.issue_text import MARKER, Evidence, condense, parse_platforms
from torchci_assets.derived.flakiness.aggregates import aggregate_body, aggregate_title
from torchci_assets.derived.flakiness.issues import (IssueTracker, Wanted, close_own_twins, file_disabled_issues,
                                                     keep_own_logins)
from torchci_assets.derived.flakiness.job_issues import Permissions
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle
from torchci_assets.derived.flakiness.lists import (DISABLED_TESTS_BEFORE, DISABLED_TESTS_DAY, DISABLED_TESTS_PATH,
                                                    REENABLED_TESTS_PATH, stable_id)
from torchci_assets.ingest.increments import REFRESH_TAG, REFRESH_VALUE

TOKEN = "ghp_disabledissuestest000000000000000"
TEST_A = "test_a (__main__.TestX)"  # flaked on linux; ran on linux and win: disabled on linux
REFRESH = {REFRESH_TAG: REFRESH_VALUE}  # the tags of an intra-day refresh run
TEST_B = "test_b (__main__.TestX)"  # flaked on linux and win, all it ran on: disabled everywhere
CONFIG = """
upstream: {{repo: pytorch/pytorch, branches: [main]}}
poll_commits: false
disabled_issues: {{enabled: {enabled}, max_new_per_run: {max_new}}}
"""


def configure(tmp_path, monkeypatch, enabled=True, max_new=10):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(enabled=str(enabled).lower(), max_new=max_new))
    monkeypatch.setenv("TORCHCI_CONFIG", str(path))


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch)


def built_world(h: History, tmp_path_factory, name: str) -> tuple:
    """The lake of `h`'s jobs, its flaky verdict built for its last day: (root, day, h)."""
    root = tmp_path_factory.mktemp(name)
    lake = Lake.at(str(root / "lake"))
    day = h.build(lake)[-1]
    build_flaky_tests(lake, day)
    return root, day, h


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    h = History(["test_a", "test_b", "test_ok"])
    for i in range(40):
        h.run(i, LINUX, {"test_a": "flake"} if i in (5, 17, 30) else {"test_b": "flake"} if i in (8, 20, 33) else None)
        h.run(i, WIN, {"test_b": "flake"} if i in (9, 21, 34) else None)
    return built_world(h, tmp_path_factory, "history")


class World:
    def __init__(self, built, tmp_path):
        root, self.day, self.history = built
        shutil.copytree(root / "lake", tmp_path / "lake")
        self.lake_uri, self.outputs_uri = str(tmp_path / "lake"), str(tmp_path / "outputs")
        self.lake = Lake.at(self.lake_uri)

    def published(self, path=DISABLED_TESTS_PATH) -> dict:
        with open(f"{self.outputs_uri}/{path}") as f:
            return json.load(f)

    def closed_at(self) -> dict:
        """test -> closed_at of the day's disabled_tests table."""
        return {r["test"]: r["closed_at"] for r in self.lake.read_files(self.lake.files("disabled_tests", [self.day]))
                .to_pylist()}

    def ledger(self) -> list[dict]:
        con = connect()
        if self.lake.register(con, "disabled_issues") == 0:
            return []
        cur = con.execute("SELECT * FROM disabled_issues ORDER BY \"at\"")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


@pytest.fixture
def world(built, tmp_path):
    return World(built, tmp_path)


def gets(fake: FakeIssueTracker, path: str) -> int:
    """GET requests of exactly `path`."""
    return sum(1 for m, p, _ in fake.requests if m == "GET" and p == path)


def github_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def github(httpserver, **kw):
    kw.setdefault("token", TOKEN)
    kw.update(backoff_base_s=0.01, search_interval_s=0, write_interval_s=0)
    return GitHubResource(api_url=httpserver.url_for(""), **kw)


def run(world, gh, instance=None, day=None, disabled_tests_config=None, tags=None):
    """One run of the assets that read the DISABLED and UNSTABLE issues back, as a refresh runs them."""
    return dg.materialize(
        [disabled_issues_asset, disabled_tests_asset, unstable_jobs_asset], partition_key=day or world.day,
        instance=instance, tags=tags,
        raise_on_error=False, resources={"lake": LakeResource(uri=world.lake_uri), "github": gh,
                                         "outputs": OutputsResource(uri=world.outputs_uri)},
        run_config={"ops": {"disabled_tests": {"config": disabled_tests_config}}} if disabled_tests_config else None)


def as_yesterdays(world) -> None:
    """Make the published disabled list the previous day's, as the next day's first run finds it."""
    store = Store(world.outputs_uri)
    previous = (dt.date.fromisoformat(world.day) - dt.timedelta(days=1)).isoformat()
    store.write_bytes(DISABLED_TESTS_DAY, json.dumps({"day": previous}).encode())
    store.write_bytes(DISABLED_TESTS_BEFORE, b"{}")


def metadata(result, asset) -> dict:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def number(issue) -> str:
    return str(issue["number"])


def entry(issue, platforms) -> list:
    return [number(issue), issue["html_url"], platforms]


def test_flaky_tests_get_issues_with_their_evidence_and_the_list_is_read_back_from_the_issues(
        httpserver, world, instance):
    fake = FakeIssueTracker(httpserver)
    # a maintainer's issue disables its test (a stranger's would not: see the test below)
    human = fake.add("DISABLED test_human (__main__.TestZ)", "Platforms: mac\r\n\r\nflaky on M1", user="a-maintainer")
    job = fake.add("DISABLED pull / linux-jammy / test (default)", "a job", user="a-maintainer")  # not a test
    fake.add("UNSTABLE trunk / rocm / test (default)", "a job", user="a-stranger")  # may not mark jobs
    fake.permissions["a-maintainer"] = "admin"
    fake.files["test/test_x.py"] = '# Owner(s): ["module: nn"]\n\nimport torch\n'
    fake.add("DISABLED test_pr (__main__.TestZ)", "", pull_request=True)
    fake.add("test_conv is flaky, please DISABLED it", "")

    result = run(world, github(httpserver), instance)
    assert result.success

    (a,) = fake.titled(f"DISABLED {TEST_A}")
    (b,) = fake.titled(f"DISABLED {TEST_B}")
    assert parse_platforms(a["body"]) == ["linux"] and a["body"].startswith("Platforms: linux\n")
    assert parse_platforms(b["body"]) == [] and b["body"].startswith("Platforms:\n")
    # the configured labels, then the owners' from the test file's header (read once for both tests)
    assert [x["name"] for x in a["labels"]] == ["skipped", "module: flaky-tests", "module: nn", "triaged"]
    assert fake.count("GET", "/repos/pytorch/pytorch/contents/test/test_x.py") == 1
    assert MARKER in a["body"] and "| linux | 40 | 0 | 3 | 3 | 0 | 0 |" in a["body"]
    # a link to every job of the history where the test flaked (6, within the 10), with its run id
    flaked = {(r["workflow_id"], r["job_id"]) for rows in world.history.rows.values() for r in rows
              if r["name"] == "test_b" and r["rerun_count"] > 0}
    links = re.findall(r"/pytorch/pytorch/actions/runs/(\d+)/job/(\d+)\)", b["body"])
    assert len(flaked) == 6 and sorted((int(r), int(j)) for r, j in links) == sorted(flaked)
    assert "| win | 40 | 0 | 3 | 3 | 0 | 0 |" in b["body"]

    assert world.published() == {TEST_A: entry(a, ["linux"]), TEST_B: entry(b, []),
                                  "test_human (__main__.TestZ)": entry(human, ["mac"])}
    rows = world.ledger()
    assert sorted((r["test"], r["action"], r["issue_number"]) for r in rows) == \
        sorted([(TEST_A, "created", a["number"]), (TEST_B, "created", b["number"])])
    assert {r["run_id"] for r in rows} == {result.run_id}
    meta = metadata(result, "disabled_issues")
    assert (meta["dry_run"], meta["created_count"], meta["found_count"], meta["open_issues"]) == (False, 2, 0, 1)
    assert metadata(result, "disabled_tests")["source"] == "open DISABLED issues of pytorch/pytorch"
    # the job lists come from the same read-back: the maintainer's job issue, not the stranger's
    assert world.published("stats/disabled-jobs.json") == {"pull / linux-jammy / test (default)": [
        "a-maintainer", number(job), job["html_url"], "pull", "linux-jammy", "test (default)"]}
    assert world.published("stats/unstable-jobs.json") == {}
    assert (metadata(result, "disabled_tests")["disabled_jobs"], metadata(result, "unstable_jobs")["unstable_jobs"]) \
        == (1, 0)
    assert all(c.passed for c in result.get_asset_check_evaluations())
    assert all(TOKEN not in e.user_message for e in instance.all_logs(result.run_id))


def test_a_second_run_finds_the_issues_and_files_nothing(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    assert run(world, github(httpserver)).success
    first = world.published()
    again = run(world, github(httpserver))
    assert again.success
    assert fake.count("POST", "/repos/pytorch/pytorch/issues") == 2 and fake.count("PATCH") == 0
    assert world.published() == first
    assert sorted(r["action"] for r in world.ledger() if r["run_id"] == again.run_id) == ["found", "found"]
    assert metadata(again, "disabled_issues")["found_count"] == 2


def test_a_refresh_with_nothing_changed_reads_only_the_issues_changed_since(httpserver, world):
    """A refresh every minute must not search every open DISABLED issue again: with the same tests
    to disable and no DISABLED issue changed since the last filing, it reads the issue list's
    changes since then (one request), files and records nothing, and publishes the same list."""
    fake = FakeIssueTracker(httpserver)
    frozen = dt.datetime.now(dt.timezone.utc)
    fake.clock = lambda: frozen  # every change in the same second: updated_at alone cannot tell them apart
    assert run(world, github(httpserver), tags=REFRESH).success
    first, ledger = world.published(), world.ledger()
    def disabled_searches():
        return sum(1 for m, p, q in fake.requests if p == "/search/issues" and "DISABLED" in q.get("q", ""))
    searches, posts, start = disabled_searches(), fake.count("POST"), len(fake.requests)
    again = run(world, github(httpserver), tags=REFRESH)
    assert again.success and world.published() == first and world.ledger() == ledger
    assert disabled_searches() == searches and fake.count("POST") == posts
    assert [p for m, p, q in fake.requests[start:] if "since" in q] == ["/repos/pytorch/pytorch/issues"] * 2
    meta = metadata(again, "disabled_issues")
    assert meta["unchanged_since"] and meta["found_count"] == 0 and meta["open_issues"] == 2
    assert "" not in meta.values()  # an entry with nothing to say is left out
    # a human closes one: the next refresh looks every wanted test up again, as a full run does
    (a,) = fake.titled(f"DISABLED {TEST_A}")
    fake.close(a["number"])
    third = run(world, github(httpserver), tags=REFRESH)
    assert third.success and "unchanged_since" not in metadata(third, "disabled_issues")  # no empty entry
    assert TEST_A not in world.published()
    rows = [r for r in world.ledger() if r["run_id"] == third.run_id]
    assert sorted((r["test"], r["issue_state"]) for r in rows) == [(TEST_A, "closed"), (TEST_B, "open")]


def test_a_human_closing_reenables_and_a_human_filing_disables_on_the_next_run(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"  # a maintainer: their DISABLED issues count
    assert run(world, github(httpserver)).success
    as_yesterdays(world)  # the next run is the next day's: re-enabling is against the day before's list
    (a,) = fake.titled(f"DISABLED {TEST_A}")
    fake.close(a["number"])  # the test was fixed
    filed = fake.add("DISABLED test_new (__main__.TestY)", "Platforms: win", age=dt.timedelta(minutes=1))
    patches = fake.count("PATCH")

    result = run(world, github(httpserver))
    assert result.success
    published = world.published()
    assert TEST_A not in published and published["test_new (__main__.TestY)"] == entry(filed, ["win"])
    assert world.published(REENABLED_TESTS_PATH) == {TEST_A: {"id": number(a), "runs": 80}}
    # when it closed, as GitHub says, read with the issue list's last changes (no request of its own)
    assert world.closed_at()[TEST_A] == github_time(fake.issues[a["number"]]["closed_at"])
    assert gets(fake, f"/repos/pytorch/pytorch/issues/{a['number']}") == 0
    # the verdict still says flaky (same window), but nothing failed since the close: left closed
    assert fake.issues[a["number"]]["state"] == "closed" and fake.count("PATCH") == patches
    assert len(fake.titled(f"DISABLED {TEST_A}")) == 1
    (row,) = [r for r in world.ledger() if r["run_id"] == result.run_id and r["test"] == TEST_A]
    assert (row["action"], row["issue_state"], row["issue_number"]) == ("found", "closed", a["number"])
    assert "left closed" in row["detail"]


def test_a_close_older_than_the_runs_read_of_changes_is_asked_of_github_once(httpserver, world, monkeypatch):
    """A re-enabled test whose close the run's read of the last hour's changes did not see (closed
    while no run read the issues) gets GitHub's closed_at from the issue itself; the day's next run
    keeps it from the table and asks nothing."""
    from torchci_assets.derived.flakiness import assets as flakiness_assets

    asked = []
    monkeypatch.setattr(flakiness_assets, "close_times",
                        lambda tracker, numbers: asked.append(numbers) or issues_module.close_times(tracker, numbers))
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"
    assert run(world, github(httpserver)).success
    as_yesterdays(world)
    (a,) = fake.titled(f"DISABLED {TEST_A}")
    fake.close(a["number"])
    fake.age(a["number"], dt.timedelta(hours=3))
    assert run(world, github(httpserver)).success
    closed = github_time(fake.issues[a["number"]]["closed_at"])
    assert world.closed_at()[TEST_A] == closed and asked == [[str(a["number"])]]
    assert run(world, github(httpserver)).success
    assert world.closed_at()[TEST_A] == closed and asked == [[str(a["number"])]]


def test_close_times_read_what_the_tracker_lacks_up_to_a_limit_and_an_open_or_missing_issue_has_none(httpserver):
    fake = FakeIssueTracker(httpserver)
    numbers = [fake.add(f"DISABLED test_{k} (__main__.TestX)", state="closed")["number"] for k in range(4)]
    still_open = fake.add("DISABLED test_open (__main__.TestX)")["number"]
    tracker = IssueTracker(github(httpserver), "pytorch/pytorch")
    tracker._keep(dict(fake.issues[numbers[0]]))  # read with the run's changes: no request for it
    tracker._keep(dict(fake.issues[still_open]))  # read open: no close time, and no request either
    asked = [str(n) for n in (*numbers, still_open, 999_999)]
    found = issues_module.close_times(tracker, asked, limit=2)  # two reads: the rest stay unknown
    assert found == {str(n): github_time(fake.issues[n]["closed_at"]) for n in numbers[:3]}
    assert [p for m, p, _ in fake.requests if m == "GET"] == [f"/repos/pytorch/pytorch/issues/{n}" for n in numbers[1:3]]
    assert issues_module.close_times(tracker, [str(still_open), "999999"]) == {}  # open; gone (404)
    assert [p for m, p, _ in fake.requests if m == "GET"][2:] == ["/repos/pytorch/pytorch/issues/999999"]


def test_a_main_flake_after_the_issue_was_closed_reopens_it(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"  # a maintainer: their DISABLED issues count
    # closed 60 days ago, long before the history's failures
    old = fake.add(f"DISABLED {TEST_A}", "Platforms: linux\n\nold report", state="closed", age=dt.timedelta(days=60))
    result = run(world, github(httpserver))
    assert result.success
    assert fake.issues[old["number"]]["state"] == "open" and len(fake.titled(f"DISABLED {TEST_A}")) == 1
    assert "flaked again on main" in fake.comments[old["number"]][0]
    (row,) = [r for r in world.ledger() if r["test"] == TEST_A]
    assert (row["action"], row["issue_number"], row["issue_state"]) == ("updated", old["number"], "open")
    assert world.published()[TEST_A] == entry(old, ["linux"])


def test_a_main_flake_after_a_closed_issue_naming_the_tests_module_reopens_that_issue(httpserver, world):
    """A closed issue titled with the test's dotted suite, as PyTorch's bot titles a test whose
    class is not in `__main__`, is the test's issue (the runner matches the class name alone):
    its title search finds it, and a new flake on main reopens it, its title as written, rather
    than filing a second issue beside it."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    old = fake.add("DISABLED test_a (test_x.TestX)", "Platforms: linux\n\nold report", state="closed",
                   user="a-maintainer", age=dt.timedelta(days=60))
    assert run(world, github(httpserver)).success
    assert fake.issues[old["number"]]["state"] == "open" and fake.titled(f"DISABLED {TEST_A}") == []
    assert fake.issues[old["number"]]["title"] == "DISABLED test_a (test_x.TestX)"
    assert "flaked again on main" in fake.comments[old["number"]][0]
    (row,) = [r for r in world.ledger() if r["test"] == TEST_A]
    assert (row["action"], row["issue_number"], row["issue_state"]) == ("updated", old["number"], "open")
    published = world.published()
    assert TEST_A not in published and published["test_a (test_x.TestX)"] == entry(old, ["linux"])


def test_flaking_on_a_new_platform_extends_the_issues_own_platforms(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"  # a maintainer: their DISABLED issues count
    filed = dt.datetime.now(dt.timezone.utc) - (START - dt.timedelta(days=1))  # before the history's flakes
    a = fake.add(f"DISABLED {TEST_A}", "Platforms: ROCm\n\nHuman notes: started with the ROCm 6 upgrade.", age=filed)
    b = fake.add(f"DISABLED {TEST_B}", "Platforms:\n\neverywhere already", age=filed)
    result = run(world, github(httpserver))
    assert result.success
    body = fake.issues[a["number"]]["body"]
    assert body == "Platforms: rocm, linux\n\nHuman notes: started with the ROCm 6 upgrade."
    (comment,) = fake.comments[a["number"]]
    assert comment.startswith("It flaked on linux as well") and "/actions/runs/" in comment
    assert fake.issues[b["number"]]["body"] == "Platforms:\n\neverywhere already"  # [] means everywhere
    assert fake.count("POST", "/repos/pytorch/pytorch/issues") == 1  # the comment, no new issue
    actions = {r["test"]: (r["action"], r["platforms"]) for r in world.ledger()}
    assert actions == {TEST_A: ("updated", ["linux", "rocm"]), TEST_B: ("found", [])}  # read sorted, as upstream
    assert world.published()[TEST_A] == entry(a, ["linux", "rocm"])


def test_every_open_disabled_issue_is_read_back_across_pages(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"  # a maintainer: their DISABLED issues count
    filed = [fake.add(f"DISABLED test_h{i} (__main__.TestH)", f"Platforms: {'win' if i % 2 else 'linux'}")
             for i in range(230)]
    assert run(world, github(httpserver)).success
    published = world.published()
    assert len(published) == 232
    assert all(published[f"test_h{i} (__main__.TestH)"] == entry(f, ["win" if i % 2 else "linux"])
               for i, f in enumerate(filed))
    pages = [a.get("page", "1") for m, p, a in fake.requests
             if p == "/search/issues" and "is:open" in a["q"] and "DISABLED" in a["q"]]
    assert pages == ["1", "2", "3"] * 2  # per asset: the filing and the read-back


def test_more_open_disabled_issues_than_one_search_returns_are_all_read_back(httpserver, world):
    # PyTorch has had more than the 1,000 open DISABLED issues GitHub's search returns for one query
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"
    # over two years, three filed in the same second
    filed = [fake.add(f"DISABLED test_m{i} (__main__.TestM)", "Platforms: linux",
                      age=dt.timedelta(hours=7 * (i // 3))) for i in range(2500)]
    assert run(world, github(httpserver)).success
    published = world.published()
    assert len(published) == 2502
    assert all(published[f"test_m{i} (__main__.TestM)"] == entry(f, ["linux"]) for i, f in enumerate(filed))


def test_a_secondary_rate_limit_on_search_is_waited_out(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.fail("search", json_response(403, {"message": "You have exceeded a secondary rate limit. Please wait."},
                                      {"Retry-After": "1"}))
    result = run(world, github(httpserver))
    assert result.success
    searches = [a["q"] for m, p, a in fake.requests if p == "/search/issues"]
    open_query = "repo:pytorch/pytorch is:issue is:open in:title DISABLED"
    unstable_query = "repo:pytorch/pytorch is:issue is:open in:title UNSTABLE"
    # the first search refused and retried; then the filing's, the read-back's and the unstable list's, in the
    # order the steps ran
    listing = [q for q in searches if "is:open" in q]  # not the searches for one test's title
    assert searches[0] == searches[1] and sorted(listing[1:]) == [open_query, open_query, unstable_query]
    assert len(world.published()) == 2


def dies_after_create(real_record):
    """`record` for a run killed after GitHub's 201 to a create, before the ledger write."""
    def record(lake, day, rows, part):
        if rows and rows[0]["action"] == "created":
            raise SystemExit("killed after GitHub's 201, before the ledger write")
        return real_record(lake, day, rows, part)
    return record


def racing_tracker(runs: int) -> type:
    """An IssueTracker whose `runs` instances all create at the same moment, each having looked
    and found nothing."""
    barrier = threading.Barrier(runs, timeout=10)

    class Racing(IssueTracker):
        def create(self, title, body, labels):
            barrier.wait()
            return super().create(title, body, labels)
    return Racing


def test_a_crash_between_the_create_and_its_ledger_row_files_no_duplicate(httpserver, world, monkeypatch):
    fake = FakeIssueTracker(httpserver, lag=True)  # search does not see new issues yet
    real_record = issues_module.record
    monkeypatch.setattr(issues_module, "record", dies_after_create(real_record))
    assert not run(world, github(httpserver)).success
    (b,) = fake.titled(f"DISABLED {TEST_B}")  # the first filed (most flake events), unrecorded
    assert world.ledger() == []
    monkeypatch.setattr(issues_module, "record", real_record)

    # minutes later: search still does not show #b, the issue list does
    again = run(world, github(httpserver))
    assert again.success
    assert len(fake.titled(f"DISABLED {TEST_B}")) == 1 and len(fake.titled(f"DISABLED {TEST_A}")) == 1
    rows = {r["test"]: r for r in world.ledger()}
    assert (rows[TEST_B]["action"], rows[TEST_B]["issue_number"]) == ("found", b["number"])
    assert "without a ledger row" in rows[TEST_B]["detail"]
    assert rows[TEST_A]["action"] == "created"
    assert set(world.published()) == {TEST_A, TEST_B}

    # much later: the list's last hour no longer has them, search has caught up
    for issue in fake.issues.values():
        fake.age(issue["number"], dt.timedelta(hours=3))
    fake.index()
    assert run(world, github(httpserver)).success
    assert len(fake.issues) == 2 and fake.count("POST", "/repos/pytorch/pytorch/issues") == 2


def test_a_create_github_took_without_answering_is_adopted_not_repeated(httpserver, world):
    fake = FakeIssueTracker(httpserver, lag=True)
    fake.fail("create", Scripted(json_response(502, {"message": "Server Error"}), after_effect=True))
    result = run(world, github(httpserver))
    assert result.success
    assert len(fake.titled(f"DISABLED {TEST_B}")) == 1 and len(fake.issues) == 2
    (row,) = [r for r in world.ledger() if r["test"] == TEST_B]
    assert row["action"] == "created" and "without answering" in row["detail"]


def test_two_racing_runs_leave_one_open_issue(httpserver, world):
    """Outside the `github_issues` pool (say two Dagster instances), two runs can both see no
    issue and both create one; each then rereads the list, and the later twin is closed."""
    fake = FakeIssueTracker(httpserver, lag=True)
    Racing = racing_tracker(2)
    outcomes = []

    def one_run(run_id):
        tracker = Racing(github(httpserver), "pytorch/pytorch")
        report = file_disabled_issues(tracker, world.lake, world.day, [Wanted(TEST_A, ["linux"], ["linux"], 3)],
                                      {}, ["skipped"], 10, run_id)
        outcomes.append(report.rows[0])

    threads = [threading.Thread(target=one_run, args=(f"run-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 2
    issues = fake.titled(f"DISABLED {TEST_A}")
    assert len(issues) == 2
    (kept,) = [i for i in issues if i["state"] == "open"]
    (twin,) = [i for i in issues if i["state"] == "closed"]
    assert kept["number"] < twin["number"] and twin["state_reason"] == "not_planned"
    assert fake.comments[twin["number"]][0].startswith(f"Duplicate of #{kept['number']}")
    assert sorted(o["action"] for o in outcomes) == ["created", "found"]
    assert {o["issue_number"] for o in outcomes} == {kept["number"]}


def test_without_credentials_it_is_todays_list_labelled_dry_run(httpserver, world, instance):
    fake = FakeIssueTracker(httpserver)
    result = run(world, GitHubResource(api_url=httpserver.url_for("")), instance)
    assert result.success
    assert fake.requests == []  # nothing searched, filed or read
    published = world.published()
    assert set(published) == {TEST_A, TEST_B} and all(v[0].startswith("local-") and v[1] == "" for v in published.values())
    rows = world.ledger()
    assert sorted((r["test"], r["action"], r["issue_number"]) for r in rows) == \
        [(TEST_A, "dry_run", None), (TEST_B, "dry_run", None)]
    for asset in ("disabled_issues", "disabled_tests", "unstable_jobs"):
        meta = metadata(result, asset)
        assert meta["dry_run"] is True and "no GitHub credentials" in meta["dry_run_reason"]
    assert "open_issues" not in metadata(result, "disabled_issues")  # none read: 0 would say there were none
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any(m.startswith(f"DRY RUN: would find or file 'DISABLED {TEST_A}' in pytorch/pytorch") for m in logs)
    assert any(m.startswith("DRY RUN: no GitHub credentials") for m in logs)
    assert any("stats/disabled-jobs.json is not published" in m for m in logs)
    assert any("stats/unstable-jobs.json is not published" in m for m in logs)
    assert not (Path(world.outputs_uri) / "stats" / "unstable-jobs.json").exists()


def test_a_dry_run_with_the_same_plan_is_not_logged_or_recorded_again(httpserver, world, instance):
    """The intra-day refresh runs every minute: an unchanged verdict must not add the same dry-run
    rows to the ledger and the same lines to the log each time; a changed one is recorded."""
    gh = GitHubResource(api_url=httpserver.url_for(""))
    first = run(world, gh, instance, tags=REFRESH)
    assert first.success and len(world.ledger()) == 2
    assert run(world, gh, instance).success and len(world.ledger()) == 4  # not a refresh: recorded again
    again = run(world, gh, instance, tags=REFRESH)
    assert again.success and len(world.ledger()) == 4  # nothing added
    meta = metadata(again, "disabled_issues")
    assert meta["unchanged_since"] and meta["dry_run_count"] == 2
    logs = [e.user_message for e in instance.all_logs(again.run_id)]
    assert not any(m.startswith("DRY RUN: would find or file") for m in logs)
    assert any(m.startswith("DRY RUN: the same 2 action(s) as run ") for m in logs)
    # test_a now flaked on main everywhere it ran: disabled everywhere, a new plan, recorded in full
    con = connect()
    world.lake.register(con, "flaky_tests", [world.day], name="f")
    table = con.sql("SELECT * REPLACE (CASE WHEN name = 'test_a' THEN list_sort(list_distinct(list_concat("
                    "main_flaky_os_platforms, platforms))) ELSE main_flaky_os_platforms END AS main_flaky_os_platforms) "
                    "FROM f").to_arrow_table()
    con.close()
    world.lake.write("flaky_tests", world.day, table)
    third = run(world, gh, instance, tags=REFRESH)
    assert third.success and "unchanged_since" not in metadata(third, "disabled_issues")
    assert len(world.ledger()) == 4 + metadata(third, "disabled_issues")["dry_run_count"]


def test_a_token_alone_does_not_file_issues(httpserver, world, tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, enabled=False)
    fake = FakeIssueTracker(httpserver)
    result = run(world, github(httpserver))
    assert result.success and fake.requests == []
    assert "disabled_issues.enabled is false" in metadata(result, "disabled_issues")["dry_run_reason"]


def test_new_issues_per_run_are_capped_and_the_rest_wait(httpserver, world, tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, max_new=1)
    fake = FakeIssueTracker(httpserver)
    first = run(world, github(httpserver))
    assert first.success
    assert len(fake.issues) == 1 and fake.titled(f"DISABLED {TEST_B}")  # most flake events first
    meta = metadata(first, "disabled_issues")
    assert (meta["created_count"], meta["deferred_count"], meta["deferred_tests"]) == (1, 1, [TEST_A])
    assert set(world.published()) == {TEST_B}
    assert run(world, github(httpserver)).success
    assert len(fake.issues) == 2 and set(world.published()) == {TEST_A, TEST_B}


def test_a_day_without_a_verdict_files_nothing_and_still_publishes_from_the_issues(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"  # a maintainer: their DISABLED issues count
    human = fake.add("DISABLED test_human (__main__.TestZ)", "Platforms: mac")
    later = (dt.date.fromisoformat(world.day) + dt.timedelta(days=1)).isoformat()
    result = run(world, github(httpserver), day=later)
    assert result.success and fake.count("POST") == 0
    assert "no flaky_tests partition" in metadata(result, "disabled_issues")["skipped"]
    assert world.published() == {"test_human (__main__.TestZ)": entry(human, ["mac"])}


def test_an_older_verdict_files_nothing(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    later = (dt.date.fromisoformat(world.day) + dt.timedelta(days=1)).isoformat()
    shutil.copytree(f"{world.lake_uri}/flaky_tests/day={world.day}", f"{world.lake_uri}/flaky_tests/day={later}")
    result = run(world, github(httpserver))
    assert result.success
    assert fake.count("POST") == 0 and "superseded" in metadata(result, "disabled_issues")["skipped"]


def test_a_github_refusal_for_one_test_fails_the_check_not_the_others(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    fake.fail("create", json_response(422, {"message": "Validation Failed"}))
    result = run(world, github(httpserver))
    assert result.success
    (check,) = [c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "disabled_issues"]
    assert not check.passed and list(check.metadata["failed"].value) == [TEST_B]
    assert "github_refused" not in check.metadata  # one test's answer: no credentials to change
    assert [i["title"] for i in fake.issues.values()] == [f"DISABLED {TEST_A}"]


def test_a_token_that_may_not_write_issues_says_what_to_set(httpserver, world):
    """A token that reads issues but may not create them (403, no rate limit) fails every filing,
    run after run, though the lists are read: the check says GitHub refused it and what to set, as
    the checks of the lists do (`torchci run` exits 3 on it); a 422 for one test says no such thing."""
    fake = FakeIssueTracker(httpserver)
    fake.fail("create", *[json_response(403, {"message": "Resource not accessible by personal access token"})] * 2)
    result = run(world, github(httpserver))
    assert result.success
    (check,) = [c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "disabled_issues"]
    assert not check.passed and check.metadata["github_refused"].value is True
    assert "Issues: read and write" in check.metadata["fix"].value and "403" in check.metadata["error"].value


def test_losing_most_disabled_tests_at_once_is_refused(httpserver, world):
    fake = FakeIssueTracker(httpserver)
    previous = {f"test_{i} (__main__.T)": [str(100 + i), f"https://github.com/pytorch/pytorch/issues/{100 + i}", []]
                for i in range(12)}
    out = Path(world.outputs_uri) / DISABLED_TESTS_PATH
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps(previous))
    refused = run(world, github(httpserver))  # the check fails, not the step, which would skip the HUD
    assert refused.success and json.loads(out.read_text()) == previous
    (check,) = [c for c in refused.get_asset_check_evaluations() if c.asset_key.to_user_string() == "disabled_tests"]
    assert not check.passed and "refusing to re-enable them all at once" in check.metadata["error"].value
    assert metadata(refused, "disabled_tests")["published"] is False
    forced = run(world, github(httpserver), disabled_tests_config={"allow_mass_reenable": True})
    assert forced.success and set(world.published()) == {TEST_A, TEST_B}
    assert len(fake.issues) == 2


BURST = [f"test_{c}" for c in "abcdef"]  # six tests of test_x.py flaking together: one aggregate
RERUN = ("linux-jammy-py3.10-gcc11", "default, 1, 1, linux.2xlarge, rerun_disabled_tests", "linux")


@pytest.fixture(scope="module")
def built_lifecycle(tmp_path_factory):
    """Six tests of one file flaking; two tests disabled earlier (the published list): one passing
    every rerun of PyTorch's rerun_disabled_tests jobs, one still failing some."""
    h = History([*BURST, "test_fixed", "test_still"])
    for i in range(40):
        h.run(i, LINUX, {BURST[i % 6]: "flake"} if i < 24 else None)
    for i in range(2, 24 * 7, 24):  # a rerun job a day for a week
        h.run(i, RERUN, {"test_still": "fail"} if i == 26 else None)
    return built_world(h, tmp_path_factory, "lifecycle")


def test_the_dry_run_logs_and_records_every_aggregate_close_and_comment_it_would_make(
        httpserver, built_lifecycle, tmp_path, instance):
    world = World(built_lifecycle, tmp_path)
    fixed, still = "test_fixed (__main__.TestX)", "test_still (__main__.TestX)"
    Path(world.outputs_uri, "stats").mkdir(parents=True)
    issues = {fixed: 101, still: 102}  # disabled through their issues
    Path(world.outputs_uri, DISABLED_TESTS_PATH).write_text(json.dumps(
        {t: [str(n), f"https://github.com/pytorch/pytorch/issues/{n}", ["linux"]] for t, n in issues.items()}))
    fake = FakeIssueTracker(httpserver)
    result = run(world, GitHubResource(api_url=httpserver.url_for("")), instance)
    assert result.success and fake.requests == []
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message.startswith("DRY RUN: would")]
    title = "DISABLED MULTIPLE There are multiple flaky tests in test_x.py"
    (aggregate,) = [m for m in logs if title in m]
    assert all(f"{t} (__main__.TestX) (linux)" in aggregate for t in BURST)
    assert not any(f"'DISABLED {t} (__main__.TestX)'" in m for m in logs for t in BURST)  # no single issue each
    assert any(m.startswith(f"DRY RUN: would comment its rerun evidence on the DISABLED issue of {fixed} and "
                            "close it") for m in logs)
    assert any(m.startswith(f"DRY RUN: would comment its rerun evidence on the DISABLED issue of {still} "
                            "(still failing reruns on linux)") for m in logs)

    meta = metadata(result, "disabled_issues")
    assert meta["aggregates"] == {title: [f"{t} (__main__.TestX)" for t in BURST]}
    assert meta["close_on_evidence"] == [fixed] and meta["evidence_on_evidence"] == [still]
    actions = meta["dry_run_actions"]
    assert {f"{t} (__main__.TestX): would list it in {title!r}" for t in BURST} <= {a.split(" (no GitHub")[0]
                                                                                    for a in actions}
    # each of the log's lines is in the metadata, word for word
    assert {m.removeprefix("DRY RUN: ") for m in logs if "rerun evidence" in m} <= {
        a.split(": ", 1)[1] for a in actions}


def test_a_dry_refresh_says_its_closes_and_comments_once_as_a_live_run_makes_them_once(
        httpserver, built_lifecycle, tmp_path, instance):
    """A live run closes a fixed test's issue and comments a still-failing one's reruns once a day:
    the refresh a minute later finds the issue closed and the day's comment made, and writes
    nothing. The dry run's refresh must not log and record the same closes and comments again
    either, as its filing plan is not."""
    world = World(built_lifecycle, tmp_path)
    fixed, still = "test_fixed (__main__.TestX)", "test_still (__main__.TestX)"
    Path(world.outputs_uri, "stats").mkdir(parents=True)
    issues = {fixed: 1, still: 2}
    Path(world.outputs_uri, DISABLED_TESTS_PATH).write_text(json.dumps(
        {t: [str(n), f"https://github.com/pytorch/pytorch/issues/{n}", ["linux"]] for t, n in issues.items()}))
    gh = GitHubResource(api_url=httpserver.url_for(""))
    first = run(world, gh, instance, tags=REFRESH)
    said = [r["detail"] for r in world.ledger() if "rerun evidence" in r["detail"]]
    assert first.success and len(said) == 2
    again = run(world, gh, instance, tags=REFRESH)
    assert again.success and [r["detail"] for r in world.ledger() if "rerun evidence" in r["detail"]] == said
    logs = [e.user_message for e in instance.all_logs(again.run_id)]
    assert not any("rerun evidence" in m for m in logs)
    assert metadata(again, "disabled_issues")["evidence_on_evidence"] == [still]  # still said in the metadata


def filing_plan(world, result) -> dict[str, str]:
    """Per test the verdict disables, how the disabled_issues run of `result` filed it or (dry
    run) would: in the file's aggregate (its title), else on its own issue ("own")."""
    aggregates = metadata(result, "disabled_issues")["aggregates"]
    in_aggregate = {t: title for title, tests in aggregates.items() for t in tests}
    return {r["test"]: in_aggregate.get(r["test"], "own") for r in world.ledger() if r["run_id"] == result.run_id}


def test_the_dry_run_plans_what_the_real_run_does_for_a_test_published_with_a_dotted_suite(
        httpserver, built_lifecycle, tmp_path, instance):
    """The published list names a test as its issue's title does: `test_a (test_x.TestX)` when a
    maintainer titled it so. PyTorch's runner, and the real run, take it for `test_a (__main__.TestX)`,
    which has an issue and so is not one of the file's new tests: five are left, and the aggregate
    lists those five. The dry run, on the same issues and list, must plan the same."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    dotted = fake.add("DISABLED test_a (test_x.TestX)", "Platforms: linux\n\nflaky", user="a-maintainer",
                      age=dt.timedelta(days=1))
    plans, published = {}, {}
    for mode, gh in (("live", github(httpserver)), ("dry", GitHubResource(api_url=httpserver.url_for("")))):
        world = World(built_lifecycle, tmp_path / mode)
        Path(world.outputs_uri, "stats").mkdir(parents=True)
        Path(world.outputs_uri, DISABLED_TESTS_PATH).write_text(json.dumps(
            {"test_a (test_x.TestX)": [number(dotted), dotted["html_url"], ["linux"]]}))
        result = run(world, gh, instance)
        assert result.success and metadata(result, "disabled_issues")["dry_run"] is (mode == "dry")
        plans[mode], published[mode] = filing_plan(world, result), world.published()
    title = "DISABLED MULTIPLE There are multiple flaky tests in test_x.py"
    assert plans["live"] == {f"{t} (__main__.TestX)": "own" if t == "test_a" else title for t in BURST}
    assert plans["dry"] == plans["live"]
    assert len(fake.titled(title)) == 1 and fake.titled(f"DISABLED {TEST_A}") == []
    # and names the issue the live run found; its list holds the test once, under that issue's name, as the live one
    (planned,) = [r["detail"] for r in world.ledger() if r["test"] == TEST_A and r["detail"].startswith("would find")]
    assert planned.startswith(f"would find #{number(dotted)} ({dotted['html_url']}), its issue on the published list "
                              "(as 'test_a (test_x.TestX)')")
    assert published["dry"].keys() == published["live"].keys() and TEST_A not in published["dry"]


AGGREGATE_X = "DISABLED MULTIPLE There are multiple flaky tests in test_x.py"
WRITES = ("POST", "PATCH", "PUT", "DELETE")


def dry_then_live(httpserver, fake, built_world, tmp_path, instance, published: dict) -> dict:
    """The dry run, then the live run, of the same verdict on the same issues, each on its own copy
    of the lake with `published` as the list it decides against: mode -> (world, result). The dry
    run sends GitHub nothing at all."""
    out = {}
    for mode, gh in (("dry", GitHubResource(api_url=httpserver.url_for(""))), ("live", github(httpserver))):
        world = World(built_world, tmp_path / mode)
        Path(world.outputs_uri, "stats").mkdir(parents=True)
        Path(world.outputs_uri, DISABLED_TESTS_PATH).write_text(json.dumps(published))
        result = run(world, gh, instance)
        assert result.success and metadata(result, "disabled_issues")["dry_run"] is (mode == "dry")
        if mode == "dry":
            assert fake.requests == []
        out[mode] = (world, result)
    return out


def planned(world, result) -> list[tuple]:
    """(test, plan) for each row the dry run of `result` recorded: ("find", number) for the issue
    it names by number, ("file", title) for the title it would find or file (an aggregate too),
    ("write", its words) for any other write (a close, a comment)."""
    plan = []
    for r in world.ledger():
        if r["run_id"] == result.run_id:
            number = re.match(r"would find #(\d+)", r["detail"])
            title = re.match(r"would (?:find or file|list it in) '([^']+)'", r["detail"])
            plan.append((r["test"], ("find", int(number.group(1))) if number else ("file", title.group(1)) if title
                         else ("write", r["detail"])))
    return sorted(plan)


def done(world, result, fake) -> list[tuple]:
    """(test, what) for each row the live run of `result` recorded: ("file", title) for the issue it
    created (an aggregate too), ("find", number) for the one it found or updated, ("write", action)
    for any other (a close, a comment)."""
    return sorted((r["test"], ("file", fake.issues[r["issue_number"]]["title"]) if r["action"] == "created"
                   else ("find", r["issue_number"]) if r["action"] in ("found", "updated") else ("write", r["action"]))
                  for r in world.ledger() if r["run_id"] == result.run_id)


def test_the_dry_run_names_the_aggregate_a_dotted_line_disables_its_test_by_not_a_title_never_filed(
        httpserver, built, tmp_path, instance):
    """An aggregate written by hand lists its tests with their module (`test_a (test_x.TestX)`); the
    published list, built from it, names them so. A live run finds the aggregate for both tests and
    files nothing; the dry run must plan that, not `DISABLED test_a (test_x.TestX)`, an issue no
    live run would file."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    body = "disable the following tests:\n```\ntest_a (test_x.TestX): linux\ntest_b (test_x.TestX):\n```\n"
    aggregate = fake.add(AGGREGATE_X, body, user="a-maintainer", age=dt.timedelta(days=1))
    published = {"test_a (test_x.TestX)": [number(aggregate), aggregate["html_url"], ["linux"]],
                 "test_b (test_x.TestX)": [number(aggregate), aggregate["html_url"], []]}
    runs = dry_then_live(httpserver, fake, built, tmp_path, instance, published)
    live = done(*runs["live"], fake)
    assert live == [(TEST_A, ("find", aggregate["number"])), (TEST_B, ("find", aggregate["number"]))]
    assert sum(fake.count(m) for m in WRITES) == 0
    assert planned(*runs["dry"]) == live
    world, result = runs["dry"]
    assert not any("'DISABLED test_a (test_x.TestX)'" in r["detail"] for r in world.ledger())
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "every_disabled_test_has_an_issue"]
    assert check.metadata["tests_without_issue"].value == 0  # both have one, which a live run finds


def test_a_test_the_dry_runs_list_disabled_locally_is_planned_as_a_live_run_files_it(
        httpserver, built_lifecycle, tmp_path, instance):
    """A dry run's list disables a test under a local id: no issue has it yet. The live run files
    one aggregate for the six tests of test_x.py, as for any six new tests of a file, and judges them
    on the reruns after its filing, closing none; the dry run must plan that aggregate, not six
    issues found or filed one by one, nor closes of issues no live run has."""
    fake = FakeIssueTracker(httpserver)
    published = {f"{t} (__main__.TestX)": [stable_id(f"{t} (__main__.TestX)"), "", ["linux"]] for t in BURST}
    runs = dry_then_live(httpserver, fake, built_lifecycle, tmp_path, instance, published)
    live = done(*runs["live"], fake)
    assert live == [(f"{t} (__main__.TestX)", ("file", AGGREGATE_X)) for t in BURST]
    assert [i["title"] for i in fake.issues.values()] == [AGGREGATE_X]
    assert planned(*runs["dry"]) == live
    world, result = runs["dry"]
    assert metadata(result, "disabled_issues")["aggregates"] == {AGGREGATE_X: [t for t, _ in live]}
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "every_disabled_test_has_an_issue"]
    assert check.metadata["tests_without_issue"].value == len(BURST)


@pytest.fixture(scope="module")
def built_relisted(tmp_path_factory):
    """Two tests of one aggregate: test_kept passing 60 runs (its list entry is re-enabled by the
    day's first publication), test_fixed passing 30 and every rerun of a week of PyTorch's
    rerun_disabled_tests jobs (its entry stays; its aggregate line is clean)."""
    h = History(["test_fixed", "test_kept"])
    for i in range(60):
        h.run(i, LINUX, None if i < 30 else {"test_fixed": "absent"})
    for i in range(2, 24 * 7, 24):
        h.run(i, RERUN, {"test_kept": "absent"})
    return built_world(h, tmp_path_factory, "relisted")


def test_the_dry_runs_lifecycle_reads_the_list_its_filing_reads_all_day_as_the_issues_stay(
        httpserver, built_relisted, tmp_path, instance):
    """Yesterday's list names an aggregate's two tests. The day's first publication re-enables
    test_kept on the list, as a dry run publishes it, which changes no issue: a live run drops
    test_fixed's clean line and keeps the aggregate open for test_kept, once. The dry run and its
    refresh after that publication must plan just that, once: not, from the list as published since,
    a close of the aggregate as test_fixed's own issue."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    fixed, kept = "test_fixed (__main__.TestX)", "test_kept (__main__.TestX)"
    agg = fake.add(AGGREGATE_X, aggregate_body("test_x.py", {fixed: ["linux"], kept: ["linux"]}, "x"),
                   user="a-maintainer", age=dt.timedelta(days=40))
    out = {}
    for mode, gh in (("dry", GitHubResource(api_url=httpserver.url_for(""))), ("live", github(httpserver))):
        world = World(built_relisted, tmp_path / mode)
        Path(world.outputs_uri, "stats").mkdir(parents=True)
        Path(world.outputs_uri, DISABLED_TESTS_PATH).write_text(json.dumps({t: entry(agg, ["linux"])
                                                                             for t in (fixed, kept)}))
        as_yesterdays(world)
        results = [run(world, gh, instance), run(world, gh, instance, tags=REFRESH)]
        assert all(r.success for r in results)
        assert kept not in world.published() if mode == "dry" else fixed not in world.published()
        if mode == "dry":
            assert fake.requests == []
        out[mode] = [r for r in world.ledger() if r["test"] in (fixed, kept)]
    assert [(r["test"], r["action"], r["issue_state"]) for r in out["live"]] == [(fixed, "dropped", "open")]
    assert condense([fake.issues[agg["number"]]]) == {kept: entry(agg, ["linux"])}
    (plan,) = [r["detail"] for r in out["dry"]]
    assert plan.startswith(f"would drop {fixed!r} from the list of aggregate #{agg['number']} ")
    assert plan.endswith("; 1 test(s) of it stay on the published list")


def test_the_dry_run_plans_the_new_issues_a_live_run_files_under_its_cap_and_defers_the_rest(
        httpserver, built, tmp_path, instance, monkeypatch):
    """With max_new_per_run: 1, a live run files the issue of the test with the most flake events
    and leaves the other for the next run; the dry run must plan that one issue and say the other
    waits, as the live run's metadata and log do."""
    configure(tmp_path, monkeypatch, max_new=1)
    fake = FakeIssueTracker(httpserver)
    runs = dry_then_live(httpserver, fake, built, tmp_path, instance, {})
    live = done(*runs["live"], fake)
    assert live == [(TEST_B, ("file", f"DISABLED {TEST_B}"))]
    assert planned(*runs["dry"]) == live
    for mode, (world, result) in runs.items():
        meta = metadata(result, "disabled_issues")
        assert (meta["deferred_count"], meta["deferred_tests"]) == (1, [TEST_A]), mode
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
        assert any(m.startswith("1 new issue(s) beyond max_new_per_run=1 wait for the next run") for m in logs), mode
        (check,) = [c for c in result.get_asset_check_evaluations()
                    if c.check_name == "every_disabled_test_has_an_issue"]
        # before the live run both have none; after it, the one left for the next run
        assert check.metadata["tests_without_issue"].value == {"dry": 2, "live": 1}[mode]


def test_the_dry_runs_opening_warning_counts_the_tests_it_plans_as_a_live_run_acts_on_them(
        httpserver, built, tmp_path, instance, monkeypatch):
    """With max_new_per_run: 1, a live run acts on one of the two tests and leaves the other; the dry
    run's opening warning must count the one it records as dry_run, and say the other waits."""
    configure(tmp_path, monkeypatch, max_new=1)
    fake = FakeIssueTracker(httpserver)
    runs = dry_then_live(httpserver, fake, built, tmp_path, instance, {})
    world, result = runs["dry"]
    (opening,) = [e.user_message for e in instance.all_logs(result.run_id)
                  if re.match(r"DRY RUN: no GitHub credentials .*; \d+ test", e.user_message)]
    planned_count = int(re.search(r"; (\d+) test\(s\) to disable are recorded as dry_run", opening).group(1))
    assert planned_count == len(planned(world, result)) == len(done(*runs["live"], fake)) == 1
    assert "1 more wait for a later run (max_new_per_run)" in opening


def test_a_dry_run_says_it_cannot_tell_a_one_entry_aggregate_from_a_single_issue_where_a_live_run_does_otherwise(
        httpserver, built_lifecycle, tmp_path, instance):
    """Each of test_fixed and test_still is the one line left of a maintainer's aggregate; the
    published list shows each as one entry naming one issue, as it shows a test's own issue (PyTorch's
    list has no title). A live run drops test_fixed's clean line and closes its aggregate, and writes
    nothing for test_still's failing line (an aggregate's still-failing line gets no comment). The
    dry run cannot know which the issue is: its plan must say so and what a live run does if it is
    an aggregate, not plan a daily comment as certain."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    fixed, still = "test_fixed (__main__.TestX)", "test_still (__main__.TestX)"
    alone = {t: fake.add(aggregate_title(f), aggregate_body(f, {t: ["linux"]}, "x"), user="a-maintainer",
                         age=dt.timedelta(days=40)) for t, f in ((fixed, "test_old.py"), (still, "test_older.py"))}
    published = {t: entry(i, ["linux"]) for t, i in alone.items()}
    runs = dry_then_live(httpserver, fake, built_lifecycle, tmp_path, instance, published)
    live = [(r["test"], r["action"], r["issue_state"]) for r in runs["live"][0].ledger() if r["test"] in alone]
    assert live == [(fixed, "dropped", "closed")]
    assert fake.issues[alone[fixed]["number"]]["state"] == "closed" and still_open(fake, alone[still])
    assert alone[still]["number"] not in fake.comments
    plan = {r["test"]: r["detail"] for r in runs["dry"][0].ledger() if r["test"] in alone}
    for t, does in ((fixed, "drops its line and closes the aggregate, with one comment"),
                    (still, "writes nothing (a still-failing line gets no comment)")):
        assert (f"; the published list does not say whether #{alone[t]['number']} is its own issue or an aggregate "
                f"listing it alone, on which a live run {does}") in plan[t], plan[t]


def still_open(fake, issue) -> bool:
    return fake.issues[issue["number"]]["state"] == "open"


def test_the_dry_run_plans_the_platforms_a_live_run_adds_to_a_listed_tests_line(
        httpserver, built, tmp_path, instance):
    """test_a's issue disables it on win; it has since flaked on main on linux. The published list
    carries the entry's platforms: a live run adds linux to the line with a comment, and the dry
    run must plan that, not only find the issue. test_b's line (everywhere) covers its flakes:
    nothing to add, in either."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    filed = dt.datetime.now(dt.timezone.utc) - (START - dt.timedelta(days=1))  # before the history's flakes
    a = fake.add(f"DISABLED {TEST_A}", "Platforms: win\n\nflaky", user="a-maintainer", age=filed)
    b = fake.add(f"DISABLED {TEST_B}", "Platforms:\n\nflaky", user="a-maintainer", age=filed)
    runs = dry_then_live(httpserver, fake, built, tmp_path, instance, {TEST_A: entry(a, ["win"]),
                                                                      TEST_B: entry(b, [])})
    live = {r["test"]: (r["action"], r["detail"]) for r in runs["live"][0].ledger()}
    assert live[TEST_A] == ("updated", "added platforms: linux") and live[TEST_B][0] == "found"
    assert planned(*runs["dry"]) == done(*runs["live"], fake)
    plan = {r["test"]: r["detail"] for r in runs["dry"][0].ledger()}
    assert plan[TEST_A].startswith(f"would find #{number(a)} ({a['html_url']}), its issue on the published list "
                                   f"(as {TEST_A!r}), and add linux to its line with a comment"), plan[TEST_A]
    assert "add" not in plan[TEST_B].split("(as ")[1], plan[TEST_B]


def test_a_dry_refresh_with_the_same_plan_says_its_opening_as_it_records_nothing_as_a_live_refresh(
        httpserver, world, instance):
    """A refresh with nothing changed records nothing, live or dry. The dry refresh's opening warning
    must not say its tests are recorded as dry_run, after the line saying the same plan is not
    recorded again; the first run's, which records them, says so."""
    gh = GitHubResource(api_url=httpserver.url_for(""))
    first, again = run(world, gh, instance, tags=REFRESH), run(world, gh, instance, tags=REFRESH)
    assert first.success and again.success

    def opening(result) -> str:
        (line,) = [e.user_message for e in instance.all_logs(result.run_id)
                   if re.match(r"DRY RUN: no GitHub credentials .*; \d+ test", e.user_message)]
        return line

    recorded = {r.run_id: sum(1 for x in world.ledger() if x["run_id"] == r.run_id) for r in (first, again)}
    assert recorded == {first.run_id: 2, again.run_id: 0}
    assert "; 2 test(s) to disable are recorded as dry_run" in opening(first)
    assert "recorded as dry_run" not in opening(again), opening(again)
    assert (f"; 2 test(s) to disable, the plan run {first.run_id} recorded, not recorded again"
            in opening(again)), opening(again)


def test_under_the_cap_aggregates_are_filed_first_then_the_tests_with_most_flake_events():
    """As a live run files them (`file_disabled_issues`): an aggregate counts one issue, a test
    with an issue takes no new one's place."""
    burst = [Wanted(f"{t} (__main__.TestX)", ["linux"], ["linux"], 1) for t in BURST[:5]]
    many, few, known = (Wanted(f"test_{n} (__main__.TestY)", [], [], events)
                        for n, events in (("many", 9), ("few", 2), ("known", 99)))
    wanted = [*burst, few, known, many]

    def deferred(max_new):
        return issues_module.capped({AGGREGATE_X: burst}, wanted, lambda test: test == known.test, max_new)

    assert deferred(None) == deferred(3) == []
    assert deferred(2) == [few.test]
    assert deferred(1) == [many.test, few.test]
    assert deferred(0) == [*(w.test for w in burst), many.test, few.test]


UNREADABLE = ["test_pow_shape_(2, 3) (__main__.TestBinary)", "test_naïve (__main__.TestUnicode)",
              "test_case[x] (__main__.TestParam)"]


def test_a_test_whose_title_pytorch_cannot_read_gets_no_issue_and_is_reported(httpserver, tmp_path):
    """PyTorch's title parser reads only names of letters, digits, '-', '_' and '.': an issue for any
    other name would disable nothing, and finding issues by that reading filed one on every run."""
    fake = FakeIssueTracker(httpserver)
    stale = fake.add(f"DISABLED {UNREADABLE[0]}", "Platforms: linux")  # filed before the names were checked
    lake, warnings = Lake.at(str(tmp_path / "lake")), []
    wanted = [Wanted(t, ["linux"], ["linux"], 5) for t in [*UNREADABLE, TEST_A]]
    for run_id in ("run-1", "run-2"):
        report = file_disabled_issues(IssueTracker(github(httpserver), "pytorch/pytorch"), lake, "2026-11-28",
                                      wanted, {}, ["skipped"], 10, run_id, warn=warnings.append)
        action = "created" if run_id == "run-1" else "found"
        assert [(r["test"], r["action"]) for r in report.rows] == [(TEST_A, action)]
        assert sorted(report.unreadable) == sorted(UNREADABLE)
    assert [i["title"] for i in fake.issues.values()] == [stale["title"], f"DISABLED {TEST_A}"]
    assert "PyTorch's title parser reads no test in 'DISABLED test_naïve (__main__.TestUnicode)'" \
        in report.unreadable[UNREADABLE[1]]
    assert f"#{stale['number']} (open) has its title and disables nothing" in report.unreadable[UNREADABLE[0]]
    assert sum(UNREADABLE[2] in w and "gets no DISABLED issue" in w for w in warnings) == 2  # once a run
    # found by its exact title, whatever PyTorch makes of it
    tracker = IssueTracker(github(httpserver), "pytorch/pytorch")
    tracker.load_open()
    assert tracker.find(UNREADABLE[0])["number"] == stale["number"]


def test_a_test_whose_title_github_refuses_as_too_long_gets_no_issue_and_is_reported(httpserver, tmp_path):
    """GitHub refuses a title over 256 characters with a 422: a test whose `DISABLED <test>` is
    longer would fail on every run and take a new issue's place under max_new_per_run each time."""
    fake = FakeIssueTracker(httpserver)
    long = f"test_{'x' * 240}_cuda_float32 (__main__.TestLongNames)"
    lake, warnings = Lake.at(str(tmp_path / "lake")), []
    wanted = [Wanted(long, ["linux"], ["linux"], 9), Wanted(TEST_A, ["linux"], ["linux"], 5)]
    for run_id in ("run-1", "run-2"):
        report = file_disabled_issues(IssueTracker(github(httpserver), "pytorch/pytorch"), lake, "2026-11-28",
                                      wanted, {}, ["skipped"], 1, run_id, warn=warnings.append)
        assert (report.failed, report.deferred) == ({}, [])
        assert [(r["test"], r["action"]) for r in report.rows] == [(TEST_A, "created" if run_id == "run-1" else "found")]
        assert list(report.unreadable) == [long]
    assert [i["title"] for i in fake.issues.values()] == [f"DISABLED {TEST_A}"]
    assert fake.count("POST") == 1  # GitHub was never asked for the long one
    assert f"its title would be {len(long) + 9} characters; GitHub refuses over 256" in report.unreadable[long]
    assert sum(long in w and "gets no DISABLED issue" in w for w in warnings) == 2  # once a run


def rerun_rows(test: str, platform: str, days_ago: list[int], now: dt.datetime) -> list[dict]:
    name, cls = test.split(" (__main__.")
    return [{"name": name, "classname": f"test_x.{cls[:-1]}", "platform": platform, "job_id": 5_000 + d,
             "job_completed_at": now - dt.timedelta(days=d, hours=1), "infra_suspect": False, "status": "passed",
             "message": None, "job_name": f"{RERUN[0]} / test ({RERUN[1]})"} for d in days_ago]


def test_a_platform_reenabling_dropped_is_added_back_only_on_a_flake_after_the_narrowing(httpserver, tmp_path):
    """The verdict's window still holds the flakes of a platform whose reruns came back clean:
    adding it back on those would undo the narrowing on every run (two edits and a comment a run)."""
    fake = FakeIssueTracker(httpserver)
    now = dt.datetime.now(dt.timezone.utc)
    day = now.date().isoformat()
    issue = fake.add(f"DISABLED {TEST_A}", "Platforms: linux, win\n\nflaky", age=dt.timedelta(days=20),
                     user="pytorch-bot[bot]")
    lake = Lake.at(str(tmp_path / "lake"))
    for row in rerun_rows(TEST_A, "linux", list(range(1, 8)), now):  # clean on linux for a week
        lake.write("test_results", row["job_completed_at"].date().isoformat(), pa.Table.from_pylist([row]))
    wanted = [Wanted(TEST_A, ["linux", "win"], ["linux", "win"], 4)]  # it flaked on both, 10 days ago
    old = {TEST_A: Evidence(TEST_A, last_main_flake_at=now - dt.timedelta(days=10))}
    details = []

    def one_run(run_id: str, evidence: dict) -> tuple[str, str]:
        f = file_disabled_issues(IssueTracker(github(httpserver), "pytorch/pytorch"), lake, day, wanted, evidence,
                                 ["skipped"], 10, run_id)
        details.append(f.rows[0]["detail"])
        life = run_lifecycle(github(httpserver), lake, Store(str(tmp_path / "out")), day, run_id, "pytorch/pytorch",
                             DisabledIssuesConfig(enabled=True), "cfg")
        return f.rows[0]["action"], ",".join(d.action for d in life.reenabling.decisions)

    assert one_run("run-1", old) == ("found", "narrow")
    assert fake.issues[issue["number"]]["body"].startswith("Platforms: win\n")
    writes = fake.count("PATCH"), len(fake.comments[issue["number"]])
    assert one_run("run-2", old) == ("found", "") and one_run("run-3", old) == ("found", "")
    assert (fake.count("PATCH"), len(fake.comments[issue["number"]])) == writes == (1, 1)
    assert not any("by hand" in d for d in details)  # the ledger knows the narrowing as this project's
    # a flake after the narrowing adds linux back, and the reruns before it no longer drop it
    flake = dt.datetime.now(dt.timezone.utc)
    assert one_run("run-4", {TEST_A: Evidence(TEST_A, last_main_flake_at=flake)}) == ("updated", "")
    assert fake.issues[issue["number"]]["body"].startswith("Platforms: win, linux\n")
    assert fake.comments[issue["number"]][1].startswith("It flaked on linux as well")


def test_a_platform_a_human_took_off_the_line_is_added_back_only_on_a_flake_after_the_edit(httpserver, tmp_path):
    """PyTorch's bot tells maintainers to re-enable a test on some platforms by removing them from
    the `Platforms:` line. The verdict's window still holds the flakes that widened the issue to
    them: adding them back on those would undo the maintainer's edit on every run."""
    fake = FakeIssueTracker(httpserver)
    now = dt.datetime.now(dt.timezone.utc)
    day = now.date().isoformat()
    issue = fake.add(f"DISABLED {TEST_A}", "Platforms: linux, win\n\nflaky", age=dt.timedelta(days=6))
    lake = Lake.at(str(tmp_path / "lake"))
    wanted = [Wanted(TEST_A, ["linux"], ["linux", "win"], 4)]
    widened = {TEST_A: Evidence(TEST_A, last_main_flake_at=now - dt.timedelta(days=5))}  # after the filing

    def one_run(run_id: str, evidence: dict) -> str:
        report = file_disabled_issues(IssueTracker(github(httpserver), "pytorch/pytorch"), lake, day, wanted,
                                      evidence, ["skipped"], 10, run_id)
        return report.rows[0]["action"]

    assert one_run("run-1", widened) == "found"
    fake._patch(fake.issues[issue["number"]], {"body": "Platforms: linux\n\nflaky, but not on Windows"})
    assert one_run("run-2", widened) == "found" and one_run("run-3", widened) == "found"
    assert fake.issues[issue["number"]]["body"] == "Platforms: linux\n\nflaky, but not on Windows"
    assert fake.count("PATCH") == 0 and fake.comments == {}
    # a flake after the edit adds win back
    assert one_run("run-4", {TEST_A: Evidence(TEST_A, last_main_flake_at=dt.datetime.now(dt.timezone.utc))}) \
        == "updated"
    assert fake.issues[issue["number"]]["body"].startswith("Platforms: linux, win\n")


def test_an_issue_naming_the_tests_module_in_its_suite_is_the_tests_own(httpserver, world):
    """PyTorch's runner matches a disabled test by its method and the last part of its suite
    (common_utils.py `check_if_enable`: the class name), so `test_a (test_x.TestX)`, as PyTorch's
    bot titles a test whose JUnit classname is dotted and as people copy it from a report, disables
    the same test as `test_a (__main__.TestX)`. A maintainer's issue so titled is the test's issue:
    it is widened when the test flakes elsewhere, and no second issue is filed beside it."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    filed = dt.datetime.now(dt.timezone.utc) - (START - dt.timedelta(days=1))  # before the history's flakes
    dotted = fake.add("DISABLED test_a (test_x.TestX)", "Platforms: win\n\nflaky", user="a-maintainer", age=filed)
    assert run(world, github(httpserver)).success
    assert fake.titled(f"DISABLED {TEST_A}") == []
    assert fake.issues[dotted["number"]]["body"] == "Platforms: win, linux\n\nflaky"
    published = world.published()
    assert TEST_A not in published and published["test_a (test_x.TestX)"] == entry(dotted, ["linux", "win"])
    (row,) = [r for r in world.ledger() if r["test"] == TEST_A]
    assert (row["action"], row["issue_number"]) == ("updated", dotted["number"])
    assert run(world, github(httpserver)).success and fake.titled(f"DISABLED {TEST_A}") == []


def test_a_flake_on_a_platform_the_issue_names_otherwise_changes_nothing(httpserver, tmp_path):
    """`windows` and `win` are one condition for PyTorch's runner (so are `mac` and `macos`, and
    `linux` holds on ROCm; PyTorch's bot takes dynamo and inductor jobs for Linux ones, and `dynamo`
    holds in inductor jobs): a flake there is covered, and rewriting the body, commenting and
    restarting the count of clean reruns would all be for nothing."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    now = dt.datetime.now(dt.timezone.utc)
    bodies = {"test_w (__main__.TestWin)": "Platforms: windows\r\n\r\nflaky on Windows",
              "test_m (__main__.TestMac)": "Platforms: macos\r\n",
              "test_r (__main__.TestRocm)": "Platforms: linux",
              "test_d (__main__.TestDynamo)": "Platforms: linux",
              "test_i (__main__.TestInductor)": "Platforms: dynamo"}
    issues = {t: fake.add(f"DISABLED {t}", b, user="a-maintainer", age=dt.timedelta(hours=6))
              for t, b in bodies.items()}
    flaked = {"test_w (__main__.TestWin)": ["win"], "test_m (__main__.TestMac)": ["mac"],
              "test_r (__main__.TestRocm)": ["rocm", "linux"], "test_d (__main__.TestDynamo)": ["dynamo", "inductor"],
              "test_i (__main__.TestInductor)": ["inductor"]}
    report = file_disabled_issues(IssueTracker(github(httpserver), "pytorch/pytorch"),
                                  Lake.at(str(tmp_path / "lake")), now.date().isoformat(),
                                  [Wanted(t, p, p, 3) for t, p in flaked.items()],
                                  {t: Evidence(t, last_main_flake_at=now - dt.timedelta(hours=1)) for t in flaked},
                                  ["skipped"], 10, "run-1", only_trusted=True)
    assert [r["action"] for r in report.rows] == ["found"] * 5
    assert all(fake.issues[i["number"]]["body"] == bodies[t] for t, i in issues.items())
    assert fake.comments == {} and fake.count("PATCH") == 0


# ---- who and what may disable a test ----------------------------------------------------


def world_of(h: History, tmp_path) -> World:
    """A World over the history `h` (its aggregates and flaky verdict built)."""
    lake = Lake.at(str(tmp_path / "built" / "lake"))
    day = h.build(lake)[-1]
    build_flaky_tests(lake, day)
    return World((tmp_path / "built", day, h), tmp_path)


def test_a_stranger_cannot_disable_a_test(httpserver, tmp_path):
    """Anyone may open an issue: PyTorch's bot closes a DISABLED issue whose author is neither
    pytorch-bot nor has write access (verifyDisableTestIssueBot), so it never reaches the list.
    Here a stranger's test issues, one test or an aggregate, are left out as their job issues are;
    the permission of each author is asked once a run, for both lists."""
    w = world_of(main_history(["test_ok"], 30, {}), tmp_path)
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    ok = fake.add("DISABLED test_by_maintainer (__main__.TestA)", "Platforms: linux", user="a-maintainer")
    bot = fake.add("DISABLED test_by_bot (__main__.TestA)", "", user="pytorch-bot[bot]")
    fake.add("DISABLED test_security_check (__main__.TestAuth)", "", user="a-stranger")  # not a collaborator
    fake.add("DISABLED MULTIPLE There are multiple flaky tests in test/test_auth.py",
             "disable the following tests:\n```\ntest_csrf (__main__.TestAuth):\n```\n", user="a-stranger")
    fake.add("DISABLED pull / linux-jammy / test (default)", "a job", user="a-stranger")
    result = run(w, github(httpserver))
    assert result.success
    assert w.published("stats/disabled-jobs.json") == {}
    assert w.published() == {"test_by_maintainer (__main__.TestA)": entry(ok, ["linux"]),
                             "test_by_bot (__main__.TestA)": entry(bot, [])}
    assert len(metadata(result, "disabled_tests")["refused_test_issues"]) == 2
    assert fake.count("GET", "/repos/pytorch/pytorch/collaborators/a-stranger/permission") == 1


def test_an_app_pytorchs_bot_authorizes_disables_a_test_but_not_a_job(httpserver, tmp_path):
    """PyTorch's bot authorizes two GitHub Apps for DISABLED test issues (hasWritePermissions), which
    GitHub reports as no collaborators; the job lists ask GitHub alone (getDisabledTestsAndJobs)."""
    w = world_of(main_history(["test_ok"], 30, {}), tmp_path)
    fake = FakeIssueTracker(httpserver)
    app = fake.add("DISABLED test_by_app (__main__.TestA)", "Platforms: linux", user="meta-codesync[bot]")
    tools = fake.add("DISABLED MULTIPLE There are multiple flaky tests in test_b.py",
                     "disable the following tests:\n```\ntest_b1 (__main__.TestB): win\n```\n",
                     user="facebook-github-tools[bot]")
    fake.add("DISABLED pull / linux-jammy / test (default)", "a job", user="meta-codesync[bot]")
    fake.add("UNSTABLE pull / linux-jammy / test (crossref)", "a job", user="facebook-github-tools[bot]")
    result = run(w, github(httpserver))
    assert result.success
    assert w.published() == {"test_by_app (__main__.TestA)": entry(app, ["linux"]),
                             "test_b1 (__main__.TestB)": entry(tools, ["win"])}
    assert w.published("stats/disabled-jobs.json") == {} and w.published("stats/unstable-jobs.json") == {}
    assert metadata(result, "disabled_tests")["refused_test_issues"] == []



def test_this_projects_own_issues_stay_trusted_after_the_ledgers_lookback(httpserver, world):
    """This project's account (an App's bot) is no collaborator: its issues are trusted because the
    ledger records it filing them, and that login is kept, so the issues it filed long ago still
    disable their tests once their ledger rows are past the lookback."""
    fake = FakeIssueTracker(httpserver)
    assert run(world, github(httpserver)).success
    filed = world.published()
    assert sorted(filed) == [TEST_A, TEST_B]
    shutil.rmtree(Path(world.lake_uri) / "disabled_issues" / f"day={world.day}", ignore_errors=True)
    assert not world.ledger()  # as if its rows were older than the lookback
    assert run(world, github(httpserver)).success  # finds its issues (by search), files nothing
    assert world.published() == filed and len(fake.issues) == 2


def test_an_upgraded_deployments_own_issues_past_the_lookback_stay_trusted(httpserver, world):
    """A deployment upgraded from a version that kept no learned logins, whose last issue was filed
    more than the ledger's lookback ago: its first run learns its account from the whole ledger,
    so it neither files a second issue for its tests nor closes one as a duplicate."""
    from torchci_assets.derived.flakiness.issues import LEDGER_LOOKBACK_DAYS, LEDGER_TABLE, OWN_LOGINS

    fake = FakeIssueTracker(httpserver)
    assert run(world, github(httpserver)).success
    filed = world.published()
    ledger = Path(world.lake_uri) / LEDGER_TABLE
    older = dt.date.fromisoformat(world.day) - dt.timedelta(days=LEDGER_LOOKBACK_DAYS + 10)
    (ledger / f"day={world.day}").rename(ledger / f"day={older.isoformat()}")  # filed long ago
    (Path(world.lake_uri) / OWN_LOGINS).unlink()  # what the older version leaves
    assert run(world, github(httpserver)).success
    assert world.published() == filed
    assert sorted((n, i["state"]) for n, i in fake.issues.items()) == [(n, "open") for n in sorted(fake.issues)]
    assert len(fake.issues) == 2


def test_flakes_only_on_a_pull_request_do_not_disable_a_test(httpserver, tmp_path):
    """PyTorch's flaky bot reads main's jobs only (flaky_tests/in_subprocess/query.sql,
    `head_branch = 'main'`; disable.ts filterOutPRFlakyTests): a pull request that makes its own
    test flaky must not get it disabled for everyone. The verdict still says flaky (Dr. CI wants
    to know), but no issue is filed and nothing is published."""
    h = main_history(["test_pr_only", "test_ok"], 40, {})
    for k, i in enumerate((10, 20, 30)):  # three pushes to a pull request; its test flakes in each
        h.run(i, LINUX, {"test_pr_only": "flake"}, branch="gh/someone/1/head", head=f"{k + 1:x}" * 40,
              later_hours=0.9)
    w = world_of(h, tmp_path)
    fake = FakeIssueTracker(httpserver)
    assert run(w, github(httpserver)).success
    assert [i["title"] for i in fake.issues.values()] == [] and w.published() == {}
    con = connect()
    w.lake.register(con, "flaky_tests", [w.day], name="f")
    v = con.execute("SELECT verdict, flake_events, main_flake_events, main_flaky_platforms FROM f "
                    "WHERE name = 'test_pr_only'").fetchone()
    con.close()
    assert v == ("flaky", 3, 0, [])


def test_a_pull_requests_failure_does_not_reopen_a_closed_issue(httpserver, tmp_path):
    """A human closed the test's issue after its last main-branch flake; later a pull request
    breaks the test (it fails every retry, on that pull request only). PyTorch's bot reopens only
    on new flakiness on main: a pull request's failure reopening it would disable the test on main
    again, and hide the break from the pull request's own CI."""
    h = main_history(["test_a", "test_ok"], 40, {i: {"test_a": "flake"} for i in (5, 17, 30)})
    h.run(38, LINUX, {"test_a": "fail"}, branch="gh/someone/2/head", head="e" * 40, later_hours=0.9)
    w = world_of(h, tmp_path)
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-human"] = "write"  # a maintainer closed their own issue
    closed_at = START + dt.timedelta(hours=34)  # after the last main flake (commit 30), before the PR (38)
    issue = fake.add(f"DISABLED {TEST_A}", "Platforms: linux\n\nflaky", state="closed",
                     age=dt.datetime.now(dt.timezone.utc) - closed_at)
    assert run(w, github(httpserver)).success
    assert fake.issues[issue["number"]]["state"] == "closed", fake.comments.get(issue["number"])
    assert TEST_A not in w.published()
    (row,) = [r for r in w.ledger() if r["test"] == TEST_A]
    assert (row["action"], row["issue_number"]) == ("found", issue["number"]) and "left closed" in row["detail"]



def test_a_strangers_issue_does_not_stand_for_the_tests_own(httpserver, world):
    """A stranger's open `DISABLED test_a` issue is left out of the list (its author may not
    disable a test): the filing must not take it for the test's issue either, or nothing is filed
    and a flaky test stays enabled. The project files its own, once, and leaves the stranger's
    as it is."""
    fake = FakeIssueTracker(httpserver)
    stranger = fake.add(f"DISABLED {TEST_A}", "Platforms: win\n\nplease", user="a-stranger")
    result = run(world, github(httpserver))
    assert result.success
    ours = [i for i in fake.titled(f"DISABLED {TEST_A}") if i["number"] != stranger["number"]]
    assert len(ours) == 1 and world.published()[TEST_A] == entry(ours[0], ["linux"])
    (row,) = [r for r in world.ledger() if r["test"] == TEST_A]
    assert (row["action"], row["issue_number"]) == ("created", ours[0]["number"])
    assert f"left aside #{stranger['number']} by a-stranger" in row["detail"]
    assert fake.issues[stranger["number"]]["body"] == "Platforms: win\n\nplease"  # not widened as if ours
    assert not fake.comments.get(stranger["number"])
    # exactly once: the next runs find the project's issue
    posts = fake.count("POST", "/repos/pytorch/pytorch/issues")
    assert run(world, github(httpserver)).success and run(world, github(httpserver), tags=REFRESH).success
    assert fake.count("POST", "/repos/pytorch/pytorch/issues") == posts
    assert len(fake.titled(f"DISABLED {TEST_A}")) == 2 and world.published()[TEST_A] == entry(ours[0], ["linux"])


def test_a_crash_right_after_the_very_first_create_files_no_second_issue(httpserver, world, monkeypatch):
    """The first issue this project ever files: GitHub is asked which account the credentials
    write as before it, and that is kept, so a run killed right after GitHub's 201 (before the
    ledger, before anything else is kept) leaves an issue the next run knows as ours: it files
    nothing for that test again and closes nothing."""
    fake = FakeIssueTracker(httpserver, lag=True)  # search does not see new issues yet
    real_create = issues_module.IssueTracker.create

    def killed(tracker, title, body, labels):
        real_create(tracker, title, body, labels)
        raise SystemExit("killed right after GitHub's 201")
    monkeypatch.setattr(issues_module.IssueTracker, "create", killed)
    assert not run(world, github(httpserver)).success
    (first,) = [i for i in fake.issues.values()]
    monkeypatch.setattr(issues_module.IssueTracker, "create", real_create)
    assert run(world, github(httpserver)).success
    assert fake.count("POST", "/repos/pytorch/pytorch/issues") == 2  # the first, then the other test's
    for test in (TEST_A, TEST_B):
        (issue,) = fake.titled(f"DISABLED {test}")
        assert issue["state"] == "open"
    assert fake.issues[first["number"]]["state"] == "open"
    assert fake.count("GET", "/user") == 1  # the account is kept: never asked again


def test_a_crash_before_this_projects_account_is_known_leaves_one_open_issue(httpserver, world, monkeypatch):
    """Where GitHub does not say which account the credentials write as (403 on /user, as for an
    Actions token), the first create's answer teaches it. A run killed right after that 201,
    before anything was kept: the next run does not know the issue's author, files once more,
    learns the account, and closes its own twin; each test keeps exactly one open issue."""
    fake = FakeIssueTracker(httpserver, lag=True)  # search does not see new issues yet
    fake.says_account = False
    real_keep = issues_module.keep_own_logins

    def killed(lake, logins):
        if logins:  # what a create learned
            raise SystemExit("killed after GitHub's 201, before its account was kept")
        return real_keep(lake, logins)
    monkeypatch.setattr(issues_module, "keep_own_logins", killed)
    assert not run(world, github(httpserver)).success
    (b,) = fake.titled(f"DISABLED {TEST_B}")
    monkeypatch.setattr(issues_module, "keep_own_logins", real_keep)
    assert run(world, github(httpserver)).success
    for test in (TEST_A, TEST_B):
        assert len(fake.titled(f"DISABLED {test}", state="open")) == 1
    assert fake.titled(f"DISABLED {TEST_B}", state="open") == [fake.issues[b["number"]]]
    assert world.published()[TEST_B] == entry(b, [])
    posts = fake.count("POST", "/repos/pytorch/pytorch/issues")
    assert run(world, github(httpserver)).success and fake.count("POST", "/repos/pytorch/pytorch/issues") == posts


def own_twins_world(fake) -> dict[str, dict]:
    """Open issues titled `DISABLED test_a`: a stranger's copy of this project's body (the oldest),
    this project's first and its twin, a maintainer's without the marker; and this project's
    aggregate with its twin."""
    body = f"Platforms: linux\n\n{MARKER}"
    aggregate = aggregate_title("test_burst.py")
    return {"stranger": fake.add(f"DISABLED {TEST_A}", body, user="a-stranger"),
            "first": fake.add(f"DISABLED {TEST_A}", body, user=ACCOUNT),
            "twin": fake.add(f"DISABLED {TEST_A}", body, user=ACCOUNT),
            "maintainer's": fake.add(f"DISABLED {TEST_A}", "Platforms: win", user="a-maintainer"),
            "aggregate": fake.add(aggregate, aggregate_body("test_burst.py", {TEST_B: []}, body), user=ACCOUNT),
            "aggregate twin": fake.add(aggregate, aggregate_body("test_burst.py", {TEST_B: []}, body), user=ACCOUNT)}


def test_a_run_closes_this_projects_open_twins_once_and_no_one_elses(httpserver, world):
    """Twins left open by runs killed one after the other (an Actions token, which does not say its
    account) are closed by the next run that reads them, as duplicates of the oldest open issue of
    the title that counts, with one comment; a stranger's issue (which disables nothing), a
    maintainer's, and the oldest stay open, and the run after closes and says nothing again."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions["a-maintainer"] = "write"
    issues = own_twins_world(fake)
    keep_own_logins(world.lake, {ACCOUNT})
    for run_id in ("run-1", "run-2"):
        report = file_disabled_issues(IssueTracker(github(httpserver), "pytorch/pytorch"), world.lake, world.day,
                                      [], {}, ["skipped"], 10, run_id, only_trusted=True)
        assert report.twins_closed == ([issues["twin"]["number"], issues["aggregate twin"]["number"]]
                                       if run_id == "run-1" else [])
    closed = {k for k, i in issues.items() if fake.issues[i["number"]]["state"] == "closed"}
    assert closed == {"twin", "aggregate twin"}
    for twin, kept in (("twin", "first"), ("aggregate twin", "aggregate")):
        assert fake.issues[issues[twin]["number"]]["state_reason"] == "not_planned"
        assert [c.split("\n")[0] for c in fake.comments[issues[twin]["number"]]] == [
            f"Duplicate of #{issues[kept]['number']}, an older open issue for the same test; closing this one."]
    assert fake.count("PATCH") == 2 and fake.count("POST") == 2


def test_a_dry_run_logs_the_twins_it_would_close(httpserver):
    fake = FakeIssueTracker(httpserver)
    issues = own_twins_world(fake)
    dry = github(httpserver, token="")
    tracker, lines = IssueTracker(dry, "pytorch/pytorch"), []
    tracker.load_open()
    tracker.trust(Permissions(dry, "pytorch/pytorch", {ACCOUNT}))
    assert close_own_twins(tracker, lines.append) == []
    assert lines == [f"DRY RUN: would close #{issues[twin]['number']} {issues[twin]['title']!r} as a duplicate of "
                     f"#{issues[kept]['number']}" for twin, kept in (("twin", "first"), ("aggregate twin", "aggregate"))]
    assert fake.count("PATCH") == fake.count("POST") == 0 and dry.dry_run_requests == []


def permission_asks(fake, start: int = 0) -> dict[str, int]:
    """How many times GitHub was asked each author's permission, from request `start` on."""
    asked: dict[str, int] = {}
    for _, path, _ in fake.requests[start:]:
        if path.startswith("/repos/pytorch/pytorch/collaborators/"):
            login = path.split("/")[5]
            asked[login] = asked.get(login, 0) + 1
    return asked


def test_each_author_is_asked_once_a_run_by_the_filing_the_lists_and_the_unstable_jobs(httpserver, world):
    """disabled_issues asks about the authors of the issues it finds for its tests, disabled_tests
    about every DISABLED issue's, unstable_jobs about every UNSTABLE issue's: the same people, often.
    One run asks GitHub about each once, the later steps taking the answers the earlier ones got;
    the next run asks again, so a permission withdrawn in between counts from that run on."""
    fake = FakeIssueTracker(httpserver)
    fake.permissions.update({"a-maintainer": "write", "a-writer": "write"})
    human = fake.add(f"DISABLED {TEST_A}", "Platforms: linux", user="a-maintainer")  # the filing takes it
    fake.add(f"DISABLED {TEST_B}", "", user="a-stranger")  # left aside: the project files its own
    job = fake.add("DISABLED pull / win / test (default)", "", user="a-writer")
    fake.add("UNSTABLE pull / linux-jammy / test (default)", "", user="a-maintainer")
    fake.add("UNSTABLE trunk / rocm", "", user="a-stranger")
    result = run(world, github(httpserver))
    assert result.success
    assert permission_asks(fake) == {"a-maintainer": 1, "a-stranger": 1, "a-writer": 1}
    assert world.published()[TEST_A] == entry(human, ["linux"]) and world.published()[TEST_B][0] != number(human)
    assert list(world.published("stats/disabled-jobs.json")) == ["pull / win / test (default)"]
    assert list(world.published("stats/unstable-jobs.json")) == ["pull / linux-jammy / test (default)"]
    start = len(fake.requests)
    assert run(world, github(httpserver), tags=REFRESH).success  # a refresh asks once a run too
    assert permission_asks(fake, start) == {"a-maintainer": 1, "a-stranger": 1, "a-writer": 1}
    fake.permissions["a-maintainer"] = "read"  # withdrawn: the next run trusts none of the maintainer's issues
    start = len(fake.requests)
    assert run(world, github(httpserver)).success
    assert permission_asks(fake, start) == {"a-maintainer": 1, "a-stranger": 1, "a-writer": 1}
    assert world.published("stats/unstable-jobs.json") == {}
    assert world.published()[TEST_A][0] != number(human)  # the project's own issue now disables it
    assert world.published("stats/disabled-jobs.json")["pull / win / test (default)"][1] == number(job)
