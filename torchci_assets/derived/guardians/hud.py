"""The guardians on the HUD: marks on main's grid and the `autorevert.html` ledger page.

Marks per commit: `culprit` when a revert was proposed, `notified` when the culprit's pull request
(or the notification issue) was told instead (it opted out, is still open, or the commit is a
revert), `suspect` while a signal points at it or at a range holding it (a confirmed culprit too,
beside its `culprit` mark), and `restarting` while a restart GitHub took is younger than a job's
usual run. What a dry run only decided is marked `would revert` and `would restart`: a mark must not
say GitHub was asked for what it never was (the ledger row's own `dry_run` says which). The page
says what the HUD can know of the autorevert (its config, its newest pass in the ledger), lists the
suspects from the judgement the marks come from, then the ledger's actions newest first, with their
counts, and the alerts' state changes, as the autorevert's own metrics page in PyTorch's HUD does.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from html import escape

from resources.lake import Lake
from torchci_assets.config import load_config
from torchci_assets.derived.guardians import actions, alert_issues, ledger
from torchci_assets.derived.guardians.culprits import Verdict
from torchci_assets.derived.guardians.passes import base_branch, judged
from torchci_assets.guardian_config import AutorevertConfig, GuardianSettings
from torchci_assets.derived.hud import pages

PAGE = "autorevert.html"
MARKS = {"culprit": "revert proposed", "notified": "culprit's pull request notified, no revert asked",
         "suspect": "suspected culprit", "restarting": "restart in flight",
         "would revert": "dry run: a revert would have been proposed, nothing was sent",
         "would restart": "dry run: a restart would have been sent, nothing was"}
# the verdicts that point at commits (`culprits.Verdict.kind`), as the page names them, surest first
VERDICT_LABELS = {"confirmed": "confirmed", "suspect": "suspect", "restart": "restart pending"}
KINDS = list(VERDICT_LABELS)
MAX_SIGNALS, MAX_REASONS = 10, 3


def _settings() -> GuardianSettings:
    return load_config().guardians or GuardianSettings()


def configured() -> AutorevertConfig:
    return _settings().autorevert


@dataclass(frozen=True)
class GuardianView:
    """What the HUD shows of the autorevert as of `now`: one judgement of main, which the grid's
    marks and the page's list of suspects both read, so the two never disagree."""

    now: dt.datetime
    cfg: AutorevertConfig
    commits: tuple[str, ...]  # main's commits judged, oldest first
    verdicts: tuple[Verdict, ...]  # those pointing at commits
    acts: tuple[dict, ...]  # the ledger's actions of the last LOOKBACK_DAYS days
    branch: str = "main"  # the main branch, as the page names it


def view(lake: Lake, now: dt.datetime, cfg: AutorevertConfig | None = None) -> GuardianView:
    """Suspects are judged as the autorevert judges them (`cfg`, by default the configured one): a
    signal it does not watch points at nothing. Whether the pass was a dry run (disabled, or no
    credentials, which the HUD cannot see) only picks which ledger restarts hold bisection places:
    a verdict's suspects are the same either way."""
    cfg = cfg or configured()
    history, verdicts = judged(lake, cfg, now, not cfg.enabled, window=_settings().window)
    pointing = tuple(v for v in verdicts if v.kind in VERDICT_LABELS and v.suspects)
    return GuardianView(now, cfg, history.commits, pointing, tuple(ledger.actions(ledger.read(lake, now))),
                        base_branch())


def guardian_marks(seen: GuardianView) -> dict[str, list[str]]:
    """Per commit sha, its marks (keys of MARKS); the `would ...` marks come from each ledger
    row's own `dry_run`."""
    marks: dict[str, set[str]] = {}
    for v in seen.verdicts:
        for sha in v.suspects:
            marks.setdefault(sha, set()).add("suspect")
    for a in seen.acts:
        mark = action_mark(a, seen.now)
        if mark:
            marks.setdefault(a["commit_sha"], set()).add(mark)
    return {sha: sorted(m) for sha, m in marks.items()}


def action_mark(act: dict, now: dt.datetime) -> str | None:
    """The mark a ledger action puts on its commit: by what GitHub was asked and took (an open
    intent may have reached it), never by what a dry run would have done; none for a call that
    failed or was never sent, nor for a restart older than a job's usual run."""
    outcome = "open" if act.get("open") else act.get("outcome")
    if act["action"] == "revert":
        return {"ok": "culprit", "notified": "notified", "dry_run": "would revert"}.get(outcome)
    if now - act["at"] >= actions.IN_FLIGHT:
        return None
    return {"ok": "restarting", "open": "restarting", "dry_run": "would restart"}.get(outcome)


