"""The static site: what it publishes, where, in which order, on a folder and on S3; a quiet day;
the assets end to end on a hand-made lake."""

import datetime as dt
import json
import re

import dagster as dg
import pyarrow as pa
import pytest
from hud_lake import DAY, REPO, T0, History, schema

from resources.configured import LakeResource, OutputsResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.hud.assets import HUD_ASSETS
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.derived.hud.metrics import build_ci_metrics
from torchci_assets.derived.hud.pages import CELL_KINDS
from torchci_assets.derived.site.assets import SITE_ASSETS
from torchci_assets.derived.site.site import SiteSettings, publish_site

NOW = dt.datetime(2026, 10, 5, 20, 0, tzinfo=dt.timezone.utc)
GROUP_JOB = "linux-jammy / test (default, {}, 2, linux.4xlarge)"


def history() -> History:
    h = History()
    for i in range(1, 4):
        c = h.push(i, T0 + dt.timedelta(hours=i))
        h.job(c, GROUP_JOB.format(1), "success", run_id=10 * i, created=T0 + dt.timedelta(hours=i))
        h.job(c, GROUP_JOB.format(2), "failure" if i == 2 else "success", run_id=10 * i,
              created=T0 + dt.timedelta(hours=i))
    for n, head in ((7, "a" * 40), (8, "b" * 40)):
        h.add("pull_request", DAY, repo=REPO, number=n, state="open", head_sha=head, head_ref=f"gh/u/{n}/head",
              base_ref="main", labels=[], merged=None, updated_at=T0, received_at=T0)
        h.job(head, GROUP_JOB.format(1), "failure", run_id=100 + n, branch=f"gh/u/{n}/head")
    return h


def build(lake: Lake, now: dt.datetime = NOW) -> None:
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=now)
    build_pr_jobs(lake, DAY, REPO, now=now)
    build_ci_metrics(lake, DAY, REPO, ("refs/heads/main",))


