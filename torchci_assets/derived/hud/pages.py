"""The HUD's pages as HTML strings: pure functions of the data `derived/site/site.py` reads.

Every page is self-contained (its CSS and its few lines of JavaScript inline, plots as inline
SVG), links only relative paths within the site and absolute GitHub URLs, and so opens the same
from a local folder (file://) and from a static S3 website without fetching anything.
Conclusions and failure kinds are told by a letter as well as a colour (colour-blind safe).
"""

from __future__ import annotations

import datetime as dt
from html import escape

from torchci_assets.derived.hud.svg import duration

# (glyph, css class, label) per cell kind; {branch}: the main branch's name (`kind_label`)
CELL_KINDS = {
    "success": ("O", "ok", "success"),
    "new": ("X", "new", "failure (new)"),
    "cancelled": ("C", "can", "cancelled: retry"),
    "broken_on_main": ("B", "brk", "failure: test broken on {branch}"),
    "known_flaky": ("K", "kfl", "failure: known flaky test"),
    "infra": ("I", "inf", "failure: infrastructure"),
    "awaiting_reports": ("R", "awr", "failure: test reports not in yet"),
    "flaky": ("F", "fla", "flaky: failed, then passed on rerun"),
    "unstable": ("U", "uns", "failure of an unstable job (UNSTABLE issue): not red"),
    "pending": ("?", "pen", "pending"),
    "skipped": ("S", "skp", "skipped"),
}
CONCLUSION_LABELS = {"red": "red", "flaky": "flaky", "green": "green", "pending": "pending",
                     "no_signal": "no signal"}

CSS = """
:root{--ok:#009E73;--new:#D55E00;--brk:#7a2a00;--kfl:#CC79A7;--inf:#0072B2;--fla:#E69F00;--pen:#6b6b6b;
--skp:#9a9a9a;--uns:#8a7300;--ink:#1b1b1b;--muted:#5a5a5a;--line:#d8d8d8;--bg:#fff}
*{box-sizing:border-box}body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--ink);background:var(--bg)}
header{display:flex;gap:1.5em;align-items:baseline;padding:.6em 1em;border-bottom:1px solid var(--line);
background:#f6f8fa;flex-wrap:wrap}header h1{font-size:1.15em;margin:0}nav a{margin-right:1em}
nav a.here{font-weight:700;text-decoration:none;color:var(--ink)}main{padding:1em}
a{color:#0b5cad}h2{font-size:1.05em;margin:1.4em 0 .5em}.muted{color:var(--muted)}
table{border-collapse:collapse}th,td{padding:2px 6px;text-align:left;vertical-align:top}
table.list td,table.list th{border-bottom:1px solid var(--line)}table.list th{background:#f6f8fa}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.badge{display:inline-block;min-width:5.5em;text-align:center;border-radius:3px;padding:0 4px;font-weight:600;
color:#fff}a.badge{text-decoration:none}.badge.red{background:var(--new)}.badge.flaky{background:var(--fla);color:#000}
.badge.green{background:var(--ok)}.badge.pending{background:var(--pen)}.badge.no_signal{background:#ccc;color:#000}
table.hud{table-layout:fixed;line-height:1}table.hud td{padding:1px 2px;white-space:nowrap}
table.hud th.job{height:300px;width:18px;padding:0;vertical-align:bottom}
table.hud th.job div{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:400;
font-size:12px;max-height:298px;overflow:hidden;text-overflow:ellipsis}
table.hud th.job.nb div{color:var(--muted);font-style:italic}
table.hud th.wf{font-size:11px;font-weight:600;border-left:1px solid var(--line);overflow:hidden;
text-overflow:ellipsis;white-space:nowrap;max-width:1px;text-align:left;padding:0 2px}
table.hud tr:hover td{background:#eef4fb}
td.c{width:18px;text-align:center;font:700 13px/1 ui-monospace,Menlo,Consolas,monospace}
td.c a{text-decoration:none;display:block;color:inherit}
.ok{color:var(--ok)}.new{color:var(--new)}.brk{color:var(--brk)}.kfl{color:var(--kfl)}.inf{color:var(--inf)}
.fla{color:var(--fla)}.pen{color:var(--pen)}.skp{color:var(--skp)}.uns{color:var(--uns)}.can{color:var(--pen)}
.awr{color:var(--new)}td.c.new,td.c.brk,td.c.awr{background:#fbe3d6}td.c.inf{background:#dcebf7}td.c.kfl{background:#f6e4ef}
td.c.fla{background:#fbf0d9}td.c.uns{background:#f4f0d2}
.legend span.k{margin-right:1.2em;white-space:nowrap}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:1em}
figure.plot{margin:0;border:1px solid var(--line);border-radius:4px;padding:.5em}
figure.plot figcaption{font-weight:600;margin-bottom:.3em}svg.chart{width:100%;height:auto}
svg.chart .grid{stroke:#e5e5e5}svg.chart text{font-size:11px;fill:var(--muted)}
svg.chart .ytick{text-anchor:end}svg.chart .xtick{text-anchor:middle}
.plot .legend{font-size:12px}.plot .legend .key{margin-right:1em;white-space:nowrap}
.plot .legend svg{vertical-align:middle;margin-right:3px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,800px),1fr));gap:1em}
.card{border:1px solid var(--line);border-radius:4px;padding:.6em;overflow-x:auto}.card h3{margin:0 0 .3em;font-size:1em}
.met{color:var(--ok);font-weight:700;white-space:nowrap}.unmet{color:var(--new);font-weight:700;white-space:nowrap}
input[type=search],select{font:inherit;padding:2px 6px;margin-right:.6em}
.empty{padding:1em;border:1px dashed var(--line);color:var(--muted)}
"""