def mark_badges(sha: str, marks: list[str]) -> str:
    """Each mark links to what explains it on the page: the commit's suspect row, or its newest
    ledger action."""
    return "".join(f' <a class="badge {"red" if m in ("culprit", "notified") else "pending"}" '
                   f'href="{PAGE}#{_anchor("suspect" if m == "suspect" else "action", sha)}" '
                   f'title="{escape(MARKS[m])}">{escape(m)}</a>' for m in marks)


def _anchor(section: str, sha: str) -> str:
    return f"{section}-{escape(sha)}"


def _t(t: dt.datetime | None) -> str:
    return "" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def autorevert_page(lake: Lake, seen: GuardianView, repo: str, generated: str) -> str:
    acts = sorted(seen.acts, key=lambda a: a["at"], reverse=True)
    counts = Counter((a["action"], a.get("outcome") or "in flight") for a in acts)
    summary = pages.table(["action", "outcome", "count"], [[escape(a), escape(o), str(n)]
                                                          for (a, o), n in sorted(counts.items())]) if counts else ""
    firsts = _firsts([a["commit_sha"] for a in acts])
    rows = [[_t(a["at"]), escape(a["action"]), _commit_cell(repo, "action", a["commit_sha"], first),
             escape(a.get("workflow") or ""), escape(", ".join(a.get("source_signal_keys") or [])),
             escape(a.get("outcome") or "in flight"), "yes" if a["dry_run"] else "no",
             f"#{a['pr_number']}" if a.get("pr_number") else ""] for a, first in zip(acts, firsts)]
    actions_table = pages.table(["at (UTC)", "action", "commit", "workflow", "signals", "outcome", "dry run", "PR"],
                                rows) if rows else '<p class="empty">No restart or revert in the last week.</p>'
    body = (f"{_state(seen)}<h2 id=\"suspects\">Suspected culprits</h2>{_suspects_table(seen, repo)}"
            f'<h2>Restarts and revert proposals</h2><p class="muted">The autorevert\'s decisions of the last '
            f"{ledger.LOOKBACK_DAYS} days (autorevert_events).</p>{summary}{actions_table}"
            f"<h2>Alerts</h2>{_alerts_table(lake, seen.now)}")
    return pages.layout("Trunk guardians", PAGE, body, generated)


def _alerts_table(lake: Lake, now: dt.datetime) -> str:
    changes = sorted(alert_issues.history(lake, now), key=lambda r: r["at"], reverse=True)
    rows = [[_t(r["at"]), escape(r["kind"]), escape(r["action"]), escape(r["title"]),
             f"#{r['issue_number']}" if r["issue_number"] else "", "yes" if r["dry_run"] else "no"] for r in changes]
    return pages.table(["at (UTC)", "alert", "change", "title", "issue", "dry run"], rows) \
        if rows else '<p class="empty">No alert opened, updated or closed in the last 30 days.</p>'


def _state(seen: GuardianView) -> str:
    """What the HUD can know of the autorevert: its config, and the newest pass that wrote to
    the ledger. Credentials and whether passes run at all are not in the lake, so it says so."""
    cfg = seen.cfg
    state = ("disabled in the config (<code>autorevert.enabled</code> is false): every pass is a dry run and "
             "sends nothing to GitHub" if not cfg.enabled else
             "enabled in the config (<code>autorevert.enabled</code>): a pass restarts and proposes reverts on "
             "GitHub when it has GitHub credentials, which this page cannot see; without them it is a dry run")
    watched = escape(", ".join(cfg.workflows)) if cfg.workflows else f"every workflow on {escape(seen.branch)}"
    writes = "A pass writes to the ledger only when it restarts or proposes a revert (or would, in a dry run), "
    if seen.acts:
        last = max(seen.acts, key=lambda a: a.get("ts") or a["at"])
        done = "was a dry run" if last["dry_run"] else "acted on GitHub"
        passes = (f"The last pass the ledger shows ran at {_t(last.get('ts') or last['at'])} UTC and {done}. "
                  f"{writes}so later passes may have run.")
    else:
        passes = (f"No pass wrote to the ledger in the last {ledger.LOOKBACK_DAYS} days. {writes}so this page "
                  "cannot tell whether passes run: <code>trunk_guardians_job_schedule</code> runs one every 5 "
                  "minutes where the Dagster daemon runs; <code>torchci run</code> runs none.")
    return f"<p>The autorevert is {state}. It watches {watched}. {passes}</p>"


