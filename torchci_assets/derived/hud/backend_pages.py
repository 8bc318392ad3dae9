"""The HUD's downstream backend views (the relay RFC's "dedicated OOT HUD pages"), from `ci_result`:

- on each pull request's page, its one downstream section: the jobs every downstream backend ran
  for the PR's head, with level, result, failed tests or reason, queue and execution time as the
  relay measures them, a link to the run; L3/L4 (the ones with upstream check runs) in their own
  table, L2 below. `pr_jobs` holds the L3/L4 jobs too, but not the L2 ones, the queue times nor
  the relay's timed_out: this one reading of `ci_result` feeds the whole section;
- `backends/<owner>/<repo>.html` per backend: its recent heads (pull requests and commits) and
  the figures its level is judged on, read from `backend-levels.json` rather than measured again:
  the page, the backend's card on backends.html and the published levels then show one number for
  one thing, judged one way (the levels', as the relay RFC has it), for one day.

A job whose `completed` callback never came is shown as the relay's sweeper reports it to the HUD:
completed, `timed_out`, once the relay's zombie timeout passed. Left in progress it would never
count against the backend, however many of its runners died.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from resources.lake import Lake, connect
from resources.names import repo_name_problem
from resources.sql import SqlFiles, execute, relation
from torchci_assets.derived.hud import pages
from torchci_assets.derived.hud.downstream import define_downstream_macros, zombie_timeout
from torchci_assets.derived.hud.inputs import register
from torchci_assets.derived.hud.svg import duration
from torchci_assets.ingest.ci_results import SELF_REPORT_EVENTS, judged_as_of_ms
from torchci_assets.partitions import days_ending

SQL = SqlFiles(__file__)
CI_COLUMNS = {"repo": "VARCHAR", "level": "VARCHAR", "event_type": "VARCHAR", "delivery_id": "VARCHAR",
              "head_sha": "VARCHAR",
              "workflow_name": "VARCHAR", "run_id": "BIGINT", "run_attempt": "BIGINT", "job_name": "VARCHAR",
              "status": "VARCHAR", "conclusion": "VARCHAR", "queue_s": "DOUBLE", "execution_s": "DOUBLE",
              "started_at": "TIMESTAMPTZ", "callback_at": "TIMESTAMPTZ", "failure_kind": "VARCHAR", "failed": "BIGINT",
              "day": "DATE"}
RECENT_HEADS = 50
DAYS_BACK = 28  # the days of results read: a backend's page lists its heads of these days, the longest level window


@dataclass
class BackendViews:
    jobs: list[dict] = field(default_factory=list)  # latest attempt per (repo, head, workflow, job)
    pr_numbers: dict[str, int] = field(default_factory=dict)  # head sha -> pull request


def load(lake: Lake, day: str, days_back: int = DAYS_BACK, now_ms: int | None = None,
         zombie_timeout_s: int | None = None) -> BackendViews:
    """The ci_result rows of the `days_back` days ending `day`, as the pages need them, judged at the
    end of `day` or at `now_ms` (default: now) if earlier. A job that never completed times out
    after `zombie_timeout_s`, by default the config's `zombie_timeout_seconds`, which the relay's
    sweeps follow too."""
    judged = {"as_of_ms": judged_as_of_ms(day, now_ms), "zombie_timeout_s": zombie_timeout(zombie_timeout_s)}
    con = connect()
    try:
        define_downstream_macros(con)
        days = days_ending(day, days_back)
        register(con, lake, "ci_result", days, "backend_ci", columns=CI_COLUMNS)
        register(con, lake, "pull_request", days, "backend_prs")
        steps = dict(SQL.steps("backend_jobs"))
        execute(con, steps["judged"], judged)
        jobs = _rows(relation(con, steps["latest"], {"self_report_events": list(SELF_REPORT_EVENTS)}))
        numbers = {r["head_sha"]: r["number"] for r in _rows(con.sql(
            "SELECT head_sha, max(number) AS number FROM backend_prs WHERE head_sha IS NOT NULL GROUP BY head_sha"))}
    finally:
        con.close()
    return BackendViews(jobs, numbers)


def _rows(rel) -> list[dict]:
    table = rel.to_arrow_table()
    return table.to_pylist()


def backend_path(repo: str) -> str:
    """Where a backend's page lives under the site, `backends/<owner>/<repo>.html`."""
    owner, name = repo.lower().split("/", 1)
    return f"backends/{owner}/{name}.html"


