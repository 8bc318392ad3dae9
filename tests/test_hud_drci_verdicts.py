"""A pull request's HUD page and its Dr. CI comment say the same of each failing job of a head.

pr_jobs judges "broken on main" by main's state when the job started; Dr. CI by the same failure at
the merge base or next to it (drci/classify.py). Where the two differ, the page shows the verdict of
the comment it carries. The comments here come from Dr. CI's own code over a hand-made lake, merge
bases from a real HTTP server on 127.0.0.1 playing GitHub's compare API (fake_github_pulls.py).
"""

import datetime as dt
import re

import pytest
from fake_github_pulls import FakePullRequests
from hud_lake import DAY, REPO, T0, History, sha
from test_hud_pr_list import pr_row

from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.drci import classify as c
from torchci_assets.derived.drci.build import build_comments
from torchci_assets.derived.drci.comment import Head, render
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.derived.hud.pages import CELL_KINDS
from torchci_assets.derived.site.site import publish_site

NOW = dt.datetime(2026, 10, 5, 20, 0, tzinfo=dt.timezone.utc)
BUILD = "linux-jammy / build"
HEADS = {7: "a" * 40, 8: "b" * 40}
KIND_OF_CSS = {css: kind for kind, (_, css, _) in CELL_KINDS.items()}
# Dr. CI's classes as the HUD names the same kinds
DRCI_KINDS = {c.NEW: "new", c.BROKEN_TRUNK: "broken_on_main", c.FLAKY: "known_flaky", c.UNSTABLE: "unstable",
              c.INFRA: "infra", c.CANCELLED: "cancelled", c.UNCLASSIFIED: "new"}


@pytest.fixture
def fake(httpserver):
    return FakePullRequests(httpserver, REPO)


def gh(httpserver) -> GitHubResource:
    client = GitHubResource(api_url=httpserver.url_for(""), token="ghp_hudverdicts0000000000000000000000000",
                            backoff_base_s=0.01, search_interval_s=0, write_interval_s=0)
    client._sleep = lambda s: None
    return client


def main_and_two_pull_requests() -> History:
    """Main's build fails at sha(2), then from sha(9) on. Pull request 7 branched at sha(5), green with
    its neighbours, and its build failed after main broke again: main was failing when it started, yet
    the failure is not main's (NEW for Dr. CI). Pull request 8 branched at sha(2), whose build failed,
    and its build failed while main was green again (BROKEN TRUNK for Dr. CI)."""
    h = History()
    for i in range(1, 11):
        at = T0 + dt.timedelta(hours=i)
        h.job(h.push(i, at), BUILD, "failure" if i in (2, 9, 10) else "success", run_id=10 * i, created=at)
    for n, started in ((7, T0 + dt.timedelta(hours=9, minutes=40)), (8, T0 + dt.timedelta(hours=5, minutes=40))):
        head = HEADS[n]
        h.add("pull_request", DAY, repo=REPO, number=n, state="open", head_sha=head, head_ref=f"gh/u/{n}/head",
              base_ref="main", labels=[], merged=None, updated_at=started, received_at=started)
        h.job(head, BUILD, "failure", run_id=100 + n, branch=f"gh/u/{n}/head", created=started, job_id=7000 + n)
    return h


