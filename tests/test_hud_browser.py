"""The HUD in a real browser: a simulated archive with planted red and flaky commits goes through
every asset (as `torchci run` does), and headless Chromium opens the published pages from file://.

Chromium is Debian's `chromium` package driven by Playwright (`.ci/run` installs it when missing);
the test is skipped only where no Chromium exists, and fails instead under `.ci/run`. Screenshots
are saved in the test's folder, and into $TORCHCI_SCREENSHOTS when set (`make screenshots`
refreshes the README's).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest
from conftest import skip_without
from hud_lake import REPO, History
from test_hud_site import GROUP_JOB

from resources.configured import ArchiveResource, LakeResource, OutputsResource
from resources.github import GitHubResource
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.hud.health import BLOCKING_WORKFLOWS, build_pr_jobs
from torchci_assets.derived.site.site import publish_site
from torchci_assets.simulate.generate import generate_archive
from torchci_assets.simulate.world import Options

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
try:
    from playwright import sync_api as playwright
except ImportError:
    playwright = None


@pytest.fixture(autouse=True, scope="module")
def _browser_tools():
    if not os.path.exists(CHROMIUM):
        skip_without("no Chromium (apt-get install chromium)")
    if playwright is None:
        skip_without("no Playwright (make install installs it)")

DAYS = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(3)]
# Seed 2 plants, among 36 main commits, red commits carrying a breakage and commits whose only
# failures recovered on rerun (checked below against the ground truth, not assumed). No test is
# planted to fail on one platform, which would make every commit red.
SIM = Options(seed=2, commits_per_day=12, prs_per_day=6, configs=12, test_files=16, tests_per_file=10,
              platform_failures=0)
ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run"]


def _group(name: str) -> str:
    return re.sub(r", \d+, \d+(,|\))", r"\1", name)


def expected_conclusions(truth: dict, archive_end: str) -> dict[str, tuple[str, dict]]:
    """The simulator's own account of each main commit whose jobs all ended inside the archive:
    red if a blocking group failed on every attempt, flaky if every blocking failure recovered."""
    out = {}
    for c in truth["main_commits"]:
        if c["last_completed_at"] >= archive_end:
            continue
        groups: dict[tuple[str, str], list[bool]] = {}
        for j in c["failed_jobs"]:
            if j["workflow"] in BLOCKING_WORKFLOWS:
                g = groups.setdefault((j["workflow"], _group(j["name"])), [])
                for a, concl in enumerate(j["conclusions"]):
                    while len(g) <= a:
                        g.append(False)
                    g[a] = g[a] or concl in ("failure", "cancelled")
        red = [k for k, attempts in groups.items() if all(attempts)]
        out[c["sha"]] = ("red" if red else "flaky" if groups else "green", {"red_groups": red, **c})
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hud")
    archive, lake, outputs = root / "archive", root / "lake", root / "outputs"
    generate_archive(archive, DAYS, SIM, log=lambda _: None)
    from torchci_assets.definitions import DOMAINS

    assets = [a for d in DOMAINS for a in d.defs.assets if isinstance(a, dg.AssetsDefinition)]
    resources = {"archive": ArchiveResource(uri=str(archive)), "lake": LakeResource(uri=str(lake)),
                 "outputs": OutputsResource(uri=str(outputs)),
                 "github": GitHubResource()}  # no credentials: the DISABLED-issue loop is a dry run
    instance = dg.DagsterInstance.ephemeral()
    for day in DAYS:  # day after day, as `torchci run` does
        assert dg.materialize(assets, partition_key=day.isoformat(), resources=resources, instance=instance).success
    truth = json.loads((archive / "ground-truth.json").read_text())
    return {"root": root, "hud": outputs / "hud", "truth": truth, "lake": lake,
            "expected": expected_conclusions(truth, (DAYS[-1] + dt.timedelta(days=1)).isoformat())}


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Page:
    """A page opened from file://, recording console errors and any request that is not file://."""

    def __init__(self, browser, path: Path, width: int = 1500):
        self.errors: list[str] = []
        self.fetched: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": 1000})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.fetched.append(r.url) if not r.url.startswith("file://") else None)
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")

    def screenshot(self, name: str, folder: Path, full_page: bool = False, readme: bool = True) -> Path:
        """Save a PNG in `folder`, and in $TORCHCI_SCREENSHOTS too when set and the README shows it."""
        out = folder / name
        self.page.screenshot(path=str(out), full_page=full_page)
        if readme and os.environ.get("TORCHCI_SCREENSHOTS"):
            target = Path(os.environ["TORCHCI_SCREENSHOTS"])
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(out, target / name)
        return out

    def clean(self) -> None:
        assert self.errors == [] and self.fetched == []


