"""The static HUD under `hud/` in the outputs: read bounded windows of the HUD tables, render, publish.

What each page reads (never raw job or test rows):
  index.html      `commit_health`: the newest state of the last `commits` main commits, each from
                  the newest partition that has it (a partition holds LOOKBACK_DAYS+1 days of
                  pushes; the one LOOKBACK_DAYS after a push has that commit's final state);
                  `pr_jobs` likewise for the pull requests listed under the grid (the
                  MAX_PRS_LISTED most recently updated, the list says when it is cut);
  pr/<n>.html     `pr_jobs`: those pull requests and every one with a Dr. CI comment of the day
                  (the comment links to its page), each from the newest partition of the last
                  `pr_days` days that has it;
  metrics.html    `ci_metrics_daily` of the last `metrics_days` days;
  tests.html      `flaky_tests` and `disabled_tests` of the day, and `test_time_regressions` once the
                  sharding domain writes it;
  backends.html   `backend-levels.json` (published next to the site) and the `backend` rows of
                  `ci_metrics_daily`.

Publishing. Each file is written whole under a temporary name and renamed (one PUT on S3), the
pages index.html links to first and index.html last, then the pages of pull requests and backends
no longer rendered are deleted: a reader never sees a half-written page nor a link to a page not yet
there, and a backend's page does not outlive its results. An open pull request's page is not
deleted (its Dr. CI comment links to it): `hud/site.json` records each page's state, so knowing it
costs no read of the lake beyond the usual windows.
A page whose content is what was published last (`hud/site.json` keeps each page's digest, the
"generated" time left out) is not rewritten: a refresh every few minutes rewrites only the pages
its new results reach, and a page's "generated" time is when its content last changed.
`hud/site.json` records the day the site shows; an older partition (a backfill) does not
replace a newer site.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from resources.lake import Lake, connect
from resources.sql import SqlFiles, compose, execute, run_steps
from resources.storage import Store
from torchci_assets.config import PYTORCH_HUD, HudConfig
from torchci_assets.derived.drci import page as drci_page
from torchci_assets.derived.drci.build import load_comments
from torchci_assets.derived.drci.page import with_drci_section
from torchci_assets.derived.guardians import hud as guardians_hud
from torchci_assets.derived.hud import backend_pages, pages
from torchci_assets.derived.hud.health import LOOKBACK_DAYS, as_of_instant
from torchci_assets.derived.hud.inputs import register
from torchci_assets.derived.hud.svg import Series, duration, line_chart
from torchci_assets.derived.site import awaiting_reports, drci_verdicts
from torchci_assets.derived.site.lists_not_read import ListsNotRead, with_banner
from torchci_assets.partitions import days_around, days_ending

SITE_DIR = "hud"
SITE_META = f"{SITE_DIR}/site.json"
LEVELS_FILE = "backend-levels.json"
MAX_PAGE_BYTES = 2 * 1024 * 1024
MAX_TESTS_LISTED = 3000
MAX_PRS_LISTED = 300  # on index.html; every pull request with a Dr. CI comment has a page all the same
PR_PAGES_PER_READ = 100
# the folders of pages that come and go with their subject (a pull request, a backend): a page there
# that a publish no longer renders is deleted; a pull request's only once it is closed and
# PR_PAGE_KEEP_DAYS after it was last rendered: its Dr. CI comment links to it, and an open pull request
# may sleep for months and wake up
PAGE_FOLDERS = ("pr", "backends")
PR_PAGE_KEEP_DAYS = 30
# The grid's days of commit_health, ending at its own: a partition holds LOOKBACK_DAYS+1 days of pushes.
GRID_DAYS = max(1, 14 - LOOKBACK_DAYS)
WORKFLOW_ORDER = ("Lint", "pull", "trunk", "linux-aarch64", "docs-build")
SQL = SqlFiles(__file__)
# the code that renders a pull request's page (its jobs' kinds included): a new version renders every page again
_RENDERING = hashlib.sha256(b"".join([*(Path(m.__file__).read_bytes()
                                        for m in (pages, backend_pages, drci_page, drci_verdicts)),
                                      SQL["pr_rows"].encode()])).hexdigest()


@dataclass
class SiteSettings:
    commits: int = 50
    metrics_days: int = 90
    pr_days: int = 7
    branch: str = "main"  # the main branch's name, as the pages call it
    hud: HudConfig = PYTORCH_HUD  # which workflows decide a commit's conclusion (the pages say which)


@dataclass
class SiteReport:
    day: str
    published: bool
    pages: dict[str, int] = field(default_factory=dict)  # path -> bytes
    commits: int = 0
    job_groups: int = 0
    pull_requests: int = 0
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # pages whose content was already published
    inputs: dict[str, str] = field(default_factory=dict)  # pull request page -> digest of what it shows
    reused: list[str] = field(default_factory=list)  # pull request pages not rendered: inputs unchanged
    states: dict[str, str] = field(default_factory=dict)  # pull request page -> its state (open, closed)

    @property
    def largest(self) -> tuple[str, int]:
        return max(self.pages.items(), key=lambda kv: kv[1], default=("", 0))


def named_test(classname: str | None, name: str) -> str:
    """`Class.test`, or the test alone outside a class (a pytest module-level function), as
    commit_health and Dr. CI name tests: never `.test`."""
    return f"{classname}.{name}" if classname else name


def _rows(con, sql: str, values: dict | None = None) -> list[dict]:
    cur = execute(con, sql, values)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _newest(con, lake: Lake, table: str, days: list[str], key: str, order: str, limit: int,
            also: list = ()) -> bool:
    """Temp table `newest_<table>`: the rows of the `limit` keys latest by `order` and of the keys in
    `also`, each from the newest partition of `days` that holds it (its latest word; a day whose
    partition is missing is skipped).

    Two passes: the keys, their newest partition and `order` first (three columns), then the rows of
    the chosen keys only, so the window's older partitions cost little."""
    if not lake.register(con, table, days, name=f"w_{table}"):
        return False
    names = {"source": f"w_{table}", "keys": f"keys_{table}", "newest": f"newest_{table}", "key": key}
    execute(con, compose(SQL["newest_keys"], order=order, **names), {"limit": int(limit), "also": list(also)})
    execute(con, compose(SQL["newest_rows"], **names))
    return True