_NAV = (("index.html", "HUD"), ("metrics.html", "Metrics"), ("tests.html", "Tests"),
        ("backends.html", "Backends"), ("index.html#prs", "Pull requests"), ("autorevert.html", "Guardians"))


def layout(title: str, here: str, body: str, generated: str, depth: int = 0, script: str = "") -> str:
    """A whole page; `depth` is how many folders below the site root it lives (pr/ pages: 1)."""
    up = "../" * depth
    nav = "".join(f'<a href="{up}{href}"{" class=here" if href == here else ""}>{escape(label)}</a>'
                  for href, label in _NAV)
    js = f"<script>{script}</script>" if script else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>{escape(title)}</h1><nav>{nav}</nav>"
            f'<span class="muted">generated {escape(generated)}</span></header>'
            f"<main>{body}</main>{js}</body></html>")


def _time(t: dt.datetime | None) -> str:
    return "-" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def kind_label(kind: str, branch: str = "main") -> str:
    """A cell kind's label, naming the repository's main branch: a team's `master` is not `main`."""
    return CELL_KINDS[kind][2].format(branch=branch)


def capitalized(branch: str) -> str:
    """The branch's name opening a title: "Main commits", "Master commits"."""
    return branch[:1].upper() + branch[1:]


def cell_kind(state: str, failure_class: str | None, unstable: bool | None = False) -> str:
    """A main commit's cell. A failure of an unstable job is shown as such, as PyTorch's HUD shows
    it (a warning). A pull request's job has its kind from site/sql/pr_rows.sql, in Dr. CI's order."""
    if state == "failure":
        return "unstable" if unstable else failure_class or "new"
    return state if state in CELL_KINDS else "skipped"


def row_kind(r: dict) -> str:
    """A main commit's cell from its commit_health row: an infrastructure failure for want of test
    reports that may still land (`awaiting_reports`, set by site/awaiting_reports.py) is shown as such."""
    kind = cell_kind(r["state"], r["failure_class"], r.get("unstable"))
    return "awaiting_reports" if kind == "infra" and r.get("awaiting_reports") else kind


def _reports_line(r: dict) -> str:
    """When an awaited cell turns infrastructure, unless a report lands first."""
    due = r.get("reports_due")
    when = f"from {_time(due)} UTC" if due else "an hour after its workflow run ends"
    return f"no test report yet (reports are uploaded once the whole run completed): infrastructure {when}"


def legend(branch: str = "main") -> str:
    return '<p class="legend">' + "".join(
        f'<span class="k"><b class="{css}">{glyph}</b> {escape(kind_label(kind, branch))}</span>'
        for kind, (glyph, css, _) in CELL_KINDS.items()) + "</p>"