def test_the_simulation_planted_what_the_browser_checks(site):
    kinds = [k for k, _ in site["expected"].values()]
    assert kinds.count("red") >= 3 and kinds.count("flaky") >= 2 and kinds.count("green") >= 3
    assert any(d["broken_tests"] and d["red_groups"] for k, d in site["expected"].values() if k == "red")


def test_grid_rows_cells_and_planted_red_and_flaky_commits(site, browser):
    p = Page(browser, site["hud"] / "index.html")
    rows = p.page.locator("#grid tr[data-sha]")
    assert rows.count() == 36  # every main commit of the three days (fewer than the 50 shown)
    headers = p.page.locator("#grid th.job")
    assert headers.count() >= 20
    assert p.page.locator("#grid tr[data-sha]").first.locator("td").count() == 4 + headers.count()
    shown = {rows.nth(i).get_attribute("data-sha"): rows.nth(i).get_attribute("data-conclusion")
             for i in range(rows.count())}
    # a commit carrying a planted breakage that failed a blocking group on every attempt is red, and
    # its red cell names the broken test; a commit whose only failure recovered on rerun is flaky
    broken = [(s, d) for s, (k, d) in site["expected"].items() if k == "red" and d["broken_tests"]]
    recovered = [s for s, (k, _) in site["expected"].items() if k == "flaky"]
    assert broken and recovered
    for s, d in broken:
        assert shown[s] == "red", s
    for s in recovered:
        assert shown[s] == "flaky", s
    for s, (kind, _) in site["expected"].items():
        assert shown[s] == kind, (s, kind)
    s, d = next((s, d) for s, d in broken if any(t["name"] in p.page.locator(f'tr[data-sha="{s}"]').inner_html()
                                                 for t in d["broken_tests"]))
    red_cells = p.page.locator(f'tr[data-sha="{s}"] td.c.new a, tr[data-sha="{s}"] td.c.brk a')
    titles = [red_cells.nth(i).get_attribute("title") for i in range(red_cells.count())]
    assert any(t["name"] in title for t in d["broken_tests"] for title in titles)
    link = red_cells.first.get_attribute("href")
    assert re.fullmatch(r"https://github\.com/pytorch/pytorch/actions/runs/\d+/job/\d+", link)
    flaky_cells = p.page.locator(f'tr[data-sha="{recovered[0]}"] td.c.fla')
    assert flaky_cells.count() >= 1
    commit_link = rows.first.locator("td").nth(1).locator("a").get_attribute("href")
    assert commit_link == f"https://github.com/pytorch/pytorch/commit/{rows.first.get_attribute('data-sha')}"
    p.screenshot("hud-index.png", site["root"])
    p.clean()


def test_every_plot_has_drawn_data(site, browser):
    p = Page(browser, site["hud"] / "metrics.html", width=1300)
    charts = p.page.locator("svg.chart")
    assert charts.count() == 6
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert int(chart.get_attribute("data-points")) > 0, chart.get_attribute("aria-label")
        box = chart.locator("circle, rect, polygon").first.bounding_box()
        assert box and box["width"] > 0  # rendered, not only present in the markup
    p.screenshot("hud-metrics.png", site["root"])
    p.clean()


