"""Dr. CI's search of other pull requests for the same failure (PyTorch's hasSimilarFailures): a failure
another author's pull request met first, in the same span, and was merged over, is FLAKY: two authors'
changes did not both break it. Never the same author's (a ghstack stack shares its breakage), nor an
author the lake does not know, nor a head that did not land (work in progress). The rule on hand-made
jobs; then through the real lake builders (commit_health, pr_jobs, drci_comments), the authors read
from the pull_request table the webhook ingest writes, and the fake GitHub compare API."""

import datetime as dt
import json

import pyarrow as pa
import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import DAY, REPO, T0, History, sha
from test_drci import BASE, BROKEN, GROUP, failing_job, flaky, gh, trunk
from test_drci_reverted_pr import landed_by_github, webhooks

from resources.lake import Lake
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.comment import Head, render
from torchci_assets.derived.drci.inputs import PullRequest, index_failures, other_failures
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.ingest.webhook_scan import WEBHOOK_EVENTS_SCHEMA

T1 = "TestOps.test_add (test_ops.py)"
CLOSE = "AssertionError: Tensor-likes are not close!"
AT = dt.datetime(2026, 11, 2, 9, tzinfo=dt.timezone.utc)


def other(tests=((T1, CLOSE),), line: str = "", group: str = GROUP, **kw) -> c.OtherFailure:
    fields = dict(pr=60, sha="ef" * 20, job_group=group, job_id=601, run_id=60, at=AT, line=c.message_key(line),
                  build_env="linux-jammy-py3.10-gcc11", test_config="default",
                  tests=frozenset((k, c.message_key(m)) for k, m in tests))
    return c.OtherFailure(**{**fields, **kw})


def verdict(job: c.HeadJob, *others: c.OtherFailure) -> c.Verdict:
    found: dict[str, list[c.OtherFailure]] = {}
    for o in others:
        found.setdefault(o.job_group, []).append(o)
    return c.classify(job, trunk({}), flaky(), others=found)


def test_the_same_failing_test_and_message_on_another_author_s_pull_request_is_flaky_and_cited():
    job = failing_job([(T1, CLOSE + "\nMismatched elements: 3 / 64")])
    v = verdict(job, other(tests=[(T1, CLOSE + "\nMismatched elements: 9 / 64")]))
    assert (v.cls, v.other.pr) == (c.FLAKY, 60)
    body = render(Head(REPO, 61, "ab" * 20, sha(5), None, "https://github.com", None), [v], 0)
    assert f"([similar failure](https://github.com/{REPO}/actions/runs/60/job/601) on #60: {'ef' * 5})" in body


@pytest.mark.parametrize("theirs", [
    other(tests=[(T1, "RuntimeError: CUDA error: an illegal memory access")]),  # another message
    other(test_config="distributed"),  # another test config
    other(group="pull / linux-jammy-py3.10-clang12 / test (default, linux.4xlarge)"),  # another job group
    other(cancelled=True),  # cancelled there, failed here
])
def test_another_failure_on_another_pull_request_is_no_evidence(theirs):
    assert verdict(failing_job([(T1, CLOSE)]), theirs).cls == c.NEW


def test_every_failing_test_must_have_failed_there_or_be_a_known_flake():
    job = failing_job([(T1, CLOSE), ("TestNN.test_conv (test_nn.py)", "AssertionError: boom")])
    assert verdict(job, other()).cls == c.NEW


@pytest.mark.parametrize("line,name,cls", [
    ("RuntimeError: test_ops 1/1 failed! Received signal: SIGSEGV", None, c.FLAKY),
    ("Process completed with exit code 1", None, c.NEW),  # says nothing to compare
    ("", None, c.NEW),  # nothing to compare
    # a build is never called flaky (PyTorch's EXCLUDED_FROM_FLAKINESS)
    ("error: 'foo' was not declared in this scope", "linux-jammy-py3.10-gcc11 / build", c.NEW),
])
def test_a_job_without_failing_tests_is_compared_by_its_log_line(line, name, cls):
    kw = {"name": name} if name else {}
    job = failing_job(failure_line=line, **kw)
    assert verdict(job, other(tests=(), line=line, group=job.job_group)).cls == cls