def job_url(repo: str, run_id, job_id) -> str:
    if job_id is None:
        return f"https://github.com/{repo}/actions/runs/{run_id}" if run_id else ""
    return f"https://github.com/{repo}/actions/runs/{run_id}/job/{job_id}"


def commit_link(repo: str, sha: str) -> str:
    return f'<a href="https://github.com/{repo}/commit/{escape(sha)}">{escape(sha[:10])}</a>'


# what a failing job's class says in the tooltip's count of the failed jobs; `awaiting_reports`: a test
# job whose reports may still land (site/awaiting_reports.py), not yet an infrastructure failure
_FAILED_AS = {"new": "new", "broken_on_main": "broken on {branch}", "known_flaky": "known flaky",
              "infra": "infrastructure", "awaiting_reports": "awaiting test reports"}


def cell_job(r: dict) -> dict:
    """The attempt a cell is about, with its linked job, reason, line and tests: a group's latest
    attempt, but a flaky group's latest failed one (`failed_attempt`), as its kind is about that failure."""
    failed = r.get("failed_attempt")
    return failed if r["state"] == "flaky" and failed else r


def _attempt_note(r: dict) -> str:
    """Which attempt the cell shows: a flaky one failed on one and passed on a later one."""
    failed = r.get("failed_attempt")
    if r["state"] == "flaky" and failed:
        run = "" if failed["run_id"] == r["run_id"] else " of another run"
        jobs = f" ({failed['failing_jobs']} jobs)" if (failed["failing_jobs"] or 0) > 1 else ""
        return f" · failed on attempt {failed['run_attempt']}{jobs}, passed on attempt {r['run_attempt']}{run}"
    return f" · attempt {r['run_attempt']} of {r['attempts']}" if r["attempts"] > 1 else ""


def _failed_count(r: dict, branch: str) -> str:
    """How the latest attempt's jobs failed, when more than one did: "failed jobs: 1 new, 1 infrastructure
    (no-test-results)", so a cell that names one job does not hide the others; a job whose test reports
    may still land is counted as awaiting them, as its own cell would show it."""
    kinds = r.get("failing_kinds") or []
    if len(kinds) < 2:
        return ""
    counts: dict[str, int] = {}
    for k in kinds:
        kind = "awaiting_reports" if k.get("awaiting_reports") else k["failure_class"]
        said = _FAILED_AS.get(kind, kind).format(branch=branch)
        if kind == "infra" and k["infra_reason"]:
            said += f" ({k['infra_reason']})"
        counts[said] = counts.get(said, 0) + 1
    return "failed jobs: " + ", ".join(f"{n} {said}" for said, n in counts.items())


def _cell_title(r: dict, branch: str = "main") -> str:
    """The cell's tooltip; the group is the column's header, so it is not repeated (pages stay small)."""
    kind, job = row_kind(r), cell_job(r)
    jobs = f"{r['jobs']} job{'s' if r['jobs'] != 1 else ''}"
    first = f"{kind_label(kind, branch)} · {jobs}" + (f", {r['failing_jobs']} failed" if r["failing_jobs"] else "")
    lines = [first + f" · longest {duration(r['duration_s'])}" + _attempt_note(r)]
    if count := _failed_count(r, branch):
        lines.append(count)
    if kind != "success" and job["job_name"]:
        lines.append(f"job: {job['job_name']}")
    if kind == "awaiting_reports":
        lines.append(_reports_line(r))
    elif job["infra_reason"]:
        lines.append(f"infrastructure: {job['infra_reason']}")
    if job["failure_line"]:
        lines.append(job["failure_line"][:200])
    tests = job["failing_tests"] or []
    if tests:
        more = job["failing_test_count"] - len(tests)
        lines.append("failing tests: " + "; ".join(tests) + (f" (+{more} more)" if more > 0 else ""))
    return "\n".join(lines)


def _grid_cell(r: dict | None, repo: str, branch: str) -> str:
    """A grid cell: its kind's glyph, linked to the job it is about (`cell_job`), titled with its tooltip."""
    if r is None:
        return "<td></td>"
    glyph, css, _ = CELL_KINDS[row_kind(r)]
    job = cell_job(r)
    url = job_url(repo, job["run_id"], job["job_id"])
    return f'<td class="c {css}"><a href="{escape(url)}" title="{escape(_cell_title(r, branch))}">{glyph}</a></td>'