def test_publishes_every_page_with_relative_links_only(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    report = publish_site(lake, out, DAY, REPO)
    assert report.published and report.commits == 3 and report.job_groups == 1 and report.pull_requests == 2
    names = sorted(report.pages)
    assert names == ["hud/autorevert.html", "hud/backends.html", "hud/index.html", "hud/metrics.html", "hud/pr/7.html", "hud/pr/8.html",
                     "hud/tests.html"]
    index = (tmp_path / "out" / "hud" / "index.html").read_text()
    assert index.count("<tr data-sha=") == 3 and 'data-conclusion="red"' in index
    assert index.count(f">{CELL_KINDS['new'][0]}</a>") == 1 and index.count(f">{CELL_KINDS['success'][0]}</a>") == 2
    # links inside the site are relative (file:// and S3 websites), external ones go to GitHub only
    for path in names:
        html = (tmp_path / "out" / path).read_text()
        for href in re.findall(r'href="([^"]+)"', html):
            assert href.startswith("https://github.com/") or not re.match(r"^[a-z]+:|^/", href), (path, href)
    assert 'href="../index.html"' in (tmp_path / "out" / "hud" / "pr" / "7.html").read_text()
    assert json.loads(out.read_bytes("hud/site.json"))["day"] == DAY


def test_an_older_day_does_not_replace_a_newer_site_and_stale_pr_pages_go(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    out.write_bytes("hud/pr/1234.html", b"an old pull request's page")
    report = publish_site(lake, out, DAY, REPO)
    assert report.deleted == ["hud/pr/1234.html"] and not out.exists("hud/pr/1234.html")
    assert not publish_site(lake, out, "2026-10-01", REPO).published  # a backfill of an older day
    assert json.loads(out.read_bytes("hud/site.json"))["day"] == DAY


def test_a_sleeping_pull_requests_page_stays_while_its_dr_ci_comment_may_link_to_it(tmp_path):
    """A pull request with no webhook for a week leaves the site's list, but its Dr. CI comment on
    GitHub still links to its page: a closed one's page stays PR_PAGE_KEEP_DAYS after it was last
    rendered, an open one's for as long as it is open. A page published before the site recorded
    states is judged by the state it shows."""
    from torchci_assets.derived.site.site import PR_PAGE_KEEP_DAYS
    from torchci_assets.partitions import days_around

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = history()
    h.add("pull_request", DAY, repo=REPO, number=8, state="closed", head_sha="b" * 40, head_ref="gh/u/8/head",
          base_ref="main", labels=[], merged=True, updated_at=T0 + dt.timedelta(hours=1),
          received_at=T0 + dt.timedelta(hours=1))
    h.write(lake)
    build(lake)
    assert publish_site(lake, out, DAY, REPO).published and out.exists("hud/pr/8.html")
    page = out.read_bytes("hud/pr/8.html")
    later = days_around(DAY, 0, 10)[-1]
    assert publish_site(lake, out, later, REPO).deleted == [] and out.read_bytes("hud/pr/8.html") == page
    meta = json.loads(out.read_bytes("hud/site.json"))
    assert meta["rendered"]["hud/pr/8.html"] == DAY
    assert meta["states"] == {"hud/pr/7.html": "open", "hud/pr/8.html": "closed"}
    out.write_bytes("hud/site.json", json.dumps({**meta, "rendered": {"hud/pr/8.html": 5}}).encode())  # not a day
    assert publish_site(lake, out, later, REPO).deleted == [] and out.exists("hud/pr/8.html")
    gone = days_around(DAY, 0, PR_PAGE_KEEP_DAYS + 1)[-1]
    for recorded in (meta, {k: v for k, v in meta.items() if k != "states"}):
        out.write_bytes("hud/site.json", json.dumps(recorded).encode())
        assert publish_site(lake, out, gone, REPO).deleted == ["hud/pr/8.html"] and out.exists("hud/pr/7.html")
        out.write_bytes("hud/pr/8.html", page)


def test_an_open_pull_request_asleep_for_40_days_keeps_its_page_a_merged_one_loses_it(tmp_path, monkeypatch):
    """Its Dr. CI comment on GitHub links to pr/<n>.html for as long as the pull request is open: a
    pull request last seen 40 days ago, still open, keeps its page as last seen, saying when that
    was; one merged then loses its page, PR_PAGE_KEEP_DAYS after it was last shown. The site knows
    which without reading the 40 days: it reads pr_jobs over its usual window only."""
    from torchci_assets.partitions import days_around, days_ending

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = history()
    then = days_around(DAY, 40)[0]
    seen = dt.datetime.fromisoformat(then).replace(hour=9, tzinfo=dt.timezone.utc)
    for n, state, merged in ((70, "open", None), (80, "closed", True)):
        head = f"{n:02x}" * 20
        h.add("pull_request", then, repo=REPO, number=n, state=state, head_sha=head, head_ref=f"gh/u/{n}/head",
              base_ref="main", labels=[], merged=merged, updated_at=seen, received_at=seen)
        h.job(head, GROUP_JOB.format(1), "failure", run_id=100 + n, branch=f"gh/u/{n}/head", created=seen, day=then)
    h.write(lake)
    build_pr_jobs(lake, then, REPO, now=seen + dt.timedelta(hours=12))
    assert publish_site(lake, out, then, REPO).published
    page = out.read_bytes("hud/pr/70.html")
    assert f'<time datetime="{then}T09:31:00Z">{then} 09:31 UTC</time>' in page.decode()  # its job's end
    build(lake)
    read = []
    real = Lake.register
    monkeypatch.setattr(Lake, "register", lambda self, con, table, days, **kw: (
        read.append((table, list(days))), real(self, con, table, days, **kw))[1])
    report = publish_site(lake, out, DAY, REPO)
    assert out.read_bytes("hud/pr/70.html") == page and "hud/pr/70.html" not in report.deleted
    assert report.deleted == ["hud/pr/80.html"] and not out.exists("hud/pr/80.html")
    assert {d for table, days in read if table == "pr_jobs" for d in days} == set(days_ending(DAY, 7))
    # the next publish still knows it is open, and so on for as long as it stays open
    assert publish_site(lake, out, days_around(DAY, 0, 100)[-1], REPO).deleted == []
    assert out.read_bytes("hud/pr/70.html") == page


def test_index_is_written_after_the_pages_it_links_to(tmp_path, monkeypatch):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    order = []
    real = Store.write_bytes
    monkeypatch.setattr(Store, "write_bytes", lambda self, rel, data: (order.append(rel), real(self, rel, data)))
    publish_site(lake, out, DAY, REPO)
    assert order.index("hud/index.html") > max(order.index(p) for p in order if p.startswith("hud/pr/"))
    assert order[-1] == "hud/site.json"


def test_a_quiet_day_publishes_a_site_that_says_so(tmp_path):
    """Webhooks only (no pushes, no tests): every HUD asset succeeds and the pages say there is nothing."""
    lake = Lake.at(str(tmp_path / "lake"))
    for table in ("workflow_job", "workflow_run", "push", "pull_request"):
        lake.write(table, DAY, pa.Table.from_pylist([], schema=schema(table)))
    result = dg.materialize(HUD_ASSETS + SITE_ASSETS, partition_key=DAY, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out"))})
    assert result.success
    index = (tmp_path / "out" / "hud" / "index.html").read_text()
    assert "No main commits in the window yet." in index and "No pull request activity" in index
    assert "No flaky, broken or disabled tests." in (tmp_path / "out" / "hud" / "tests.html").read_text()


def test_assets_emit_numeric_metadata_and_the_size_check(tmp_path):
    h = history()
    h.write(Lake.at(str(tmp_path / "lake")))
    result = dg.materialize(HUD_ASSETS + SITE_ASSETS, partition_key=DAY, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out"))},
        run_config={"ops": {"commit_health": {"config": {"min_job_groups": 1}}}})
    assert result.success
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["commit_health"]["commits"].value == 3
    assert meta["commit_health"]["commits_red"].value == 1 and meta["commit_health"]["commits_green"].value == 2
    # Dagster plots numeric metadata over partitions: the headline figures must be numbers
    assert isinstance(meta["ci_metrics_daily"]["main_commits"], dg.IntMetadataValue)
    assert isinstance(meta["ci_metrics_daily"]["queue_p90_s"], dg.FloatMetadataValue)
    assert isinstance(meta["ci_metrics_daily"]["queue_p90_s_linux"], dg.FloatMetadataValue)
    assert meta["hud_site"]["pages"].value == 7
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["pages_under_2mb"] and checks["unique_sha_job_group"]


def test_the_grid_shows_the_configured_number_of_commits(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    publish_site(lake, out, DAY, REPO, SiteSettings(commits=2))
    index = (tmp_path / "out" / "hud" / "index.html").read_text()
    assert re.findall(r'data-sha="([0-9a-f]+)"', index) == [f"{3:040x}", f"{2:040x}"]  # newest first


@pytest.mark.usefixtures("s3_server")
def test_publishes_to_s3(tmp_path):
    from conftest import S3_BUCKET

    lake = Lake.at(str(tmp_path / "lake"))
    history().write(lake)
    build(lake)
    out = Store(f"s3://{S3_BUCKET}/hud-site-test")
    out.write_bytes("hud/pr/99.html", b"stale")
    report = publish_site(lake, out, DAY, REPO)
    assert report.published and report.deleted == ["hud/pr/99.html"]
    listed = sorted(e.path for e in out.list_files("hud", (".html", ".json")))
    assert listed == ["hud/autorevert.html", "hud/backends.html", "hud/index.html", "hud/metrics.html",
                      "hud/pr/7.html", "hud/pr/8.html", "hud/site.json", "hud/tests.html"]
    assert out.read_bytes("hud/index.html").startswith(b"<!doctype html>")


def test_test_time_regressions_are_shown_once_the_table_exists(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    publish_site(lake, out, DAY, REPO)
    assert 'id="slower"' not in (tmp_path / "out" / "hud" / "tests.html").read_text()
    lake.write("test_time_regressions", DAY, pa.Table.from_pylist([
        {"build_env": "linux-jammy", "test_config": "default", "file": "test_nn.py", "before_s": 300.0,
         "after_s": 900.0, "first_slow_sha": "c" * 40}], schema=schema("test_time_regressions")))
    publish_site(lake, out, DAY, REPO)
    html = (tmp_path / "out" / "hud" / "tests.html").read_text()
    assert 'id="slower"' in html and "test_nn.py" in html and "15m" in html and "cccccccccc" in html


def test_older_commits_come_from_the_newest_partition_that_has_them_even_across_a_gap(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = History()
    early = dt.datetime(2026, 10, 1, 12, tzinfo=dt.timezone.utc)
    c = h.push(9, early)
    h.job(c, GROUP_JOB.format(1), "success", run_id=90, created=early, day="2026-10-01")
    h.write(lake)
    build_commit_health(lake, "2026-10-01", REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    # 10-02 and 10-03 were never materialized (their final word on this commit is missing)
    lake.write("push", DAY, pa.Table.from_pylist([], schema=schema("push")))
    build_commit_health(lake, DAY, REPO, ("refs/heads/main",), min_groups=1, now=NOW)
    publish_site(lake, out, DAY, REPO)
    index = (tmp_path / "out" / "hud" / "index.html").read_text()
    assert re.findall(r'data-sha="([0-9a-f]+)"', index) == [c] and 'data-conclusion="green"' in index


def _strip_generated(html: bytes) -> bytes:
    return re.sub(rb"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", b"generated -", html)


def _published(tmp_path) -> tuple[Lake, Store, History]:
    """The lake of `history()` with its HUD tables built, and the site published from it."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = history()
    h.write(lake)
    build(lake)
    publish_site(lake, out, DAY, REPO)
    return lake, out, h


def test_a_republish_rewrites_only_the_pages_whose_content_changed(tmp_path, monkeypatch):
    """A refresh republishes every few minutes: an unchanged page keeps its file (and its time),
    a page reached by new results is rewritten, and the site equals one published from scratch."""
    lake, out, h = _published(tmp_path)
    written = []
    real = Store.write_bytes
    monkeypatch.setattr(Store, "write_bytes", lambda self, rel, data: (written.append(rel), real(self, rel, data)))
    report = publish_site(lake, out, DAY, REPO)
    assert written == ["hud/site.json"] and len(report.unchanged) == 7
    # a new failing job on pull request 8's head: its page changes, pull request 7's does not
    h.job("b" * 40, GROUP_JOB.format(2), "failure", run_id=108, branch="gh/u/8/head")
    h.write(lake)
    build(lake)
    written.clear()
    report = publish_site(lake, out, DAY, REPO)
    assert "hud/pr/8.html" in written and "hud/pr/7.html" not in written and "hud/tests.html" not in written
    assert written[-1] == "hud/site.json" and "hud/pr/7.html" in report.unchanged
    fresh = Store(str(tmp_path / "fresh"))
    publish_site(lake, fresh, DAY, REPO)
    for path in report.pages:
        assert _strip_generated(out.read_bytes(path)) == _strip_generated(fresh.read_bytes(path)), path


def test_a_page_removed_by_hand_is_written_again(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    history().write(lake)
    build(lake)
    publish_site(lake, out, DAY, REPO)
    out.delete("hud/pr/7.html")
    report = publish_site(lake, out, DAY, REPO)
    assert out.exists("hud/pr/7.html") and "hud/pr/7.html" not in report.unchanged


def test_a_refresh_renders_only_the_pull_request_pages_whose_inputs_changed(tmp_path, monkeypatch):
    """In a refresh, a pull request's page whose rows, Dr. CI body and downstream jobs are those it
    was published from is neither read nor rendered; the site still equals one built from scratch."""
    from torchci_assets.derived.hud import pages as pages_module

    lake, out, h = _published(tmp_path)
    rendered = []
    real = pages_module.pr_page
    monkeypatch.setattr(pages_module, "pr_page", lambda pr, *a, **k: (rendered.append(pr["number"]), real(pr, *a, **k))[1])
    report = publish_site(lake, out, DAY, REPO, reuse=True)
    assert rendered == [] and sorted(report.reused) == ["hud/pr/7.html", "hud/pr/8.html"]
    build(lake, NOW + dt.timedelta(minutes=1))  # a refresh a minute later, nothing new: only the partitions' instant moved
    report = publish_site(lake, out, DAY, REPO, reuse=True)
    assert rendered == [] and sorted(report.reused) == ["hud/pr/7.html", "hud/pr/8.html"]
    h.job("b" * 40, GROUP_JOB.format(2), "failure", run_id=108, branch="gh/u/8/head")
    h.write(lake)
    build(lake, NOW + dt.timedelta(minutes=2))
    report = publish_site(lake, out, DAY, REPO, reuse=True)
    assert rendered == [8] and report.reused == ["hud/pr/7.html"]
    # a new Dr. CI body for 7 renders its page; a page removed by hand is rendered again
    lake.write("drci_comments", DAY, pa.Table.from_pylist([{"pr": 7, "body": "## Dr. CI\n1 new failure"}]))
    out.delete("hud/pr/8.html")
    rendered.clear()
    report = publish_site(lake, out, DAY, REPO, reuse=True)
    assert sorted(rendered) == [7, 8] and report.reused == []
    assert "1 new failure" in out.read_bytes("hud/pr/7.html").decode()
    fresh = Store(str(tmp_path / "fresh"))
    publish_site(lake, fresh, DAY, REPO)
    for path in report.pages:
        assert _strip_generated(out.read_bytes(path)) == _strip_generated(fresh.read_bytes(path)), path
    assert sorted(json.loads(out.read_bytes("hud/site.json"))["pages"]) == sorted(report.pages)


def test_a_publish_killed_while_writing_leaves_no_page_vouched_for(tmp_path, monkeypatch):
    """The pages a run rewrites lose their recorded digest and inputs first: a run killed midway
    leaves no record that would let the next run keep a half-updated page as it is."""
    lake, out, h = _published(tmp_path)
    h.job("b" * 40, GROUP_JOB.format(2), "failure", run_id=108, branch="gh/u/8/head")
    h.write(lake)
    build(lake)
    real = Store.write_bytes

    def killed(self, rel, data):
        if rel == "hud/pr/8.html":
            raise KeyboardInterrupt("killed")
        return real(self, rel, data)
    monkeypatch.setattr(Store, "write_bytes", killed)
    with pytest.raises(KeyboardInterrupt):
        publish_site(lake, out, DAY, REPO, reuse=True)
    meta = json.loads(out.read_bytes("hud/site.json"))
    assert meta["day"] == DAY and "hud/pr/8.html" not in meta["digests"] and "hud/pr/8.html" not in meta["inputs"]
    assert "hud/pr/7.html" in meta["inputs"]
    monkeypatch.setattr(Store, "write_bytes", real)
    report = publish_site(lake, out, DAY, REPO, reuse=True)
    assert "hud/pr/8.html" not in report.reused and "hud/pr/7.html" in report.reused


def test_the_tests_page_names_jobs_of_no_known_platform_unknown(tmp_path):
    """A verdict written before such jobs were named "unknown" lists them as null."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = history()
    h.add("flaky_tests", DAY, file="test_nn.py", classname="TestNN", name="test_broken", verdict="broken",
          platforms=["linux", None], broken_failures=3, broken_ranges=1)
    h.add("flaky_tests", DAY, file="test_nn.py", classname="TestNN", name="test_flaky", verdict="flaky",
          platforms=["linux", None], flaky_platforms=[None], flake_events=4, runs=40)
    h.write(lake)
    build(lake)
    publish_site(lake, out, DAY, REPO)
    page = (tmp_path / "out" / "hud" / "tests.html").read_text()
    rows = dict(re.findall(r"<tr data-verdict=[^>]*>.*?TestNN\.(test_\w+)(.*?)</tr>", page))
    assert "<td>linux, unknown</td>" in rows["test_broken"] and "<td>unknown</td>" in rows["test_flaky"]


def test_a_cancelled_pull_request_job_is_shown_apart_not_as_a_new_failure(tmp_path):
    """As Dr. CI lists it (to retry): the pull request list counts it under cancelled, its page marks
    it C; the same list still counts a real failure as new."""
    h = history()
    head = "a" * 40
    h.job(head, "linux-jammy / build", "cancelled", run_id=107, branch="gh/u/7/head")
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h.write(lake)
    build(lake)
    publish_site(lake, out, DAY, REPO)
    index = (tmp_path / "out" / "hud" / "index.html").read_text()
    row = re.search(r'<tr><td><a href="pr/7.html">#7</a>.*?</tr>', index).group(0)
    cells = re.findall(r'<td class="(new|brk|kfl|inf|can|pen)">([^<]*)</td>', row)
    assert dict(cells) == {"new": "1", "brk": "", "kfl": "", "inf": "", "can": "1", "pen": ""}
    page = (tmp_path / "out" / "hud" / "pr" / "7.html").read_text()
    assert f'<b class="can">{CELL_KINDS["cancelled"][0]}</b> 1 {CELL_KINDS["cancelled"][2]}' in page
