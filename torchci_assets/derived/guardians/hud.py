"""The guardians on the HUD: marks on main's grid and the `autorevert.html` ledger page.

Marks per commit: `culprit` when a revert was proposed (or would have been, in dry run),
`suspect` while a signal points at it (or at a range holding it) without confirmation, and
`restarting` while a restart of it is younger than a job's usual run. The page lists the
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
MARKS = {"culprit": "revert proposed", "suspect": "suspected culprit", "restarting": "restart in flight"}


def configured() -> AutorevertConfig:
    settings = load_config().guardians
    return settings.autorevert if settings else AutorevertConfig()


def guardian_marks(lake: Lake, now: dt.datetime, cfg: AutorevertConfig | None = None) -> dict[str, list[str]]:
    """Per commit sha, its marks (keys of MARKS). Suspects are judged as the autorevert judges
    them (`cfg`, by default the configured one): a signal it does not watch marks nothing."""
    cfg = cfg or configured()
    marks: dict[str, set[str]] = {}
    for v in judged(lake, cfg, now, not cfg.enabled)[1]:
        if v.kind in ("restart", "suspect", "confirmed"):
            for sha in v.suspects:
                marks.setdefault(sha, set()).add("suspect")
    for a in ledger.actions(ledger.read(lake, now)):
        if a["action"] == "revert" and a.get("outcome") in ("ok", "dry_run"):
            marks.setdefault(a["commit_sha"], set()).add("culprit")
        elif a["action"] == "restart" and a.get("outcome") != "not_sent" and now - a["at"] < actions.IN_FLIGHT:
            marks.setdefault(a["commit_sha"], set()).add("restarting")
    return {sha: sorted(m) for sha, m in marks.items()}


def mark_badges(marks: list[str]) -> str:
    return "".join(f' <span class="badge {"red" if m == "culprit" else "pending"}" title="{escape(MARKS[m])}">'
                   f"{escape(m)}</span>" for m in marks)


def _t(t: dt.datetime | None) -> str:
    return "" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def autorevert_page(lake: Lake, now: dt.datetime, repo: str, generated: str) -> str:
    acts = sorted(ledger.actions(ledger.read(lake, now)), key=lambda a: a["at"], reverse=True)
    counts = Counter((a["action"], a.get("outcome") or "in flight") for a in acts)
    summary = pages.table(["action", "outcome", "count"], [[escape(a), escape(o), str(n)]
                                                          for (a, o), n in sorted(counts.items())])
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
