"""Main's line with a stack landed in one push (ghstack): every commit the push lists is on it, in
the push's order, so the HUD shows them and the trunk guardians judge them. The push table comes
from the ingest of GitHub's example push (tests/data/octokit) with the stack laid over; days
written before the push table kept a push's commits (the HUD tests' lakes: no `commits` column)
still read, their heads alone on the line."""

import datetime as dt

import pyarrow.parquet as pq
from hud_lake import DAY, REPO, History, sha
from test_guardians_attempts import GROUP, JOB, NOW, at
from test_push_commits import line, stack_push

from resources.github import GitHubResource
from resources.lake import Lake, connect
from resources.storage import Store
from tests.fake_github_issues import FakeIssueTracker
from tests.fake_github_reruns import FakeActions
from torchci_assets.derived.guardians.passes import autorevert_pass, judged
from torchci_assets.derived.hud.health import build_commit_health
from torchci_assets.guardian_config import AutorevertConfig
from torchci_assets.ingest.webhooks import ingest_webhook_day

def ingested_pushes(tmp_path, lake: Lake, pushes: list[tuple[int, list[int], int]], octokit) -> None:
    """The day's push table as the ingest writes it from (before, commits, minute) pushes to main,
    put in `lake` (whose other tables a History wrote)."""
    archive, staged = Store(str(tmp_path / "archive")), Lake.at(str(tmp_path / "ingested"))
    archive.write_bytes(f"webhooks/day={DAY}/a.jsonl", b"".join(
        line("push", f"push-{commits[-1]}", stack_push(octokit, before, commits), minute)
        for before, commits, minute in pushes))
    ingest_webhook_day(archive, staged, DAY, workers=1)
    [f] = staged.files("push", [DAY])
    lake.write("push", DAY, pq.read_table(f, filesystem=staged.store.fs))


def line_of(lake: Lake) -> list[tuple[str, dt.datetime, str | None]]:
    con = connect()
    lake.register(con, "commit_health", [DAY], name="h")
    return con.execute("SELECT sha, pushed_at, any_value(job_group) FROM h GROUP BY ALL ORDER BY pushed_at, sha").fetchall()


def stacked_history(octokit, tmp_path) -> Lake:
    """Commits 1 and 2 pushed the day before by the version without `commits`; today the stack
    3, 4, 5 in one push, then 6. Trunk ran on 1, 2, 5 and 6 only: green on 1 and 2, red on 5 (twice)
    and 6, so 3 and 4 may as well be the cause."""
    h = History()
    h.push(1, at(10) - dt.timedelta(days=1))
    h.push(2, at(20) - dt.timedelta(days=1))
    for i, minute in ((1, -1430), (2, -1420), (5, 31), (6, 41)):
        h.run(100 + i, "trunk", created=at(minute))

    def attempt(i, conclusion, minute, n=1):
        h.job(sha(i), JOB, conclusion, workflow="trunk", run_id=100 + i, attempt=n, created=at(minute), minutes=20)
    attempt(1, "success", -1429)
    attempt(2, "success", -1419)
    attempt(2, "success", 100, 2)
    attempt(5, "failure", 31)
    attempt(5, "failure", 70, 2)
    attempt(6, "failure", 41)
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    ingested_pushes(tmp_path, lake, [(2, [3, 4, 5], 30), (5, [6], 40)], octokit)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    return lake


def test_every_commit_of_a_stack_is_on_mains_line_in_the_order_it_landed(tmp_path, octokit):
    lake = stacked_history(octokit, tmp_path)
    got = line_of(lake)
    assert [s for s, _, _ in got] == [sha(i) for i in range(1, 7)]
    pushed = {s: t for s, t, _ in got}
    # the head keeps the push's arrival; the commits below it come just before, in the push's order
    assert pushed[sha(5)] == at(30)
    assert pushed[sha(5)] - pushed[sha(3)] == dt.timedelta(microseconds=2)
    # the day before, written without `commits`: its heads as they were
    assert pushed[sha(1)] == at(10) - dt.timedelta(days=1)
    # 3 and 4 ran nothing: on the line without a job group
    assert {s for s, _, g in got if g is None} == {sha(3), sha(4)}


def test_the_head_of_a_stack_is_not_blamed_for_commits_below_it_that_never_ran(tmp_path, octokit, httpserver):
    lake = stacked_history(octokit, tmp_path)
    history, verdicts = judged(lake, AutorevertConfig(enabled=True), NOW, False)
    assert history.commits == tuple(sha(i) for i in range(1, 7))
    v = next(v for v in verdicts if v.signal.key == GROUP)
    assert v.kind == "suspect" and {sha(3), sha(4)} <= set(v.suspects)
    fa, tracker = FakeActions(httpserver, REPO), FakeIssueTracker(httpserver, REPO)
    for i in (3, 4, 5):
        pr = tracker.add(f"change {i}", pull_request=True)
        fa.add_pull(sha(i), pr["number"], merged_at_unset=True)
        fa.set_message(sha(i), f"change {i}\n\nPull Request resolved: https://github.com/{REPO}/pull/{pr['number']}")
    gh = GitHubResource(api_url=httpserver.url_for(""), token="ghp_FAKEtokenGUARDIANS0123456789", write_interval_s=0.0)
    gh._sleep = lambda s: None
    summary = autorevert_pass(gh, lake, REPO, AutorevertConfig(enabled=True), NOW)
    assert summary.confirmed == [] and summary.taken == []
    assert {n: bodies for n, bodies in tracker.comments.items() if bodies} == {}


def test_days_ingested_before_pushes_kept_their_commits_still_build_the_line(tmp_path):
    # the HUD's own lakes are written in the columns it read before `commits`: each push its head alone
    h = History()
    h.push(1, at(10) - dt.timedelta(days=1))
    h.push(2, at(10))
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    report = build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    assert [s for s, _, _ in line_of(lake)] == [sha(1), sha(2)] and report.inputs["push"] == 2
    # and a lake without any push partition in the window builds an empty line
    empty = Lake.at(str(tmp_path / "empty"))
    report = build_commit_health(empty, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    assert (report.commits, report.inputs["push"], line_of(empty)) == (0, 0, [])


def test_the_commits_under_a_stacks_head_have_no_signal_at_once_while_a_new_head_is_pending(tmp_path, octokit):
    """GitHub runs a push's workflows on its head only: a commit under a stack's head never gets a
    job, so the HUD must not show it pending for the 36 hours a head waits for its first jobs. A
    head pushed moments ago, with no job yet, is pending."""
    lake = stacked_history(octokit, tmp_path)
    ingested_pushes(tmp_path / "more", lake, [(2, [3, 4, 5], 30), (5, [6], 40), (6, [7, 8], 50)], octokit)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    con = connect()
    lake.register(con, "commit_health", [DAY], name="h")
    conclusions = dict(con.execute("SELECT sha, any_value(conclusion) FROM h GROUP BY sha").fetchall())
    assert {i: conclusions[sha(i)] for i in (3, 4, 7, 8)} == {
        3: "no_signal", 4: "no_signal", 7: "no_signal", 8: "pending"}
    assert conclusions[sha(5)] == "red"