def test_other_authors_failures_are_asked_for_the_job_s_group_only():
    """At PyTorch's volume a day's builds classify thousands of failing jobs against hundreds of landed
    pull requests' failures: each job asks the failures of its own group, never every group's."""
    pr = PullRequest(61, "ab" * 20, "open", "main", "me/61", AT, author="me", pushed_at=AT)
    landed = PullRequest(60, "ef" * 20, "closed", "main", "you/60", AT, author="you", pushed_at=AT)
    landed.jobs = [failing_job([(T1, CLOSE)])]
    for i in range(30):
        landed.jobs.append(failing_job([(T1, CLOSE)], name=f"job {i}"))
        landed.jobs[-1].job_group = f"pull / job {i}"
    for j in landed.jobs:
        j.completed_at = AT - dt.timedelta(hours=1)
    index = index_failures({60: landed}, {60: frozenset({"c" * 40})})
    asked = []

    class Asked(dict):
        def get(self, group, default=None):
            asked.append(group)
            return super().get(group, default)

    others = other_failures(Asked(index), pr, AT - dt.timedelta(hours=5))
    v = c.classify(failing_job([(T1, CLOSE)]), trunk({}), flaky(), others=others)
    assert (v.cls, v.other.pr) == (c.FLAKY, 60)
    assert set(asked) == {GROUP}


def test_main_s_evidence_comes_first():
    """Broken on main at the merge base: BROKEN TRUNK (rebase), whatever other pull requests met."""
    job = failing_job([(T1, BROKEN)])
    v = c.classify(job, trunk({BASE: [GROUP]}, {BASE: {T1}}), flaky(), others={GROUP: [other(tests=[(T1, BROKEN)])]})
    assert v.cls == c.BROKEN_TRUNK


# ---- through the lake ------------------------------------------------------------------------

JOB = "linux-jammy / test (default, 1, 1, linux.4xlarge)"
SEGV = "RuntimeError: test_ops 1/1 failed! Received signal: SIGSEGV"
PR_SCHEMA = pa.schema([("repo", pa.string()), ("number", pa.int64()), ("action", pa.string()),
                       ("state", pa.string()), ("head_sha", pa.string()), ("head_ref", pa.string()),
                       ("base_ref", pa.string()), ("labels", pa.list_(pa.string())), ("merged", pa.bool_()),
                       ("updated_at", pa.timestamp("us", tz="UTC")), ("author", pa.string()),
                       ("closes", pa.list_(pa.int64())), ("received_at", pa.timestamp("us", tz="UTC")),
                       ("delivery_id", pa.string())])


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, REPO)


def failing_pr(h: History, number: int, hours: float, line: str = SEGV) -> str:
    """Pull request `number`'s head, pushed T0 + `hours` on main's sha(5), failing JOB with `line`."""
    head = f"{number:040x}"
    j = h.job(head, JOB, "failure", run_id=number * 10, branch=f"u/{number}", created=T0 + dt.timedelta(hours=hours))
    h.add("job_failure", DAY, job_id=j, run_attempt=1, infra=False, line=line)
    return head


def comments(tmp_path, httpserver, fake, authors: dict[int, str | None], lines: dict[int, str] | None = None,
             keep_authors: bool = True, sixty: str = "landed") -> dict[int, dict]:
    """Each pull request's comment: pull requests 60 (pushed at T0+2h) and 61 (T0+3h) fail JOB, main's
    sha(1)..sha(5) pass it; `authors`: their logins in their pull_request webhooks (None: not named);
    `keep_authors`: False writes the table as before the lake kept authors (no such column); `sixty`:
    what became of 60 since: `landed` (merged over its failure, as sha(6)), `closed` unmerged, `open`."""
    h = History()
    for i in range(1, 6):
        h.push(i, T0 - dt.timedelta(hours=6 - i))
        h.job(sha(i), JOB, "success", run_id=i, created=T0 - dt.timedelta(hours=6 - i))
    lines = lines or {}
    prs = [(n, failing_pr(h, n, hours, lines.get(n, SEGV))) for n, hours in ((60, 2), (61, 3))]
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    closed = {60: sixty != "open"}
    rows = [{"repo": REPO, "number": n, "action": "closed" if closed.get(n) else "opened",
             "state": "closed" if closed.get(n) else "open", "head_sha": head, "head_ref": f"u/{n}",
             "base_ref": "main", "labels": [], "merged": False, "updated_at": T0, "author": authors.get(n),
             "received_at": T0, "delivery_id": f"pr-{n}"} for n, head in prs]
    table = pa.Table.from_pylist(rows, schema=PR_SCHEMA)
    lake.write("pull_request", DAY, table if keep_authors else table.drop_columns(["author"]))
    if sixty == "landed":
        webhooks(lake, landed_by_github(60, sha(6)))
    for _, head in prs:
        fake.merge_bases[head] = sha(5)
    now = T0.replace(hour=20)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, DAY, REPO, now=now)
    return {r["pr"]: r for r in build_comments(lake, gh(httpserver), DAY, REPO, now=now).rows}