def _run_link(job: dict) -> str:
    url = f"https://github.com/{job['repo']}/actions/runs/{job['run_id']}"
    return f'<a href="{escape(url)}">run {job["run_id"]}</a>' + (
        f" (attempt {job['run_attempt']})" if (job["run_attempt"] or 1) > 1 else "")


def _conclusion(job: dict) -> str:
    """The conclusion shown, saying when the relay's timeout gave it rather than the backend, so
    that nobody looks for a `timed_out` step in the downstream run."""
    if job.get("timed_out"):
        return escape(f'timed_out (no completed callback within {duration(job["execution_s"])})')
    return escape(job["conclusion"] or "-")


PR_HEADERS = ["backend", "level", "result", "workflow / job", "attempts", "queue", "execution",
              "failed tests / reason", "downstream run"]
# the pull request's page tells a downstream job's failure kind (downstream_macros.sql) by the HUD's glyphs
_KIND_CELLS = {"none": "success", "test": "new", "infrastructure": "infra", "pending": "pending"}


def _result(job: dict) -> str:
    glyph, css, _ = pages.CELL_KINDS[_KIND_CELLS.get(job["failure_kind"], "pending")]
    said = _conclusion(job) if job["status"] == "completed" else escape(job["status"] or "pending")
    return f'<b class="{css}">{glyph}</b> {said}'


def _reason(job: dict) -> str:
    """Why a failed job failed, as the ingest judged it: a count of failed tests is all a callback reports."""
    if job["failure_kind"] == "infrastructure":
        return "infrastructure"
    if job["failure_kind"] != "test":
        return ""
    failed = job.get("failed") or 0
    return f"{failed} test{'s' if failed != 1 else ''} failed" if failed else "failed after its tests ran"


def _pr_row(job: dict) -> list[str]:
    return [f'<a href="../{escape(backend_path(job["repo"]))}">{escape(job["repo"])}</a>', escape(job["level"] or ""),
            _result(job), escape(f'{job["workflow_name"] or ""} / {job["job_name"] or ""}'),
            str(job.get("attempts") or 1), duration(job["queue_s"]), duration(job["execution_s"]), _reason(job),
            _run_link(job)]


def pr_section(jobs: list[dict]) -> str:
    """The downstream part of a pull request's page (pr/<n>.html, one folder down), for its head's jobs:
    the L3/L4 ones, which the pull request shows as check runs, apart from the L2 ones only the HUD shows."""
    checked = [j for j in jobs if j["level"] in ("L3", "L4")]
    reported = [j for j in jobs if j["level"] == "L2"]
    body = '<h2 id="downstream">Downstream backends</h2>'
    if not checked and not reported:
        return body + '<p class="empty">No downstream backend has reported on this head.</p>'
    if checked:
        body += ("<h3>L3 / L4: mirrored on the pull request as crcr/&lt;repo&gt;/&lt;workflow&gt;/&lt;job&gt; check runs</h3>"
                 + pages.table(PR_HEADERS, [_pr_row(j) for j in checked], attrs=' id="downstream-checked"'))
    if reported:
        body += ("<h3>L2: reported to the HUD only</h3>"
                 + pages.table(PR_HEADERS, [_pr_row(j) for j in reported], attrs=' id="downstream-reported"'))
    return body


WINDOW_HEADERS = ["window", "judged jobs", "completed jobs", "lost: timed out by the relay", "pending",
                  "success rate", "queue p50", "queue p90"]


def level_health(repo: str, levels: dict | None) -> dict[str, dict]:
    """The backend's figures in `backend-levels.json` ({window days: backend_health row}); a repo's
    name is compared ignoring case, as the levels compare it."""
    for backend in (levels or {}).get("backends", []):
        if backend["repo"].lower() == repo.lower():
            return backend.get("health") or {}
    return {}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _window_row(days: str, h: dict) -> list[str]:
    return [f"{escape(days)} days", str(h.get("jobs", 0)), str(h.get("completed_jobs", 0)), str(h.get("lost", 0)),
            str(h.get("pending", 0)), _pct(h.get("success_rate")), duration(h.get("queue_p50_s")),
            duration(h.get("queue_p90_s"))]