def grid_page(commits: list[dict], groups: list[tuple[str, bool]], cells: dict, prs: list[dict], repo: str,
              generated: str, note: str, marks: dict | None = None, prs_note: str = "", branch: str = "main") -> str:
    """index.html: `commits` newest first (sha, pushed_at, conclusion, time_to_signal_s), `groups`
    (job_group, blocking) in column order, `cells[(sha, job_group)]` the commit_health row;
    `marks[sha]` the HTML of the trunk guardians' marks of a commit; `prs_note` what the list of
    pull requests leaves out."""
    marks = marks or {}
    # a row of workflows over their groups, then each group's job name, rotated
    spans: list[list] = []
    for g, _ in groups:
        wf = g.split(" / ", 1)[0]
        if spans and spans[-1][0] == wf:
            spans[-1][1] += 1
        else:
            spans.append([wf, 1])
    head = ('<tr><th colspan="4"></th>' + "".join(f'<th class="wf" colspan="{n}" title="{escape(wf)}">{escape(wf)}</th>'
                                                  for wf, n in spans) + "</tr>"
            '<tr><th>pushed (UTC)</th><th>commit</th><th>conclusion</th><th>signal</th>'
            + "".join(f'<th class="job{"" if blocking else " nb"}" title="{escape(g)}'
                      f'{"" if blocking else " (does not decide the conclusion)"}"><div>{escape(g.split(" / ", 1)[-1])}'
                      f'</div></th>' for g, blocking in groups) + "</tr>")
    rows = []
    for c in commits:
        tds = [_grid_cell(cells.get((c["sha"], g)), repo, branch) for g, _ in groups]
        concl = c["conclusion"]
        rows.append(
            f'<tr data-sha="{escape(c["sha"])}" data-conclusion="{concl}"><td class="mono">{_time(c["pushed_at"])}</td>'
            f'<td class="mono">{commit_link(repo, c["sha"])}{marks.get(c["sha"], "")}</td>'
            f'<td><span class="badge {concl}">{CONCLUSION_LABELS.get(concl, concl)}</span></td>'
            f'<td class="mono">{duration(c["time_to_signal_s"]) if c["time_to_signal_s"] else ""}</td>'
            + "".join(tds) + "</tr>")
    grid = (f'<table class="hud" id="grid">{head}{"".join(rows)}</table>' if commits
            else f'<p class="empty">No {escape(branch)} commits in the window yet.</p>')
    pr_rows = "".join(
        f'<tr><td><a href="pr/{p["number"]}.html">#{p["number"]}</a></td><td>{escape(p["pr_state"] or "")}'
        f'{" (merged)" if p["merged"] else ""}</td><td class="mono">{escape((p["head_sha"] or "")[:10])}</td>'
        f'<td class="mono">{_time(p["pr_updated_at"])}</td><td>{p["jobs"]}</td>'
        f'<td class="new">{p["new"] or ""}</td><td class="brk">{p["broken_on_main"] or ""}</td>'
        f'<td class="kfl">{p["known_flaky"] or ""}</td><td class="inf">{p["infra"] or ""}</td>'
        f'<td class="uns">{p["unstable"] or ""}</td>'
        f'<td class="can">{p["cancelled"] or ""}</td><td class="pen">{p["pending"] or ""}</td></tr>' for p in prs)
    pr_table = (f'<table class="list"><tr><th>PR</th><th>state</th><th>head</th><th>updated (UTC)</th><th>jobs</th>'
                f'<th>new failures</th><th>broken on {escape(branch)}</th><th>known flaky</th><th>infra</th>'
                f'<th>unstable</th>'
                f'<th>cancelled</th><th>pending</th></tr>{pr_rows}</table>' if prs
                else '<p class="empty">No pull request activity in the window.</p>')
    body = (f'<p class="muted">{escape(note)}</p>{legend(branch)}'
            f'<div style="overflow-x:auto">{grid}</div>'
            f'<h2 id="prs">Pull requests</h2>'
            + (f'<p class="muted" id="prs-cut">{escape(prs_note)}</p>' if prs_note else "") + pr_table)
    return layout(f"{repo} {branch}: CI at a glance", "index.html", body, generated)