def _group_order(groups: list[tuple[str, str, bool]]) -> list[tuple[str, bool]]:
    def rank(g):
        wf, name, blocking = g
        return (not blocking, WORKFLOW_ORDER.index(wf) if wf in WORKFLOW_ORDER else len(WORKFLOW_ORDER), wf, name)
    return [(name, blocking) for _, name, blocking in sorted(groups, key=rank)]


def load_grid(con, lake: Lake, day: str, commits: int) -> tuple[list[dict], list[tuple[str, bool]], dict]:
    days = days_ending(day, GRID_DAYS)
    if not _newest(con, lake, "commit_health", days, "sha", "pushed_at", commits):
        return [], [], {}
    heads = _rows(con, SQL["grid_commits"], {"commits": int(commits)})
    rows = _rows(con, SQL["grid_cells"], {"shas": [h["sha"] for h in heads]})
    groups = {(r["workflow"], r["job_group"], bool(r["blocking"])) for r in rows}
    return heads, _group_order(list(groups)), {(r["sha"], r["job_group"]): r for r in rows}


def load_prs(con, lake: Lake, day: str, pr_days: int, also: list[int] = (),
             comments: dict[int, dict] | None = None) -> tuple[list[dict], dict[int, str], int]:
    """(one summary per pull request, newest first: the MAX_PRS_LISTED latest and those of `also`,
    the pull requests Dr. CI commented on, which link to their page; a digest of its job rows by
    number; how many pull requests the window has). `comments` (`load_comments`): the jobs they list
    are of the class they say (pr_rows.sql)."""
    if not _newest(con, lake, "pr_jobs", days_ending(day, pr_days), "number", "pr_updated_at", MAX_PRS_LISTED,
                   list(also)):
        return [], {}, 0
    con.register("drci_kinds", drci_verdicts.kinds_table(comments or {}))
    run_steps(con, SQL.steps("pr_rows"))
    prs = _rows(con, SQL["pr_summaries"])
    digests = {r["number"]: r["digest"] for r in _rows(con, SQL["pr_digests"], {"numbers": [p["number"] for p in prs]})}
    return prs, digests, _rows(con, SQL["pr_count"])[0]["active"]