def built(tmp_path, httpserver, fake, h: History) -> tuple[Lake, Store, list[dict]]:
    """`h` in a lake, its pr_jobs, and Dr. CI's rows for it (merge bases: sha(5) for 7, sha(2) for 8)."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    fake.merge_bases.update({HEADS[7]: sha(5), HEADS[8]: sha(2)})
    return lake, out, build_comments(lake, gh(httpserver), DAY, REPO, now=NOW).rows


def page_kinds(tmp_path, number: int) -> dict[int, str]:
    """job id -> the kind pr/<n>.html shows for it, from its jobs table."""
    page = (tmp_path / "out" / "hud" / "pr" / f"{number}.html").read_text()
    table = re.search(r'<table class="list" id="jobs">.*?</table>', page).group(0)
    return {int(job): KIND_OF_CSS[css] for css, job in re.findall(r'<b class="(\w+)">.*?/job/(\d+)"', table)}


def test_the_page_shows_dr_cis_verdict_where_main_was_failing_for_another_reason(tmp_path, httpserver, fake):
    """Main was failing when pull request 7's build ran, but its merge base and neighbours were green:
    Dr. CI says NEW, and so must the page and the list (not "broken on main", which would tell the
    author to rebase for a failure of their own). Pull request 8 is the converse."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    main_and_two_pull_requests().write(lake)
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    build_pr_jobs(lake, DAY, REPO, now=NOW)
    fake.merge_bases.update({HEADS[7]: sha(5), HEADS[8]: sha(2)})
    report = build_comments(lake, gh(httpserver), DAY, REPO, now=NOW)
    said = {n: {v.job.job_id: DRCI_KINDS[v.cls] for v in verdicts} for n, verdicts in report.verdicts.items()}
    assert said == {7: {7007: "new"}, 8: {7008: "broken_on_main"}}
    publish_site(lake, out, DAY, REPO)
    assert {n: page_kinds(tmp_path, n) for n in (7, 8)} == said
    assert (pr_row(tmp_path, 7)["new"], pr_row(tmp_path, 7)["brk"]) == ("1", "")
    assert (pr_row(tmp_path, 8)["new"], pr_row(tmp_path, 8)["brk"]) == ("", "1")


def test_a_comment_about_another_head_leaves_the_pages_own_verdict(tmp_path, httpserver, fake):
    """A comment is about one head: after a new push, the page of the new head does not take the
    verdicts of the old one, even for a job id the comment lists."""
    import pyarrow as pa
    from torchci_assets.derived.drci.build import SCHEMA

    lake, out, rows = built(tmp_path, httpserver, fake, main_and_two_pull_requests())
    lake.write("drci_comments", DAY, pa.Table.from_pylist([{**r, "head_sha": "ee" * 20} for r in rows], schema=SCHEMA))
    publish_site(lake, out, DAY, REPO)
    assert page_kinds(tmp_path, 7) == {7007: "broken_on_main"} and page_kinds(tmp_path, 8) == {7008: "new"}


def test_every_class_dr_ci_gives_a_job_has_a_kind_on_the_page():
    """Each class a failing job can get from Dr. CI names one of the HUD's kinds (runs awaiting
    approval are workflow runs, not jobs of the table)."""
    from torchci_assets.derived.site.drci_verdicts import CLASS_KINDS

    assert set(CLASS_KINDS) == set(c.CLASSES) - {c.AWAITING_APPROVAL}
    assert set(CLASS_KINDS.values()) <= set(CELL_KINDS)


def test_every_job_of_a_long_comment_gets_dr_cis_verdict_on_the_page(tmp_path, httpserver, fake):
    """A head failing in hundreds of jobs gets a body cut to fit GitHub's limit, yet its row keeps
    every job's class: the page agrees with Dr. CI on the jobs the body leaves out too."""
    h = main_and_two_pull_requests()
    started = T0 + dt.timedelta(hours=9, minutes=40)
    for i in range(600):
        h.job(HEADS[7], f"linux / test (default, {i + 1}, 600, linux.4xlarge)", "failure", run_id=107,
              branch="gh/u/7/head", created=started, job_id=8000 + i)
    lake, out, rows = built(tmp_path, httpserver, fake, h)
    row = next(r for r in rows if r["pr"] == 7)
    listed = {int(j) for j in re.findall(r"/job/(\d+)\)", row["body"])}
    assert len(row["jobs"]) == 601 and len(listed) < 601  # the body is cut, the row is not
    publish_site(lake, out, DAY, REPO)
    assert page_kinds(tmp_path, 7) == {j["job_id"]: DRCI_KINDS[j["class"]] for j in row["jobs"]}


def test_a_row_written_before_the_jobs_column_leaves_the_pages_own_verdict(tmp_path, httpserver, fake):
    import pyarrow as pa
    from torchci_assets.derived.drci.build import SCHEMA

    lake, out, rows = built(tmp_path, httpserver, fake, main_and_two_pull_requests())
    older = SCHEMA.remove(SCHEMA.get_field_index("jobs"))
    lake.write("drci_comments", DAY, pa.Table.from_pylist([{k: r[k] for k in older.names} for r in rows], schema=older))
    publish_site(lake, out, DAY, REPO)
    assert page_kinds(tmp_path, 7) == {7007: "broken_on_main"} and page_kinds(tmp_path, 8) == {7008: "new"}


