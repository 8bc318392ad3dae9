"""The guardians on the HUD: marks on main's grid and the `autorevert.html` ledger page.

Marks per commit: `culprit` when a revert was proposed, `notified` when the culprit's pull request
(or the notification issue) was told instead (it opted out, is still open, or the commit is a
revert), `suspect` while a signal points at it (or at a range holding it) without confirmation,
and `restarting` while a restart GitHub took is younger than a job's usual run. What a dry run
only decided is marked `would revert` and `would restart`: a mark must not say GitHub was asked
for what it never was (the ledger row's own `dry_run` says which). The page lists the
ledger's actions newest first, with their counts, and the alerts' state changes, as the
autorevert's own metrics page in PyTorch's HUD does.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from html import escape

from resources.lake import Lake
from torchci_assets.derived.guardians import actions, alert_issues, ledger
from torchci_assets.config import load_config
from torchci_assets.derived.guardians.passes import judged
from torchci_assets.guardian_config import AutorevertConfig
from torchci_assets.derived.hud import pages

PAGE = "autorevert.html"
MARKS = {"culprit": "revert proposed", "notified": "culprit's pull request notified, no revert asked",
         "suspect": "suspected culprit", "restarting": "restart in flight",
         "would revert": "dry run: a revert would have been proposed, nothing was sent",
         "would restart": "dry run: a restart would have been sent, nothing was"}


def configured() -> AutorevertConfig:
    settings = load_config().guardians
    return settings.autorevert if settings else AutorevertConfig()


def guardian_marks(lake: Lake, now: dt.datetime, cfg: AutorevertConfig | None = None) -> dict[str, list[str]]:
    """Per commit sha, its marks (keys of MARKS). Suspects are judged as the autorevert judges
    them (`cfg`, by default the configured one): a signal it does not watch marks nothing. Whether
    the pass was a dry run (disabled, or no credentials, which the HUD cannot see) only picks which
    ledger restarts hold bisection places: a verdict's suspects are the same either way, and the
    `would ...` marks come from each ledger row's own `dry_run`."""
    cfg = cfg or configured()
    marks: dict[str, set[str]] = {}
    for v in judged(lake, cfg, now, not cfg.enabled)[1]:
        if v.kind in ("restart", "suspect", "confirmed"):
            for sha in v.suspects:
                marks.setdefault(sha, set()).add("suspect")
    for a in ledger.actions(ledger.read(lake, now)):
        mark = action_mark(a, now)
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


def mark_badges(marks: list[str]) -> str:
    return "".join(f' <span class="badge {"red" if m in ("culprit", "notified") else "pending"}" '
                   f'title="{escape(MARKS[m])}">{escape(m)}</span>' for m in marks)


def _t(t: dt.datetime | None) -> str:
    return "" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def autorevert_page(lake: Lake, now: dt.datetime, repo: str, generated: str) -> str:
    acts = sorted(ledger.actions(ledger.read(lake, now)), key=lambda a: a["at"], reverse=True)
    counts = Counter((a["action"], a.get("outcome") or "in flight") for a in acts)
    summary = pages.table(["action", "outcome", "count"], [[escape(a), escape(o), str(n)]
                                                          for (a, o), n in sorted(counts.items())]) if counts else ""
    rows = [[_t(a["at"]), escape(a["action"]), pages.commit_link(repo, a["commit_sha"]), escape(a.get("workflow") or ""),
             escape(", ".join(a.get("source_signal_keys") or [])), escape(a.get("outcome") or "in flight"),
             "yes" if a["dry_run"] else "no", f"#{a['pr_number']}" if a.get("pr_number") else ""] for a in acts]
    actions_table = pages.table(["at (UTC)", "action", "commit", "workflow", "signals", "outcome", "dry run", "PR"],
                                rows) if rows else '<p class="empty">No restart or revert in the last week.</p>'
    changes = sorted(alert_issues.history(lake, now), key=lambda r: r["at"], reverse=True)
    alert_rows = [[_t(r["at"]), escape(r["kind"]), escape(r["action"]), escape(r["title"]),
                   f"#{r['issue_number']}" if r["issue_number"] else "", "yes" if r["dry_run"] else "no"]
                  for r in changes]
    alerts_table = pages.table(["at (UTC)", "alert", "change", "title", "issue", "dry run"], alert_rows) \
        if alert_rows else '<p class="empty">No alert opened, updated or closed in the last 30 days.</p>'
    body = (f'<p class="muted">The autorevert\'s decisions of the last {ledger.LOOKBACK_DAYS} days '
            f"(autorevert_events) and the alerts' state changes (alerts).</p>{summary}"
            f"<h2>Restarts and revert proposals</h2>{actions_table}<h2>Alerts</h2>{alerts_table}")
    return pages.layout("Trunk guardians", PAGE, body, generated)
