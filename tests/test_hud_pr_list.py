"""The pull requests on the HUD: index.html's list and pr/<n>.html, against what pr_jobs holds and
what Dr. CI says of the same jobs."""

import datetime as dt
import re

import pyarrow as pa
import pyarrow.parquet as pq
from hud_lake import DAY, REPO, T0, History
from test_hud_site import GROUP_JOB, NOW, build, history

from resources.lake import Lake, connect
from resources.storage import Store
from torchci_assets.derived.hud.health import PR_JOBS_SCHEMA, build_commit_health, build_pr_jobs
from torchci_assets.derived.hud.pages import CELL_KINDS
from torchci_assets.derived.site import site
from torchci_assets.derived.site.site import publish_site
from torchci_assets.ingest.ci_results import CI_RESULT_SCHEMA

COUNTS = ("new", "brk", "kfl", "inf", "uns", "can", "pen")


def pr_row(tmp_path, number: int) -> dict[str, str]:
    """The pull request's counts on index.html, by the css class of their column ("jobs" too)."""
    index = (tmp_path / "out" / "hud" / "index.html").read_text()
    row = re.search(rf'<tr><td><a href="pr/{number}.html">#{number}</a>.*?</tr>', index).group(0)
    cells = dict(re.findall(r'<td class="(\w+)">([^<]*)</td>', row))
    return {"jobs": re.findall(r"<td>(\d+)</td>", row)[0], **{k: cells[k] for k in COUNTS if k in cells}}


def page_summary(tmp_path, number: int) -> str:
    page = (tmp_path / "out" / "hud" / "pr" / f"{number}.html").read_text()
    found = re.search(r"<p><b class=.*?</p>", page) or re.search(r"<p>No jobs seen.*?</p>", page)
    return re.sub(r"<[^>]+>", "", found.group(0))


def open_pr(h: History, number: int, head: str, day: str = DAY, at: dt.datetime = T0, **fields) -> None:
    row = dict(repo=REPO, number=number, state="open", head_sha=head, head_ref=f"gh/u/{number}/head",
               base_ref="main", labels=[], merged=None, updated_at=at, received_at=at)
    h.add("pull_request", day, **{**row, **fields})


def published(tmp_path, h: History, **build_args) -> None:
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW, **build_args)
    build_pr_jobs(lake, DAY, REPO, now=NOW, **build_args)
    publish_site(lake, out, DAY, REPO)


def test_digests_of_many_job_rows_fit_in_a_small_memory_limit(tmp_path):
    """Each row is hashed before the pull request's rows are combined: one string of every row,
    sorted in one aggregate, needs memory in proportion to them (512 MB ran out at ~90k rows)."""
    lake = Lake.at(str(tmp_path / "lake"))
    rows = [{"number": n, "head_sha": f"{n:040x}", "pr_state": "open", "labels": ["ciflow/trunk"],
             "pr_updated_at": T0, "as_of": NOW, "source": "github", "workflow": "pull", "state": "success",
             "name": f"linux-jammy-py3.10-gcc11 / test (cfg{j % 40}, {j // 40 + 1}, 20, linux.4xlarge)",
             "job_group": f"pull / linux-jammy-py3.10-gcc11 / test (cfg{j % 40}, linux.4xlarge)",
             "job_id": n * 10000 + j, "run_id": n, "run_attempt": 1, "attempts": 1, "failing_tests": []}
            for n in range(1, 31) for j in range(300)]
    lake.write("pr_jobs", DAY, pa.Table.from_pylist(rows, schema=PR_JOBS_SCHEMA))
    con = connect("20MB")
    con.execute("SET threads = 1")  # memory per thread: the same bound whatever the machine's cores
    try:
        prs, digests, _ = site.load_prs(con, lake, DAY, 7)
    finally:
        con.close()
    assert len(prs) == 30 and len(set(digests.values())) == 30