def metrics_page(charts: list[str], tables: str, generated: str, note: str) -> str:
    body = f'<p class="muted">{escape(note)}</p><div class="plots">{"".join(charts)}</div>{tables}'
    return layout("CI metrics", "metrics.html", body, generated)


def table(headers: list[str], rows: list[list[str]], cls: str = "list", attrs: str = "") -> str:
    """An HTML table; cells are already-escaped HTML."""
    return (f'<table class="{cls}"{attrs}><tr>' + "".join(f"<th>{h}</th>" for h in headers) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</table>")


_FILTER_JS = """
const q=document.getElementById('q'),v=document.getElementById('verdict'),n=document.getElementById('shown');
function f(){const t=q.value.toLowerCase(),w=v.value;let k=0;
for(const r of document.querySelectorAll('#tests tr[data-verdict]')){
const s=(!w||r.dataset.verdict===w)&&(!t||r.textContent.toLowerCase().includes(t));r.hidden=!s;k+=s}
n.textContent=k}
q.addEventListener('input',f);v.addEventListener('change',f);f();
"""


def tests_page(rows: list[dict], generated: str, note: str, slower: list[dict] = (), repo: str = "") -> str:
    """tests.html: `rows` with verdict (flaky, broken, disabled), test, file, evidence, platforms;
    `slower`: test_time_regressions rows, shown when there are any."""
    verdicts = sorted({r["verdict"] for r in rows})
    options = '<option value="">all</option>' + "".join(f'<option value="{v}">{v}</option>' for v in verdicts)
    body_rows = "".join(
        f'<tr data-verdict="{r["verdict"]}"><td><b class="{ {"flaky": "kfl", "broken": "brk"}.get(r["verdict"], "inf") }">'
        f'{r["verdict"]}</b></td><td class="mono">{escape(r["test"])}</td><td class="mono">{escape(r["file"] or "")}</td>'
        f'<td>{escape(r["evidence"])}</td><td>{escape(r["platforms"])}</td></tr>' for r in rows)
    body = (f'<p class="muted">{escape(note)}</p>'
            f'<p><label>filter <input type="search" id="q" placeholder="test, file, platform..."></label>'
            f'<label>verdict <select id="verdict">{options}</select></label>'
            f'<span id="shown">{len(rows)}</span> of {len(rows)} shown</p>'
            + (table(["verdict", "test", "file", "evidence", "platforms"], [], attrs=' id="tests"')
               .replace("</table>", body_rows + "</table>") if rows
               else '<p class="empty">No flaky, broken or disabled tests.</p>'))
    if slower:
        body += '<h2 id="slower">Test files that got slower</h2>' + table(
            ["build_env", "test_config", "file", "before", "after", "first slow commit"],
            [[escape(r["build_env"] or ""), escape(r["test_config"] or ""), f'<span class="mono">{escape(r["file"])}</span>',
              duration(r["before_s"]), duration(r["after_s"]),
              f'<span class="mono">{commit_link(repo, r["first_slow_sha"])}</span>' if r["first_slow_sha"] else ""]
             for r in slower])
    return layout("Flaky, broken and disabled tests", "tests.html", body, generated, script=_FILTER_JS if rows else "")


def pr_page(pr: dict, jobs: list[dict], repo: str, generated: str, downstream: str = "",
            branch: str = "main") -> str:
    """pr/<number>.html: every GitHub job of the PR's latest head, failures classified (each job's `kind`,
    as site/sql/pr_rows.sql tells it), then `downstream`, the downstream backends' section (backend_pages);
    `branch`: the main branch's name, as the kinds' labels say it."""
    order = {"new": 0, "broken_on_main": 1, "cancelled": 2, "infra": 3, "known_flaky": 4, "unstable": 5, "pending": 6,
             "flaky": 7, "success": 8, "skipped": 9}

    def kind(j):
        return j["kind"] if j["kind"] in CELL_KINDS else "skipped"

    counts: dict[str, int] = {}
    for j in jobs:
        counts[kind(j)] = counts.get(kind(j), 0) + 1
    summary = " · ".join(f'<b class="{CELL_KINDS[k][1]}">{CELL_KINDS[k][0]}</b> {n} {escape(kind_label(k, branch))}'
                         for k, n in sorted(counts.items(), key=lambda kv: order.get(kv[0], len(order))))

    def row(j):
        glyph, css, _ = CELL_KINDS[kind(j)]
        label = kind_label(kind(j), branch)
        name = escape(j["name"] or "")
        url = job_url(repo, j["run_id"], j["job_id"])
        tests = "; ".join(j["failing_tests"] or [])
        more = (j["failing_test_count"] or 0) - len(j["failing_tests"] or [])
        detail = escape(tests + (f" (+{more} more)" if more > 0 else ""))
        if j["infra_reason"]:
            detail = (detail + "<br>" if detail else "") + f"infrastructure: {escape(j['infra_reason'])}"
        if j["failure_line"]:
            detail = (detail + "<br>" if detail else "") + f'<span class="mono">{escape(j["failure_line"][:300])}</span>'
        return [f'<b class="{css}">{glyph}</b> {escape(label)}', escape(j["workflow"] or ""),
                f'<a href="{escape(url)}">{name}</a>' if url else name, str(j["attempts"] or 1),
                duration(j["duration_s"]), detail]

    jobs = sorted(jobs, key=lambda j: (order.get(kind(j), len(order)), j["workflow"] or "", j["name"] or ""))
    head = pr["head_sha"]
    body = (f'<p><a href="https://github.com/{repo}/pull/{pr["number"]}">{repo}#{pr["number"]}</a> · '
            f'{escape(pr["pr_state"] or "")}{" (merged)" if pr["merged"] else ""} · '
            f'{escape(pr["head_ref"] or "")} → {escape(pr["base_ref"] or "")} · head '
            f'<span class="mono">{commit_link(repo, head)}</span> · '
            f'updated {_time(pr["pr_updated_at"])} UTC'
            + (f' · labels: {escape(", ".join(pr["labels"]))}' if pr["labels"] else "") + "</p>"
            f"<p>{summary or 'No jobs seen for this head yet.'}</p>"
            + (table(["result", "workflow", "job", "attempts", "duration", "failing tests / reason"],
                     [row(j) for j in jobs], attrs=' id="jobs"') if jobs else "")
            + downstream)
    return layout(f"PR #{pr['number']}", "", body, generated, depth=1)


def backends_page(cards: list[str], charts: list[str], generated: str, note: str, links: str = "") -> str:
    body = (f'<p class="muted">{escape(note)}</p>' + links
            + (f'<div class="cards">{"".join(cards)}</div>' if cards
               else '<p class="empty">No downstream backend is allowlisted or has reported results.</p>')
            + f'<h2>Over time</h2><div class="plots">{"".join(charts)}</div>')
    return layout("Downstream backends", "backends.html", body, generated)


def backend_card(b: dict) -> str:
    """One backend of backend-levels.json: its levels, reasons and every criterion."""
    rows = [[c["level"], escape(c["name"]), escape(c["metric"]), f'{c["window_days"]} d',
             "no data" if c["value"] is None else escape(_fmt(c["value"])), f'{c["op"]} {escape(_fmt(c["threshold"]))}',
             '<span class="met">✓ met</span>' if c["met"] else '<span class="unmet">✗ not met</span>']
            for c in b.get("criteria", [])]
    reasons = "".join(f"<li>{escape(r)}</li>" for r in b.get("reasons", []))
    return (f'<div class="card" data-repo="{escape(b["repo"])}"><h3>{escape(b["repo"])}</h3>'
            f'<p>current <b>{escape(b.get("current_level") or "none")}</b> · eligible '
            f'<b>{escape(b.get("eligible_level") or "-")}</b> · recommended <b>{escape(b.get("recommended_level") or "none")}</b>'
            f' ({escape(b.get("change") or "")}){" · device " + escape(b["device"]) if b.get("device") else ""}</p>'
            f"<ul>{reasons}</ul>"
            + table(["level", "criterion", "metric", "window", "value", "threshold", ""], rows) + "</div>")


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.4g}"
    return str(v)