def load_pr_jobs(con, numbers: list[int]) -> dict[int, list[dict]]:
    """The job rows of these pull requests (of `load_prs`' window), by number."""
    jobs: dict[int, list[dict]] = {}
    if numbers:
        for r in _rows(con, SQL["pr_job_rows"], {"numbers": numbers}):
            jobs.setdefault(r["number"], []).append(r)
    return jobs


def pr_page_inputs(pr: dict, rows_digest: str | None, drci_body: str | None, backend_jobs: list[dict],
                   repo: str, branch: str = "main") -> str:
    """A digest of everything pr/<n>.html shows, and of the code that renders it."""
    text = json.dumps([_RENDERING, repo, branch, pr, rows_digest, drci_body, backend_jobs], default=str,
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def load_metrics(con, lake: Lake, day: str, metrics_days: int) -> tuple[list[str], list[dict]]:
    days = days_ending(day, metrics_days)
    if not lake.register(con, "ci_metrics_daily", days, name="m"):
        return days, []
    rows = _rows(con, "SELECT *, strftime(day, '%Y-%m-%d') AS d FROM m ORDER BY day")
    # the x axis starts at the first day with metrics (a young lake has less than the window)
    first = rows[0]["d"] if rows else day
    return [d for d in days if d >= first], rows


def load_tests(con, lake: Lake, day: str, branch: str = "main") -> list[dict]:
    """tests.html's rows; `branch`: the main branch, whose flips a flaky test's evidence counts."""
    out = []
    if register(con, lake, "flaky_tests", [day], "ft"):
        for r in _rows(con, SQL["listed_tests"], {"limit": MAX_TESTS_LISTED}):
            if r["verdict"] == "flaky":
                evidence = (f"{r['flake_events']} flake events in {r['runs']} runs "
                            f"({100 * (r['flake_rate'] or 0):.1f}%, 95% CI {100 * (r['flake_rate_low'] or 0):.1f}-"
                            f"{100 * (r['flake_rate_high'] or 0):.1f}%): {r['rerun_passes']} passed on rerun, "
                            f"{r['same_commit_pairs']} same-commit pass/fail, {r['flips']} flips on {branch}")
                platforms = _names(r["flaky_platforms"]) or "all"
            else:
                fixed = r["broken_fixed_sha"]
                evidence = (f"failing on every run from {(r['broken_from_sha'] or '?')[:10]} "
                            + (f"until {fixed[:10]}" if fixed else "(still failing)")
                            + f"; {r['broken_failures']} failures in {r['broken_ranges']} range(s)")
                platforms = _names(r["platforms"])
            out.append({"verdict": r["verdict"], "test": named_test(r["classname"], r["name"]), "file": r["file"],
                        "evidence": evidence, "platforms": platforms})
    if register(con, lake, "disabled_tests", [day], "dt"):
        for r in _rows(con, SQL["listed_disabled"], {"limit": MAX_TESTS_LISTED}):
            out.append({"verdict": "disabled", "test": r["test"], "file": "",
                        "evidence": f"{r['flake_events']} flake events in {r['runs']} runs; issue {r['id']}"
                                    + (f" {r['url']}" if r["url"] else ""),
                        "platforms": _names(r["platforms"]) or "all"})
    return out


def _names(platforms: list | None) -> str:
    # a verdict written before jobs of no known platform were named "unknown" lists them as null
    return ", ".join(p or "unknown" for p in platforms or [])


def load_time_regressions(con, lake: Lake, day: str) -> list[dict]:
    register(con, lake, "test_time_regressions", [day], "ttr")
    return _rows(con, SQL["listed_regressions"], {"limit": MAX_TESTS_LISTED})


# ---- metrics page ------------------------------------------------------------------------


def _series(rows: list[dict], name: str, column: str, x: str = "d", scale: float = 1.0) -> Series:
    return Series(name, [(r[x], r[column] * scale) for r in rows if r[column] is not None])


def workflows_named(names: tuple[str, ...], every: str) -> str:
    return ", ".join(names) if names else every


def metrics_charts(days: list[str], rows: list[dict], hud: HudConfig = PYTORCH_HUD,
                   branch: str = "main") -> tuple[list[str], str]:
    """The metrics page's charts and tables; `branch`: the main branch, whose commits they are."""
    day_rows = [r for r in rows if r["dimension"] == "day"]
    # commit figures are about `commits_day`, the day before the partition (see metrics.py)
    commit_rows = [dict(r, cd=r["commits_day"].isoformat()) for r in day_rows if r["commits"]]
    commit_days = [(dt.date.fromisoformat(d) - dt.timedelta(days=1)).isoformat() for d in days]
    platform_rows = [r for r in rows if r["dimension"] == "platform"]
    platforms = sorted({r["platform"] for r in platform_rows})
    pct = (lambda v: f"{v:.0f}%")
    hours = (lambda v: f"{v / 3600:.1f} h")
    charts = [
        line_chart(f"{pages.capitalized(branch)} commits red and flaky (% of commits with a signal)",
                   [_series(commit_rows, "red %", "red_pct", "cd"), _series(commit_rows, "flaky %", "flaky_pct", "cd")],
                   commit_days, fmt=pct),
        line_chart(f"Time to signal of {branch} commits green at the first attempt "
                   f"({workflows_named(hud.signal_workflows, 'every workflow')})",
                   [_series(commit_rows, "p50", "tts_p50_s", "cd"), _series(commit_rows, "p90", "tts_p90_s", "cd")],
                   commit_days, fmt=hours),
        line_chart("Queue time p90 per platform",
                   [_series([r for r in platform_rows if r["platform"] == p], p, "queue_p90_s") for p in platforms],
                   days, fmt=lambda v: duration(v)),
        line_chart("Flaky, broken and disabled tests",
                   [_series(day_rows, "flaky", "flaky_tests"), _series(day_rows, "broken", "broken_tests"),
                    _series(day_rows, "disabled", "disabled_tests")], days, fmt=lambda v: f"{v:g}"),
        line_chart("Failed jobs that are infrastructure failures",
                   [_series(day_rows, "infra share", "infra_failure_pct")], days, fmt=pct),
        line_chart(f"{pages.capitalized(branch)} commits per day", [_series(day_rows, "commits", "main_commits")],
                   days, fmt=lambda v: f"{v:g}"),
    ]
    last = max((r["d"] for r in rows), default=None)
    runner = sorted((r for r in rows if r["dimension"] == "runner" and r["d"] == last),
                    key=lambda r: -(r["queue_p90_s"] or 0))
    groups = sorted((r for r in rows if r["dimension"] == "job_group" and r["d"] == last),
                    key=lambda r: -(r["duration_p90_s"] or 0))
    tables = ""
    if last:
        tables += f"<h2>Queue time per runner label on {last}</h2>" + pages.table(
            ["platform", "label", "jobs", "p50", "p90", "max"],
            [[escape(r["platform"] or ""), f'<span class="mono">{escape(r["label"] or "")}</span>', str(r["jobs"]),
              duration(r["queue_p50_s"]), duration(r["queue_p90_s"]), duration(r["queue_max_s"])] for r in runner])
        tables += f"<h2>Job duration per job group on {escape(branch)} on {last}</h2>" + pages.table(
            ["job group", "successful jobs", "p50", "p90"],
            [[escape(r["job_group"] or ""), str(r["jobs"]), duration(r["duration_p50_s"]),
              duration(r["duration_p90_s"])] for r in groups])
    return charts, tables


def backend_charts(days: list[str], rows: list[dict]) -> list[str]:
    b = [r for r in rows if r["dimension"] == "backend"]
    repos = sorted({r["repo"] for r in b})
    return [
        line_chart("Downstream success rate per day",
                   [_series([r for r in b if r["repo"] == repo], repo, "success_rate", scale=100.0) for repo in repos],
                   days, fmt=lambda v: f"{v:.0f}%"),
        line_chart("Downstream callbacks received per day",
                   [_series([r for r in b if r["repo"] == repo], repo, "callbacks") for repo in repos],
                   days, fmt=lambda v: f"{v:g}"),
    ]


# ---- build and publish ---------------------------------------------------------------------


def render_site(lake: Lake, outputs: Store, day: str, repo: str, settings: SiteSettings,
                generated: str | None = None, rendered: dict[str, str] | None = None,
                not_read: ListsNotRead | None = None) -> tuple[dict[str, bytes], SiteReport]:
    """Every page of the site for `day`, as {path under the outputs: bytes}, but the pull
    requests' pages whose inputs are those `rendered` gives (path -> `pr_page_inputs`, of pages
    published and still there): those are listed in `report.reused`, not rendered. `not_read`:
    the disabled lists could not be read from GitHub, which index.html and tests.html say first."""
    generated = generated or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = SiteReport(day, False)
    backends = backend_pages.load(lake, day)
    backends_by_head = backend_pages.jobs_by_head(backends)
    drci = load_comments(lake, day)
    now = as_of_instant(day)
    con = connect()
    try:
        heads, groups, cells = load_grid(con, lake, day, settings.commits)
        awaiting_reports.mark(con, lake, day, cells, now)
        prs, pr_digests, active = load_prs(con, lake, day, settings.pr_days, sorted(drci), drci)
        redo = _pr_pages_to_render(prs, pr_digests, drci, backends_by_head, repo, rendered, report, settings.branch)
        files = render_pr_pages(con, redo, drci, backends_by_head, repo, generated, settings.branch)
        metric_days, metric_rows = load_metrics(con, lake, day, settings.metrics_days)
        tests = load_tests(con, lake, day, settings.branch)
        slower = load_time_regressions(con, lake, day)
    finally:
        con.close()
    report.commits, report.job_groups, report.pull_requests = len(heads), len(groups), len(prs)
    files[f"{SITE_DIR}/tests.html"] = pages.tests_page(
        tests, generated, f"Verdicts of flaky_tests for the window ending {day} and the disabled list "
                          f"(at most {MAX_TESTS_LISTED} of each).", slower, repo)
    charts, tables = metrics_charts(metric_days, metric_rows, settings.hud, settings.branch)
    files[f"{SITE_DIR}/metrics.html"] = pages.metrics_page(
        charts, tables, generated, f"ci_metrics_daily, {metric_days[0]} to {day}. Commit figures are plotted on the "
                                   "day the commits were pushed, once they had a day to settle.")
    data = outputs.read_bytes_if_exists(LEVELS_FILE)
    levels = {"backends": []} if data is None else json.loads(data)
    files[f"{SITE_DIR}/backends.html"] = pages.backends_page(
        [pages.backend_card(b) for b in levels.get("backends", [])], backend_charts(metric_days, metric_rows),
        generated, f"Levels and criteria from {LEVELS_FILE}" + (f" for {levels['day']}" if levels.get("day") else "")
                   + "; daily figures from ci_metrics_daily.", backend_pages.backend_links(backends))
    files.update(backend_pages.render(backends, repo, generated, SITE_DIR, {p["number"] for p in prs}, levels))
    seen = guardians_hud.view(lake, now)
    files[f"{SITE_DIR}/{guardians_hud.PAGE}"] = guardians_hud.autorevert_page(lake, seen, repo, generated)
    marks = {sha: guardians_hud.mark_badges(sha, m) for sha, m in guardians_hud.guardian_marks(seen).items()}
    files[f"{SITE_DIR}/index.html"] = pages.grid_page(
        heads, groups, cells, prs[:MAX_PRS_LISTED], repo, generated,
        f"The last {len(heads)} commits pushed to {settings.branch} as of {day} (newest first) and their job groups; "
        f"{_conclusion_note(settings.hud)}. Hover a cell for its jobs and failing tests; "
        "click it for the job on GitHub.",
        marks, _listed_note(active, settings.pr_days), settings.branch)
    for page in ("index.html", "tests.html"):
        files[f"{SITE_DIR}/{page}"] = with_banner(files[f"{SITE_DIR}/{page}"], not_read)
    out = {path: html.encode() for path, html in files.items()}
    report.pages = {path: len(data) for path, data in out.items()}
    return out, report


def _conclusion_note(hud: HudConfig) -> str:
    """How the grid's conclusion is decided, as the config decides it (HudConfig)."""
    if hud == PYTORCH_HUD:
        return ("conclusion as PyTorch's HUD computes it from the groups of the workflows that gate viable/strict "
                f"({', '.join(hud.blocking_workflows)}; more than {hud.min_job_groups - 1} groups for a signal; "
                "the others are in italics)")
    groups = f"{hud.min_job_groups} group{'s' if hud.min_job_groups > 1 else ''} at least for a signal"
    others = "; the others are in italics" if hud.blocking_workflows else ""
    return (f"conclusion from the groups of {workflows_named(hud.blocking_workflows, 'every workflow')} "
            f"({groups}; the config's hud.blocking_workflows{others})")


def render_pr_pages(con, prs: list[dict], drci: dict[int, dict], backends_by_head: dict[str, list[dict]], repo: str,
                    generated: str, branch: str = "main") -> dict[str, str]:
    """pr/<n>.html of each of `prs`, their job rows read PR_PAGES_PER_READ pull requests at a time:
    every pull request with a Dr. CI comment has a page, and all their rows at once would be hundreds
    of thousands of dicts."""
    files = {}
    for at in range(0, len(prs), PR_PAGES_PER_READ):
        batch = prs[at:at + PR_PAGES_PER_READ]
        rows = load_pr_jobs(con, [p["number"] for p in batch])
        for p in batch:
            jobs = rows.get(p["number"], [])
            page = with_drci_section(pages.pr_page(
                p, [j for j in jobs if j["source"] == "github"], repo, generated,
                backend_pages.pr_section(backends_by_head.get(p["head_sha"], [])), branch),
                (drci.get(p["number"]) or {}).get("body"))
            files[f"{SITE_DIR}/pr/{p['number']}.html"] = with_last_seen(page, last_seen(p, jobs))
    return files


def last_seen(pr: dict, jobs: list[dict]) -> dt.datetime | None:
    """When the HUD last saw the pull request or one of its head's jobs change: a page kept while
    the pull request sleeps says how old it is."""
    times = [pr.get("pr_updated_at")] + [j.get(k) for j in jobs for k in ("started_at", "completed_at")]
    return max((t for t in times if t is not None), default=None)


_AGE_JS = ("const t=document.querySelector('#last-seen time'),d=Math.floor((Date.now()-Date.parse(t.dateTime))/864e5);"
           "if(d>0)document.getElementById('age').textContent=` (${d} day${d>1?'s':''} ago)`;")


def with_last_seen(page: str, seen: dt.datetime | None) -> str:
    """The PR page saying when its state was last seen (and, in the browser, how many days ago): a
    sleeping open pull request's page is kept as it was, not rendered again."""
    if seen is None:
        return page
    at = seen.astimezone(dt.timezone.utc)
    note = (f'<p class="muted" id="last-seen">Last change seen <time datetime="{at:%Y-%m-%dT%H:%M:%SZ}">'
            f'{at:%Y-%m-%d %H:%M} UTC</time><span id="age"></span>: this page shows the pull request as the HUD '
            "last saw it, and changes when the pull request or its jobs do.</p>")
    return page.replace("<main>", "<main>" + note, 1).replace("</main>", f"</main><script>{_AGE_JS}</script>", 1)


def _listed_note(active: int, pr_days: int) -> str:
    """What index.html says of its pull request list when it is cut at MAX_PRS_LISTED."""
    if active <= MAX_PRS_LISTED:
        return ""
    return (f"The {MAX_PRS_LISTED} most recently updated of the {active} pull requests active in the last {pr_days} "
            "days. Every pull request with a Dr. CI comment has its page at pr/<number>.html, listed here or not.")


def _pr_pages_to_render(prs: list[dict], rows_digests: dict[int, str], drci: dict[int, dict],
                        backends_by_head: dict[str, list[dict]], repo: str, rendered: dict[str, str] | None,
                        report: SiteReport, branch: str = "main") -> list[dict]:
    """The pull requests whose page must be rendered: those whose inputs differ from `rendered`'s;
    records every page's inputs and the pages reused in `report`."""
    redo = []
    for p in prs:
        path = f"{SITE_DIR}/pr/{p['number']}.html"
        body = (drci.get(p["number"]) or {}).get("body")
        report.inputs[path] = pr_page_inputs(p, rows_digests.get(p["number"]), body,
                                             backends_by_head.get(p["head_sha"], []), repo, branch)
        report.states[path] = "closed" if p["pr_state"] == "closed" else "open"
        if (rendered or {}).get(path) == report.inputs[path]:
            report.reused.append(path)
        else:
            redo.append(p)
    return redo


def published_day(outputs: Store) -> str | None:
    data = outputs.read_bytes_if_exists(SITE_META)
    if data is None:
        return None
    try:
        day = json.loads(data).get("day")
    except (ValueError, AttributeError):
        return None
    return day if isinstance(day, str) else None


def publish_site(lake: Lake, outputs: Store, day: str, repo: str, settings: SiteSettings | None = None,
                 log: Callable[[str], None] = lambda s: None, reuse: bool = False,
                 not_read: ListsNotRead | None = None) -> SiteReport:
    """Render and publish the site for `day` (see the module docstring for the order of writes).
    `reuse` (an intra-day refresh): a pull request's page whose inputs did not change since it
    was published is neither read nor rendered again. `not_read`: see `render_site`."""
    current = published_day(outputs)
    if current is not None and current > day:
        log(f"{outputs.display(SITE_META)} shows {current}, later than {day}: not replaced")
        return SiteReport(day, False)
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    before = _published_meta(outputs)
    present = {e.path for folder in PAGE_FOLDERS for e in outputs.list_files(f"{SITE_DIR}/{folder}", (".html",))}
    rendered = {p: d for p, d in (before.get("inputs") or {}).items() if p in present and p in before["digests"]}
    files, report = render_site(lake, outputs, day, repo, settings or SiteSettings(), generated,
                                rendered if reuse else None, not_read)
    digests = {path: content_digest(data, generated) for path, data in files.items()}
    for path in report.reused:
        digests[path], report.pages[path] = before["digests"][path], before["pages"].get(path, 0)
        report.unchanged.append(path)
    index = f"{SITE_DIR}/index.html"
    writes = [p for p in sorted(p for p in files if p != index) + [index]
              if before["digests"].get(p) != digests[p] or not outputs.exists(p)]
    report.unchanged += [p for p in files if p not in writes]
    if any(p in before["digests"] for p in writes):  # a run killed while writing them must not vouch for them
        outputs.write_bytes(SITE_META, _meta(current or day, before, drop=set(writes)))
    for path in writes:
        outputs.write_bytes(path, files[path])
    last_rendered = {p: day for p in digests if p.startswith(f"{SITE_DIR}/pr/")}
    for path, (last, state) in kept_pr_pages(present - set(digests), before, day, outputs).items():
        digests[path], report.pages[path] = before["digests"][path], before["pages"].get(path, 0)
        last_rendered[path], report.states[path] = last, state
    stale = sorted(p for p in present if p not in digests)
    for path in stale:
        outputs.delete(path)
    report.deleted = stale
    outputs.write_bytes(SITE_META, _meta(day, {"pages": report.pages, "digests": digests, "inputs": report.inputs,
                                               "rendered": last_rendered, "states": report.states}))
    report.published = True
    log(f"published {len(files)} pages to {outputs.display(SITE_DIR)}/ ({sum(report.pages.values()) / 1e6:.1f} MB), "
        f"{len(report.unchanged)} of them unchanged and left as they were, "
        f"{len(stale)} stale pull request and backend pages removed")
    return report


def kept_pr_pages(unrendered: set[str], before: dict, day: str, outputs: Store) -> dict[str, tuple[str, str]]:
    """path -> (the day it was last rendered, the pull request's state then) of the pull request pages
    this publish did not render that stay: those of open pull requests, whose Dr. CI comment links
    there for as long as they are open, and closed ones' for PR_PAGE_KEEP_DAYS. Only what the last
    publish recorded is read (no window of the lake): a page it did not record goes."""
    kept = {}
    for path in sorted(p for p in unrendered if p.startswith(f"{SITE_DIR}/pr/") and p in before["digests"]):
        last = before["rendered"].get(path)
        last = last if isinstance(last, str) else day  # a page published before days were kept: from now
        state = before["states"].get(path)
        state = state if state in ("open", "closed") else _state_shown(outputs, path)
        if state == "open" or last >= days_around(day, PR_PAGE_KEEP_DAYS)[0]:
            kept[path] = (last, state)
    return kept


_STATE_SHOWN = re.compile(rb'/pull/\d+">[^<]*</a> \xc2\xb7 (open|closed)')


def _state_shown(outputs: Store, path: str) -> str:
    """The state a page published before states were recorded shows (pages.pr_page's first line),
    read once; "open" when it cannot be read, so that no open pull request's page is lost."""
    try:
        found = _STATE_SHOWN.search(outputs.read_bytes(path))
    except FileNotFoundError:
        return "open"
    return found[1].decode() if found else "open"


def _meta(day: str, meta: dict, drop: set[str] = frozenset()) -> bytes:
    """hud/site.json: the day shown, and each page's bytes, content digest and (pull requests)
    inputs, the day it was last rendered and its state then, but those of the pages in `drop`."""
    kept = {k: {p: v for p, v in (meta.get(k) or {}).items() if p not in drop}
            for k in ("pages", "digests", "inputs", "rendered", "states")}
    return json.dumps({"day": day, **kept}, indent=1, sort_keys=True).encode()


def content_digest(page: bytes, generated: str) -> str:
    """A page's digest without its "generated" time: a page whose content did not change is not
    rewritten, and keeps the time it was last generated with different content."""
    return hashlib.sha256(page.replace(generated.encode(), b"")).hexdigest()


def _published_meta(outputs: Store) -> dict:
    """What the last publish recorded: each page's content digest (`digests`) and bytes (`pages`),
    and each pull request page's inputs (`inputs`), day last rendered (`rendered`) and state then
    (`states`); empty before the first."""
    meta, data = {}, outputs.read_bytes_if_exists(SITE_META)
    if data is not None:
        try:
            meta = json.loads(data)
        except ValueError:
            meta = {}
    meta = meta if isinstance(meta, dict) else {}
    return {k: meta.get(k) if isinstance(meta.get(k), dict) else {}
            for k in ("digests", "pages", "inputs", "rendered", "states")}