def windows_section(repo: str, levels: dict | None) -> str:
    """The level windows as `backend-levels.json` measured them: the figures the criteria on
    backends.html compare with their thresholds, never a second measure that could differ."""
    health = level_health(repo, levels)
    if not health:
        return ('<h2>Over the level windows</h2><p class="empty">backend-levels.json has no figures for this '
                "backend yet.</p>")
    day = escape(str((levels or {}).get("day") or "-"))
    note = (f'<p class="muted">As backend-levels.json for {day} measures them (the criteria on '
            '<a href="../../backends.html">backends.html</a>): jobs judged at the end of that day, or when it was '
            "measured if earlier; a job that completed more than 6 h after it started counts as a failure, whatever "
            "its conclusion; one without a completed callback after the relay's zombie timeout is lost; pending "
            "jobs, still running within it, count in no rate or queue time.</p>")
    rows = [_window_row(days, h) for days, h in sorted(health.items(), key=lambda kv: int(kv[0]))]
    return f"<h2>Over the level windows</h2>{note}" + pages.table(WINDOW_HEADERS, rows, attrs=' id="windows"')


def _head_row(jobs: list[dict], number: int | None, upstream: str, published: frozenset[int] | set[int]) -> list[str]:
    """A head's jobs: failed as the levels count them (a test or infrastructure failure, a success after
    6 h included), running while pending."""
    what = (escape(jobs[0]["event_type"] or "push") if not number
            else f'<a href="../../pr/{number}.html">PR #{number}</a>' if number in published
            else f'<a href="https://github.com/{escape(upstream)}/pull/{number}">PR #{number}</a>')
    failed = sum(1 for j in jobs if j.get("failure_kind") in ("test", "infrastructure"))
    running = sum(1 for j in jobs if j["status"] != "completed")
    last = max((j["callback_at"] for j in jobs if j["callback_at"]), default=None)
    return [what, f'<span class="mono">{pages.commit_link(upstream, jobs[0]["head_sha"])}</span>', str(len(jobs)),
            str(failed), str(running), pages._time(last)]


def backend_page(repo: str, views: BackendViews, upstream: str, generated: str,
                 published: frozenset[int] | set[int] = frozenset(), levels: dict | None = None) -> str:
    """backends/<owner>/<repo>.html: the level windows from `levels` (backend-levels.json), then the
    recent heads with their jobs. A pull request links to its page when it has one on the site
    (`published`), else to GitHub: the heads go back further than the pull requests' pages."""
    mine = [j for j in views.jobs if j["repo"] == repo]
    level = mine[-1]["level"] if mine else ""
    heads: dict[str, list[dict]] = {}
    for job in sorted(mine, key=lambda j: j["callback_at"] or 0, reverse=True):
        heads.setdefault(job["head_sha"], []).append(job)
    rows = [_head_row(jobs, views.pr_numbers.get(sha), upstream, published)
            for sha, jobs in list(heads.items())[:RECENT_HEADS]]
    body = (f'<p>{escape(repo)} · level {escape(level or "-")} · '
            f'<a href="https://github.com/{escape(repo)}">repository</a></p>'
            + windows_section(repo, levels)
            + "<h2>Recent heads</h2>"
            + (pages.table(["upstream event", "head", "jobs", "failed", "running", "last callback (UTC)"], rows,
                           attrs=' id="heads"') if rows else '<p class="empty">No results reported.</p>'))
    return pages.layout(f"Backend {repo}", "backends.html", body, generated, depth=2)


def backend_links(views: BackendViews) -> str:
    repos = sorted({j["repo"] for j in views.jobs})
    if not repos:
        return ""
    return ("<h2>Per backend</h2><p>" + " · ".join(
        f'<a href="{escape(backend_path(r))}">{escape(r)}</a>' for r in repos) + "</p>")


def render(views: BackendViews, upstream: str, generated: str, site_dir: str,
           published: frozenset[int] | set[int] = frozenset(), levels: dict | None = None) -> dict[str, str]:
    """Every backend page, as {path under the outputs: html}; `published`: the pull requests with a page;
    `levels`: the published backend-levels.json, whose figures the pages show."""
    return {f"{site_dir}/{backend_path(r)}": backend_page(r, views, upstream, generated, published, levels)
            for r in sorted({j["repo"] for j in views.jobs}) if not repo_name_problem(r)}


def jobs_by_head(views: BackendViews) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for job in views.jobs:
        out.setdefault(job["head_sha"], []).append(job)
    return out