def test_a_failure_another_author_s_pull_request_met_and_landed_over_is_flaky(tmp_path, httpserver, fake):
    """61 (bob) failed as 60 (ada) had an hour before, and 60 was merged with that failure: FLAKY,
    citing 60. 60's failure came first: NEW for it (61 is no landed head either)."""
    rows = comments(tmp_path, httpserver, fake, {60: "ada", 61: "Bob"})
    assert (rows[61]["flaky"], rows[61]["new"]) == (1, 0), rows[61]["body"]
    assert f"on #60: {f'{60:040x}'[:10]})" in rows[61]["body"]
    assert (rows[60]["flaky"], rows[60]["new"]) == (0, 1), rows[60]["body"]


@pytest.mark.parametrize("authors,keep,sixty", [
    ({60: "ada", 61: "Ada"}, True, "landed"),   # one author's two pull requests (a stack): its own breakage
    ({60: None, 61: "bob"}, True, "landed"),    # 60's author not named: it may be bob's
    ({60: "ada", 61: "bob"}, False, "landed"),  # a lake written before authors were kept
    ({60: "ada", 61: "bob"}, True, "open"),     # work in progress: its failure may be its own
    ({60: "ada", 61: "bob"}, True, "closed"),   # closed unmerged: nobody vouched for its failures
])
def test_without_two_known_authors_or_a_landed_head_the_failure_stays_new(tmp_path, httpserver, fake, authors,
                                                                          keep, sixty):
    rows = comments(tmp_path, httpserver, fake, authors, keep_authors=keep, sixty=sixty)
    assert (rows[61]["flaky"], rows[61]["new"]) == (0, 1), rows[61]["body"]


def test_another_line_on_the_other_pull_request_is_no_evidence(tmp_path, httpserver, fake):
    rows = comments(tmp_path, httpserver, fake, {60: "ada", 61: "bob"},
                    lines={60: "RuntimeError: test_ops 1/1 failed! Received signal: SIGABRT"})
    assert (rows[61]["flaky"], rows[61]["new"]) == (0, 1), rows[61]["body"]


def earlier_comment(tmp_path, httpserver, fake, landed_days_before: int, author: str = "ada") -> dict:
    """Pull request 61's comment (bob's, pushed on DAY, T0+3h, failing JOB) when main's sha(1)..sha(5)
    were pushed 5 days before DAY (sha(5), 61's merge base, at 07:00) and pull request 60 (`author`'s)
    failed JOB the same way `landed_days_before` DAY at 10:00 and landed that day. Every day's
    commit_health and pr_jobs is built as the daily runs build them."""
    h, lake = History(), Lake.at(str(tmp_path / "lake"))
    main_at = T0 - dt.timedelta(days=5)
    for i in range(1, 6):
        at = main_at - dt.timedelta(hours=5 - i)
        h.push(i, at)
        h.job(sha(i), JOB, "success", run_id=i, created=at, day=at.date().isoformat())
    sixty_at = T0 - dt.timedelta(days=landed_days_before) + dt.timedelta(hours=2)
    sixty_day = sixty_at.date().isoformat()
    heads = {}
    for n, at in ((60, sixty_at), (61, T0 + dt.timedelta(hours=3))):
        heads[n], day = f"{n:040x}", at.date().isoformat()
        j = h.job(heads[n], JOB, "failure", run_id=n * 10, branch=f"u/{n}", created=at, day=day)
        h.add("job_failure", day, job_id=j, run_attempt=1, infra=False, line=SEGV)
        fake.merge_bases[heads[n]] = sha(5)
    h.write(lake)
    for n, day, state, who in ((60, sixty_day, "closed", author), (61, DAY, "open", "bob")):
        at = sixty_at + dt.timedelta(hours=1) if n == 60 else T0
        lake.write("pull_request", day, pa.Table.from_pylist([{
            "repo": REPO, "number": n, "action": state if state == "closed" else "opened", "state": state,
            "head_sha": heads[n], "head_ref": f"u/{n}", "base_ref": "main", "labels": [], "merged": n == 60,
            "updated_at": at, "author": who, "received_at": at, "delivery_id": f"pr-{n}"}], schema=PR_SCHEMA))
    event, action, payload = landed_by_github(60, sha(6))
    payload["pull_request"]["head"]["sha"] = heads[60]
    lake.write("webhook_events", sixty_day, pa.Table.from_pylist([{
        "event": event, "action": action, "delivery_id": "merge-60", "received_at": sixty_at + dt.timedelta(hours=1),
        "repo": REPO, "payload": json.dumps(payload)}], schema=WEBHOOK_EVENTS_SCHEMA))
    now = T0.replace(hour=20)
    first = min(main_at.date(), sixty_at.date())
    for day in (str(first + dt.timedelta(days=i)) for i in range((T0.date() - first).days + 1)):
        build_commit_health(lake, day, REPO, ("refs/heads/main",), min_groups=1, now=now)
        build_pr_jobs(lake, day, REPO, now=now)
    return {r["pr"]: r for r in build_comments(lake, gh(httpserver), DAY, REPO, now=now).rows}