def test_a_head_without_jobs_is_shown_as_the_latest_head_not_an_older_one(tmp_path):
    """A new head whose CI has not started: the pull request keeps its place on index.html and its
    page shows the new head, not the previous one's failures from an older partition; a pull request
    merged days after its CI ran shows as merged."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = History()
    d1, t1 = "2026-10-04", dt.datetime(2026, 10, 4, 9, tzinfo=dt.timezone.utc)
    old, new = "a" * 40, "c" * 40
    open_pr(h, 7, old, day=d1, at=t1)
    h.job(old, "linux-jammy / build", "failure", run_id=107, branch="gh/u/7/head", created=t1, day=d1)
    open_pr(h, 7, new, at=T0 + dt.timedelta(hours=2))
    open_pr(h, 9, "e" * 40, at=T0 + dt.timedelta(hours=2))  # opened today, no job yet
    t0 = dt.datetime(2026, 10, 2, 9, tzinfo=dt.timezone.utc)
    open_pr(h, 5, "f" * 40, day="2026-10-02", at=t0)
    h.job("f" * 40, "linux-jammy / build", "success", run_id=105, branch="gh/u/5/head", created=t0, day="2026-10-02")
    open_pr(h, 5, "f" * 40, at=T0 + dt.timedelta(hours=3), state="closed", merged=True)
    h.add("push", d1, repo=REPO, ref="refs/heads/main", after="1" * 40, deleted=False, received_at=t1)
    h.write(lake)
    for day in ("2026-10-02", d1, DAY):
        now = min(NOW, dt.datetime.fromisoformat(day).replace(hour=23, tzinfo=dt.timezone.utc))
        build_commit_health(lake, day, REPO, ("refs/heads/main",), min_groups=1, now=now)
        build_pr_jobs(lake, day, REPO, now=now)
    report = publish_site(lake, out, DAY, REPO)
    page = (tmp_path / "out" / "hud" / "pr" / "7.html").read_text()
    assert new in page and old not in page and page_summary(tmp_path, 7) == "No jobs seen for this head yet."
    assert pr_row(tmp_path, 9)["jobs"] == "0" and (tmp_path / "out" / "hud" / "pr" / "9.html").exists()
    assert "closed (merged)" in re.search(r'<tr><td><a href="pr/5.html">.*?</tr>', out.read_bytes(
        "hud/index.html").decode()).group(0)
    assert report.deleted == []


def test_a_cancelled_infra_failure_is_counted_once_as_dr_ci_classifies_it(tmp_path):
    """Dr. CI checks infra before cancelled: a test job cancelled before any test report is INFRA,
    on the list and on the page alike."""
    h = history()
    head = "a" * 40
    h.job(head, "linux-jammy / test (default, 2, 2, linux.4xlarge)", "cancelled", run_id=107,
          branch="gh/u/7/head", test_config="default")
    published(tmp_path, h)
    row = pr_row(tmp_path, 7)
    assert (row["inf"], row["can"], row["new"]) == ("1", "", "1")
    assert "C " not in page_summary(tmp_path, 7) and f"I 1 {CELL_KINDS['infra'][2]}" in page_summary(tmp_path, 7)


def test_an_unstable_pull_request_job_is_shown_unstable_as_on_main(tmp_path):
    """Unstable by its name or by an open UNSTABLE issue: U on the page and counted apart, never as
    a new failure nor broken on main, as Dr. CI's UNSTABLE."""
    h = history()
    h.job("a" * 40, "linux-jammy / test (default, 1, 1, linux.4xlarge, unstable)", "failure", run_id=107,
          branch="gh/u/7/head")
    h.job("b" * 40, "linux-jammy / test (distributed, 1, 1, linux.4xlarge)", "failure", run_id=108,
          branch="gh/u/8/head")
    published(tmp_path, h, unstable_jobs=["pull / linux-jammy / test (distributed)"])
    for number in (7, 8):
        row = pr_row(tmp_path, number)
        assert (row["uns"], row["new"], row["brk"]) == ("1", "1", ""), number  # GROUP_JOB 1 fails on both heads
        assert f"U 1 {CELL_KINDS['unstable'][2]}" in page_summary(tmp_path, number)