def test_a_failure_dr_ci_read_from_the_rest_api_is_a_failure_on_the_page_too(tmp_path, httpserver, fake):
    """Pull request 7's test job is in progress in the lake, its `completed` webhook lost: Dr. CI reads
    GitHub's REST API for the head stuck that long and learns the job failed. The comment below the
    page's table lists it as a new failure: the table and the index's list must not show it pending."""
    h = main_and_two_pull_requests()
    test = "linux-jammy / test (default, 1, 1, linux.4xlarge)"
    h.job(HEADS[7], test, None, run_id=107, branch="gh/u/7/head", created=T0 + dt.timedelta(hours=1),
          job_id=7100)
    fake.runs[HEADS[7]] = [{"id": 107, "name": "pull", "head_sha": HEADS[7], "status": "completed",
                            "updated_at": "2026-10-05T19:30:00Z"}]  # it completed with its last job
    fake.jobs[107] = [{"id": 7007, "run_id": 107, "workflow_name": "pull", "name": BUILD, "status": "completed",
                       "conclusion": "failure"},
                      {"id": 7100, "run_id": 107, "workflow_name": "pull", "name": test, "status": "completed",
                       "conclusion": "failure", "completed_at": "2026-10-05T19:30:00Z"}]  # its reports may still land
    lake, out, rows = built(tmp_path, httpserver, fake, h)
    row = next(r for r in rows if r["pr"] == 7)
    assert row["refreshed_jobs"] == 1 and "state read from the REST API" in row["body"]
    assert {j["job_id"]: DRCI_KINDS[j["class"]] for j in row["jobs"]} == {7007: "new", 7100: "new"}
    publish_site(lake, out, DAY, REPO)
    assert page_kinds(tmp_path, 7) == {7007: "new", 7100: "new"}
    assert pr_row(tmp_path, 7)["new"] == "2" and pr_row(tmp_path, 7).get("pen", "") == ""


def _two_test_jobs(h: History, conclusion: str | None) -> list[tuple[int, str]]:
    """Pull request 7's two test shards, started at 9:01 and ending at 17:00 (`conclusion`, None: their
    `completed` webhooks lost); a report of the first landed, none of the second."""
    shards = [(7101 + k, f"linux-jammy / test (default, {k + 1}, 2, linux.4xlarge)") for k in range(2)]
    for job_id, name in shards:
        h.job(HEADS[7], name, conclusion, run_id=107, branch="gh/u/7/head", created=T0 + dt.timedelta(hours=1),
              job_id=job_id, minutes=479, test_config="default")
    h.test_job(shards[0][0])
    return shards


def test_a_test_job_read_from_the_rest_api_is_infra_for_missing_reports_as_the_lake_says(tmp_path, httpserver,
                                                                                       fake):
    """Two test jobs ended three hours ago, a report of one of them landed. Read from the REST API (their
    webhooks lost), the one without any report is INFRA (no test results) and the other is the pull
    request's (its failure unclassified), as Dr. CI says of the same jobs once the lake has them completed."""
    read = main_and_two_pull_requests()
    shards = _two_test_jobs(read, None)
    fake.runs[HEADS[7]] = [{"id": 107, "name": "pull", "head_sha": HEADS[7], "status": "completed",
                            "updated_at": "2026-10-05T17:00:00Z"}]
    fake.jobs[107] = [{"id": job_id, "run_id": 107, "workflow_name": "pull", "name": name, "status": "completed",
                       "conclusion": "failure", "completed_at": "2026-10-05T17:00:00Z"} for job_id, name in shards]
    [row] = [r for r in built(tmp_path / "read", httpserver, fake, read)[2] if r["pr"] == 7]
    assert row["refreshed_jobs"] == 2
    heard = main_and_two_pull_requests()
    _two_test_jobs(heard, "failure")
    [again] = [r for r in built(tmp_path / "heard", httpserver, fake, heard)[2] if r["pr"] == 7]
    assert again["refreshed_jobs"] == 0
    expected = {7007: c.NEW, 7101: c.UNCLASSIFIED, 7102: c.INFRA}  # the merge base ran no test job
    assert {j["job_id"]: j["class"] for j in row["jobs"]} == {j["job_id"]: j["class"] for j in again["jobs"]} == expected