def test_a_pull_request_landed_before_the_day_s_window_is_searched_too(tmp_path, httpserver, fake):
    """60 landed 4 days before DAY, over the failure 61 meets on DAY: no pr_jobs row of DAY holds 60 (a
    partition holds the pull requests active on its day and the two before), the partition 3 days
    before does, and 61's span reaches back to a day before its merge base (6 days): FLAKY, citing 60.
    Only 61 gets a comment."""
    rows = earlier_comment(tmp_path, httpserver, fake, landed_days_before=4)
    assert (rows[61]["flaky"], rows[61]["new"]) == (1, 0), rows[61]["body"]
    assert f"on #60: {f'{60:040x}'[:10]})" in rows[61]["body"]
    assert sorted(rows) == [61]


@pytest.mark.parametrize("days_before,author", [
    (7, "ada"),  # in the partition 6 days before, but before the span: a day before the merge base's push
    (4, "bob"),  # the same author's
])
def test_an_earlier_pull_request_outside_the_span_or_of_the_same_author_is_no_evidence(
        tmp_path, httpserver, fake, days_before, author):
    rows = earlier_comment(tmp_path, httpserver, fake, landed_days_before=days_before, author=author)
    assert (rows[61]["flaky"], rows[61]["new"]) == (0, 1), rows[61]["body"]


def test_the_span_searched_is_upstream_s_and_the_same_branch_is_never_another_pull_request():
    """From a day before the merge base's push to the head's; none when that is over a week (the merge
    base is too old to tell by); a head on the same branch is the same work, whatever its number; a
    pull request still open is work in progress."""
    def pr(number, ref, author, pushed, state="closed"):
        job = failing_job([(T1, CLOSE)], completed_at=pushed)
        return PullRequest(number, f"{number:040x}", state, "main", ref, None, jobs=[job], pushed_at=pushed,
                           author=author)

    mine = pr(61, "u/61", "bob", AT, "open")
    theirs = [pr(60, "u/60", "ada", AT - dt.timedelta(hours=30)),  # a day before a merge base pushed 6 h before
              pr(59, "u/61", "cy", AT - dt.timedelta(hours=1)),    # the same branch
              pr(58, "u/58", "dee", AT - dt.timedelta(hours=2)),
              pr(57, "u/57", "eve", AT - dt.timedelta(hours=2), "open")]  # not landed
    landed = {n: frozenset({sha(n)}) for n in (60, 59, 58, 57)}
    index = index_failures({p.number: p for p in [mine, *theirs]}, landed)
    found = other_failures(index, mine, AT - dt.timedelta(hours=6))
    assert [o.pr for o in found[GROUP]] == [60, 58] and list(found) == [GROUP]
    assert [o.pr for o in other_failures(index, mine, AT)[GROUP]] == [58]  # merge base at the head's push
    assert other_failures(index, mine, AT - dt.timedelta(days=7)) == {}  # over a week