def _suspects_table(seen: GuardianView, repo: str) -> str:
    """One row per run of adjacent commits with the same verdict, signals and why, newest first: a
    gap of forty commits the same signals point at is one row, not forty near-identical ones. Each
    commit's anchor sits on the first row naming it (its surest verdict), where its mark leads."""
    runs = _suspect_runs(seen)
    home: dict[str, int] = {}  # each commit's row: its surest verdict's, the newest of those
    for i, (kind, run, _, _) in enumerate(runs):
        for sha in run:
            if sha not in home or KINDS.index(kind) < KINDS.index(runs[home[sha]][0]):
                home[sha] = i
    rows = [[_commits_cell(repo, run, [home[sha] == i for sha in run]), VERDICT_LABELS[kind], signals, why]
            for i, (kind, run, signals, why) in enumerate(runs)]
    if not rows:
        return '<p class="empty">No commit is suspected: no failing signal the autorevert watches points at one.</p>'
    return (f'<p class="muted">The commits {escape(seen.branch)}\'s failing signals point at as of {_t(seen.now)} '
            "UTC, judged as the autorevert judges them (restart pending: re-runs are to narrow the range or confirm "
            "the failure; suspect: nothing left to re-run can narrow it, or runs are in flight; confirmed: a revert "
            "is due, proposed once).</p>"
            + pages.table(["commits", "verdict", "signals", "why"], rows))


def _suspect_runs(seen: GuardianView) -> list[tuple[str, tuple[str, ...], str, str]]:
    """(verdict kind, its commits newest first, signals, why), ordered by newest commit then surest
    verdict. Commits join a run only when they are neighbours on main and read the same."""
    grouped: dict[tuple[str, str], list[Verdict]] = {}
    for v in seen.verdicts:
        for sha in v.suspects:
            grouped.setdefault((sha, v.kind), []).append(v)
    order = {c: i for i, c in enumerate(seen.commits)}
    keys = sorted(grouped, key=lambda k: (-order.get(k[0], -1), KINDS.index(k[1])))
    runs: list[list] = []
    open_runs: dict[tuple[str, str, str], list] = {}
    for sha, kind in keys:
        said = (kind, _capped([v.signal.key for v in grouped[sha, kind]], MAX_SIGNALS),
                _capped(list(dict.fromkeys(v.reason for v in grouped[sha, kind])), MAX_REASONS))
        run = open_runs.get(said)
        if run is not None and sha in order and order.get(run[1][-1], -2) == order[sha] + 1:
            run[1].append(sha)
            continue
        run = [kind, [sha], said[1], said[2]]
        runs.append(run)
        open_runs[said] = run
    return [(kind, tuple(shas), signals, why) for kind, shas, signals, why in runs]


def _commits_cell(repo: str, run: tuple[str, ...], anchored: list[bool]) -> str:
    """One commit's link, or a run's newest and oldest with its length; every commit of the run
    keeps an anchor here when this is its first row, so each mark still leads to its row."""
    anchors = "".join(f'<span id="{_anchor("suspect", sha)}"></span>' for sha, a in zip(run, anchored) if a)
    if len(run) == 1:
        return anchors + pages.commit_link(repo, run[0])
    return (anchors + f"{pages.commit_link(repo, run[0])} … {pages.commit_link(repo, run[-1])} "
            f"({len(run)} commits)")


def _capped(items: list[str], most: int) -> str:
    more = f"; and {len(items) - most} more" if len(items) > most else ""
    return escape("; ".join(items[:most]) + more)


def _firsts(shas: list[str]) -> list[bool]:
    """Whether each is the first occurrence of its sha: that row carries the commit's anchor."""
    return [s not in shas[:i] for i, s in enumerate(shas)]


def _commit_cell(repo: str, section: str, sha: str, anchored: bool) -> str:
    anchor = f'<span id="{_anchor(section, sha)}"></span>' if anchored else ""
    return anchor + pages.commit_link(repo, sha)