def test_a_partition_written_before_cancelled_and_unstable_still_reads(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = history()
    h.job("a" * 40, "linux-jammy / build", "cancelled", run_id=107, branch="gh/u/7/head")
    h.write(lake)
    build(lake)
    [path] = lake.files("pr_jobs", [DAY])
    lake.write("pr_jobs", DAY, pq.read_table(path).drop_columns(["cancelled", "unstable"]))
    publish_site(lake, out, DAY, REPO)
    assert pr_row(tmp_path, 7)["new"] == "2"  # not known to be cancelled: a new failure, as Dr. CI reads it


def test_downstream_results_are_not_counted_as_the_pull_requests_jobs(tmp_path):
    """The list counts the pull request's GitHub jobs, as its page's summary does; the backends'
    results have their own section on the page."""
    h = History()
    head = "a" * 40
    open_pr(h, 7, head)
    h.job(head, GROUP_JOB.format(1), "success", run_id=107, branch="gh/u/7/head")
    lake = Lake.at(str(tmp_path / "lake"))
    rows = []
    for job, kind in (("test-a", "test"), ("test-b", "pending")):
        r = {f.name: None for f in CI_RESULT_SCHEMA}
        r.update(repo="acme/npu", level="L3", event_type="pull_request", head_sha=head, workflow_name="npu",
                 job_name=job, run_id=5, run_attempt=1, status="completed" if kind == "test" else "in_progress",
                 conclusion="failure" if kind == "test" else None, callback_at=T0, failure_kind=kind, received_at=T0)
        rows.append(r)
    lake.write("ci_result", DAY, pa.Table.from_pylist(rows, schema=CI_RESULT_SCHEMA))
    published(tmp_path, h)
    assert pr_row(tmp_path, 7) == {"jobs": "1", **{k: "" for k in COUNTS}}
    assert page_summary(tmp_path, 7) == f"O 1 {CELL_KINDS['success'][2]}"


def test_every_pull_request_dr_ci_commented_on_has_a_page_and_the_cut_list_says_so(tmp_path, monkeypatch):
    """Each Dr. CI comment links to pr/<n>.html: the page is there even when index.html's list, cut
    at MAX_PRS_LISTED, leaves the pull request out; the list says how many it leaves out."""
    monkeypatch.setattr(site, "MAX_PRS_LISTED", 2)
    h = history()  # pull requests 7 and 8, updated at T0
    for n in (9, 10):
        open_pr(h, n, f"{n:040x}", at=T0 - dt.timedelta(hours=n))
        h.job(f"{n:040x}", GROUP_JOB.format(1), "success", run_id=100 + n, branch=f"gh/u/{n}/head")
    lake = Lake.at(str(tmp_path / "lake"))
    lake.write("drci_comments", DAY, pa.Table.from_pylist([{"pr": 9, "body": "## Dr. CI of 9"}]))
    published(tmp_path, h)
    hud = tmp_path / "out" / "hud"
    assert sorted(p.name for p in (hud / "pr").iterdir()) == ["7.html", "8.html", "9.html"]
    assert "Dr. CI of 9" in (hud / "pr" / "9.html").read_text()
    index = (hud / "index.html").read_text()
    assert re.findall(r'href="pr/(\d+).html"', index) == ["8", "7"]
    assert "The 2 most recently updated of the 4 pull requests" in index


def test_a_cancelled_job_is_cancelled_even_while_main_fails_its_group(tmp_path):
    """Without a Dr. CI comment the page judges as Dr. CI does: a cancelled job never ran to a result,
    so main failing the same build when it started says nothing of it; it is to retry (C), not
    "broken on main", which would tell the author it may be merged as it is."""
    h = History()
    for i in (1, 2):
        at = T0 + dt.timedelta(hours=i)
        h.job(h.push(i, at), "linux-jammy / build", "failure", run_id=10 * i, created=at)
    head = "a" * 40
    at = T0 + dt.timedelta(hours=3)
    open_pr(h, 7, head, at=at)
    h.job(head, "linux-jammy / build", "cancelled", run_id=107, branch="gh/u/7/head", created=at)
    lake = Lake.at(str(tmp_path / "lake"))
    published(tmp_path, h)
    [failure_class] = [r["failure_class"] for r in pq.read_table(lake.files("pr_jobs", [DAY])[0]).to_pylist()]
    assert failure_class == "broken_on_main"  # pr_jobs' own judgement, main failing when it started
    row = pr_row(tmp_path, 7)
    assert (row["can"], row["brk"], row["new"]) == ("1", "", "")
    assert page_summary(tmp_path, 7) == f"C 1 {CELL_KINDS['cancelled'][2]}"