def test_pull_request_pages_classify_failures_and_have_a_downstream_section(site, browser):
    pr_pages = sorted((site["hud"] / "pr").glob("*.html"))
    assert len(pr_pages) >= 6
    index = Page(browser, site["hud"] / "index.html")
    first = index.page.locator("#prs ~ table a").first
    first.click()
    index.page.wait_for_load_state("load")
    assert re.search(r"/pr/\d+\.html$", index.page.url)
    index.clean()
    failing = next(p for p in pr_pages if "failure (new)" in p.read_text() or "known flaky" in p.read_text())
    p = Page(browser, failing)
    assert p.page.locator("#jobs tr").count() > 5
    assert p.page.locator("#downstream").count() == 1
    p.page.locator("nav a", has_text="HUD").click()
    p.page.wait_for_load_state("load")
    assert p.page.url.endswith("/hud/index.html")
    p.clean()


def test_tests_page_filters_and_backends_page(site, browser):
    p = Page(browser, site["hud"] / "tests.html")
    total = p.page.locator("#tests tr[data-verdict]").count()
    assert total > 0
    p.page.select_option("#verdict", "broken")
    visible = p.page.locator("#tests tr[data-verdict]:not([hidden])")
    assert 0 < visible.count() < total
    assert {visible.nth(i).get_attribute("data-verdict") for i in range(visible.count())} == {"broken"}
    p.page.select_option("#verdict", "")
    p.page.fill("#q", "no-such-test-anywhere")
    assert p.page.locator("#tests tr[data-verdict]:not([hidden])").count() == 0
    p.screenshot("hud-tests.png", site["root"], readme=False)
    p.clean()
    b = Page(browser, site["hud"] / "backends.html")
    cards = b.page.locator(".card")
    assert cards.count() == 4
    assert cards.first.locator("tr").count() == 10  # header + the 9 criteria of backend-levels.json
    # every criterion's "met" column within its card, and the page no wider than the window
    widths = b.page.evaluate("[...document.querySelectorAll('.card')].map(c => "
                             "[c.clientWidth, c.querySelector('table').getBoundingClientRect().width])")
    assert all(table <= card for card, table in widths), widths
    assert b.page.evaluate("document.documentElement.scrollWidth") <= 1500
    for i in range(b.page.locator("svg.chart").count()):
        assert int(b.page.locator("svg.chart").nth(i).get_attribute("data-points")) > 0
    b.clean()


def test_pages_are_small_and_self_contained(site):
    for page in site["hud"].rglob("*.html"):
        text = page.read_text()
        assert page.stat().st_size < 2 * 1024 * 1024
        assert not re.search(r"""(src|href)=["']?(https?:)?//(?!github\.com/)""", text), page
        assert "<link" not in text and "<script src" not in text


AGE_DAY = "2026-08-26"
AGE_SEEN = dt.datetime(2026, 8, 26, 9, tzinfo=dt.timezone.utc)


def test_a_page_seen_40_days_ago_says_so_in_the_browser(tmp_path, browser):
    """A pull request's page kept while the pull request sleeps says how old what it shows is, by
    the browser's clock (set here)."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    h = History()
    head = "a" * 40
    h.add("pull_request", AGE_DAY, repo=REPO, number=70, state="open", head_sha=head, head_ref="gh/u/70/head",
          base_ref="main", labels=[], merged=None, updated_at=AGE_SEEN, received_at=AGE_SEEN)
    h.job(head, GROUP_JOB.format(1), "failure", run_id=170, branch="gh/u/70/head", created=AGE_SEEN, day=AGE_DAY)
    h.write(lake)
    build_pr_jobs(lake, AGE_DAY, REPO, now=AGE_SEEN + dt.timedelta(hours=12))
    publish_site(lake, out, AGE_DAY, REPO)
    page_file = tmp_path / "out" / "hud" / "pr" / "70.html"
    page = browser.new_page()
    try:
        for now, said in ((AGE_SEEN + dt.timedelta(days=40, hours=3), " (40 days ago)"),
                          (AGE_SEEN + dt.timedelta(days=1, hours=1), " (1 day ago)"), (AGE_SEEN + dt.timedelta(hours=5), "")):
            page.clock.set_fixed_time(now)
            page.goto(page_file.as_uri())
            assert page.inner_text("#age") == said
            assert page.inner_text("#last-seen").startswith(f"Last change seen 2026-08-26 09:31 UTC{said}:")
    finally:
        page.close()
