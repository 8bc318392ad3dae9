"""The comment's text, Dr. CI's layout: a header with the verdict, then one section per class.

The body is a pure function of the classification, with no timestamp in it, so that an unchanged
head gives a byte-identical body and posting can skip the write (at most one write per changed
body). The markers are Dr. CI's own, so a comment is found the same way PyTorch's bot finds its.

GitHub refuses a comment over 65,536 characters, and a refused edit would leave the previous
head's comment (green, say) standing. A head failing in hundreds of jobs therefore lists at most
the same number of jobs in each section, the largest that fits in BODY_BUDGET, and says how many
more there are and where they all are (the HUD's page of the pull request): the header and the
counts stay whole, and the cut depends on the classification only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchci_assets.cadence import DEFAULT_REFRESH_MINUTES, updates_every
from torchci_assets.derived.drci.classify import (AWAITING_APPROVAL, BROKEN_TRUNK, CANCELLED, FLAKY, INFRA,
                                                  LOG_PART, LOG_WHOLE, NEW, UNCLASSIFIED, UNSTABLE, Verdict,
                                                  failing, full_name, trunk_place)

MARKER_START = "<!-- drci-comment-start -->"
MARKER_END = "<!-- drci-comment-end -->"
DEFAULT_UPDATES = updates_every(DEFAULT_REFRESH_MINUTES * 60)
MAX_LINE_CHARS = 300
MAX_BODY_CHARS = 65_536  # GitHub refuses a longer comment (422)
# What the body is fitted in: the margin covers characters GitHub may count otherwise than Python
# (an emoji in a job name).
BODY_BUDGET = MAX_BODY_CHARS - 2_048
# a link taken from published data (an issue's URL) only when it cannot end the Markdown link early
_SAFE_URL = re.compile(r"https://[^\s()\[\]<>\"']+")

# (class, section title singular/plural, description, suggestion, collapsed), in the order of the body
_SECTIONS = (
    (AWAITING_APPROVAL, ("AWAITING APPROVAL", "AWAITING APPROVAL"),
     "The following {workflow} {needs} approval before CI can run", "", False),
    (NEW, ("NEW FAILURE", "NEW FAILURES"), "The following {job} {has} failed", "", False),
    (UNCLASSIFIED, ("UNCLASSIFIED FAILURE", "UNCLASSIFIED FAILURES"),
     "DrCI could not classify the following {job} because the workflow did not run on the merge base. "
     "The {failure} may be pre-existing on trunk or introduced by this PR", "", False),
    (CANCELLED, ("CANCELLED JOB", "CANCELLED JOBS"), "The following {job} {was} cancelled. Please retry", "", True),
    (INFRA, ("INFRA FAILURE", "INFRA FAILURES"),
     "The following {job} failed because of the infrastructure (runner lost, timed out, no test results), "
     "not the code", "Retry the failed jobs", True),
    (FLAKY, ("FLAKY", "FLAKY"), "The following {job} failed but {was} likely due to flakiness present on trunk",
     "", True),
    (BROKEN_TRUNK, ("BROKEN TRUNK", "BROKEN TRUNK"), "The following {job} failed but {was} present on the merge base",
     "Rebase onto the `{rebase_onto}` branch{until_fixed} to avoid these failures", True),
    (UNSTABLE, ("UNSTABLE", "UNSTABLE"),
     "The following {job} {is} marked as unstable, possibly due to flakiness on trunk", "", True),
)
# a pending job listed (an UNSTABLE one): upstream's hourglass before its name
PENDING_ICON = ":hourglass_flowing_sand: "
# said of a job whose state was read from GitHub's REST API
READ_FROM_REST = "state read from the REST API: its webhook was lost"
# said of a NEW or UNCLASSIFIED failure without a line from the log classifier (PyTorch's Dr. CI calls it FLAKY),
# by what `job_failure` holds of its log (`HeadJob.log_read`)
NOT_CLASSIFIED = "log not read yet"
NO_LINE = {None: NOT_CLASSIFIED, LOG_WHOLE: "log read: no log rule matched a line of it",
           LOG_PART: "log read only in part (cut short or unreadable): no log rule matched a line of what was read"}
# BROKEN TRUNK's description when a failure was seen on a main commit next to the merge base, not on it
NEAR_MERGE_BASE = "The following {job} failed but {was} present on {branch} at or next to the merge base"
# PyTorch's branch of main commits whose CI passed: the one to rebase onto past a broken trunk
VIABLE_STRICT = "viable/strict"
# the words of a description, singular and plural
_WORDS = {"job": ("job", "jobs"), "workflow": ("workflow", "workflows"), "has": ("has", "have"),
          "was": ("was", "were"), "is": ("is", "are"), "needs": ("needs", "need"), "failure": ("failure", "failures")}


@dataclass(frozen=True)
class Head:
    """The pull request head a comment is about."""

    repo: str
    number: int
    head_sha: str
    merge_base: str | None
    merge_base_note: str = ""     # how the merge base was found when not from the compare API
    web_url: str = "https://github.com"
    hud_url: str | None = None    # where the HUD is served, for the link to the PR's page
    branch: str = "main"          # the main branch's name
    rebase_onto: str = VIABLE_STRICT  # past a broken trunk: PyTorch's viable/strict, else the main branch


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _job_url(head: Head, run_id, job_id) -> str:
    if job_id is None:
        return f"{head.web_url}/{head.repo}/actions/runs/{run_id}" if run_id else ""
    return f"{head.web_url}/{head.repo}/actions/runs/{run_id}/job/{job_id}"


def _code(text: str) -> str:
    """Inline code that no backtick in the text can end early."""
    text = " ".join(text.split())[:MAX_LINE_CHARS].replace("`", "'")
    return f"`{text}`"


def _issue_url(head: Head, issue) -> str:
    """A DISABLED issue's URL as the disabled list gives it, else the upstream repository's."""
    return issue.url if _SAFE_URL.fullmatch(issue.url) else f"{head.web_url}/{head.repo}/issues/{issue.number}"


def _job_item(head: Head, v: Verdict) -> str:
    j = v.job
    url = _job_url(head, j.run_id, j.job_id)
    name = j.name if v.cls == AWAITING_APPROVAL else full_name(j)  # a workflow run: its name is the workflow's
    icon = PENDING_ICON if j.state == "pending" else ""
    line = f"* {icon}[{name}]({url})" if url else f"* {icon}{name}"
    if v.main is not None:
        url = _job_url(head, v.main.run_id, v.main.job_id)
        what = "similar failure" if v.cls == FLAKY else "trunk failure"  # FLAKY: main had it too (similar_on_main)
        line += (f" ([{what}]({url}) on merge base {v.main.sha[:10]})" if v.main.merge_base
                 else f" ([{what}]({url}) on {trunk_place(v.main, head.branch)}: {v.main.sha[:10]})")
    elif v.disabled:
        issues = ", ".join(f"[#{i.number}]({_issue_url(head, i)})" for i in v.disabled)
        line += (f" (disabled by {issues} until after the merge base: rebase onto {head.rebase_onto} to run the "
                 "fixed test)" if v.rebase else f" (disabled by {issues})")
    elif v.other is not None:
        url = _job_url(head, v.other.run_id, v.other.job_id)
        line += f" ([similar failure]({url}) on #{v.other.pr}: {v.other.sha[:10]})"
    elif v.related is not None:
        other = v.related
        line += f" ([related job]({_job_url(head, other.run_id, other.job_id)}): the same failure as {full_name(other)})"
    elif v.sighting is not None:
        line += (f" ([similar failure]({_job_url(head, v.sighting.run_id, v.sighting.job_id)})"
                 f" on {v.sighting.sha[:10]})")
    elif v.cls in (INFRA, FLAKY, UNCLASSIFIED, NEW) and v.evidence:  # a FLAKY without sighting: suppressed by a label
        line += f" ({v.evidence})"
    elif v.cls == UNSTABLE and v.evidence:
        text = v.evidence.replace("[", "(").replace("]", ")")
        line += f" ([{text}]({v.issue}))" if v.issue and _SAFE_URL.fullmatch(v.issue) else f" ({text})"
    if j.from_rest and v.cls != AWAITING_APPROVAL:
        line += f" ({READ_FROM_REST}{'' if v.cls == INFRA or j.failure_line else '; ' + NO_LINE[j.log_read]})"
    elif v.cls in (NEW, UNCLASSIFIED) and j.state == "failure" and not j.failure_line:
        line += f" ({NO_LINE[j.log_read]})"
    detail = j.failure_line or (f"{j.tests[0].key}: {j.tests[0].text or j.tests[0].message}" if j.tests else "")
    if detail:
        line += "\n    " + _code(detail)
    return line + "\n"


def _pr_page(head: Head) -> str | None:
    return f"{head.hud_url.rstrip('/')}/pr/{head.number}.html" if head.hud_url else None


def _more(head: Head, n: int) -> str:
    url = _pr_page(head)
    return f"* ... and {n} more ({f'see [the HUD page]({url})' if url else 'see the HUD page'})\n"


def _section(head: Head, cls: str, verdicts: list[Verdict], cap: int | None = None) -> str:
    """One class's section, listing at most `cap` of its jobs (all when None)."""
    mine = sorted((v for v in verdicts if v.cls == cls), key=lambda v: (v.job.name, v.job.job_id or 0))
    if not mine:
        return ""
    _, (one, many), description, suggestion, collapsed = next(s for s in _SECTIONS if s[0] == cls)
    n = len(mine)
    if cls == BROKEN_TRUNK and not all(v.main is None or v.main.merge_base for v in mine):
        description = NEAR_MERGE_BASE
    text = description.format(branch=head.branch, **{word: _plural(n, *forms) for word, forms in _WORDS.items()})
    until_fixed = "" if head.rebase_onto == VIABLE_STRICT else " once it is fixed there"
    suggestion = suggestion.format(rebase_onto=head.rebase_onto, until_fixed=until_fixed)
    out = f"\n<details{'' if collapsed else ' open'}><summary><b>{_plural(n, one, many)}</b> - {text}:</summary>"
    if suggestion:
        out += f"<p>👉 <b>{suggestion}</b></p>"
    shown = mine if cap is None else mine[:cap]
    items = "".join(_job_item(head, v) for v in shown) + (_more(head, n - len(shown)) if len(shown) < n else "")
    return out + "<p>\n\n" + items + "</p></details>\n"


def title(verdicts: list[Verdict], pending: int) -> str:
    """The header line: an icon and the counts, as Dr. CI words them. A cancelled job is neither the
    pull request's failure nor unrelated: it is counted apart and, like a new failure, keeps the ❌.
    A workflow awaiting approval is no failure, but nor is the head green: it comes first, with a
    ⚠️ unless something failed (PyTorch's Dr. CI). An unclassified failure keeps the ❌ too and is
    counted last; beside it the unrelated ones are never "You can merge normally!" (upstream's
    header would say both). A pending job listed as UNSTABLE counts as pending only, as upstream."""
    verdicts = failing(verdicts)
    new = sum(1 for v in verdicts if v.cls == NEW)
    cancelled = sum(1 for v in verdicts if v.cls == CANCELLED)
    awaiting = sum(1 for v in verdicts if v.cls == AWAITING_APPROVAL)
    unclassified = sum(1 for v in verdicts if v.cls == UNCLASSIFIED)
    unrelated = len(verdicts) - new - cancelled - awaiting - unclassified
    parts = [f"{awaiting} Awaiting Approval"] if awaiting else []
    if new:
        parts.append(f"{new} New {_plural(new, 'Failure', 'Failures')}")
    if cancelled:
        parts.append(f"{cancelled} Cancelled {_plural(cancelled, 'Job', 'Jobs')}")
    if not verdicts:
        parts.append("No Failures")
    if pending:
        parts.append(f"{pending} Pending")
    if unrelated:
        text = f"{unrelated} Unrelated {_plural(unrelated, 'Failure', 'Failures')}"
        parts.append(text if parts or unclassified else f"You can merge normally! ({text})")
    if unclassified:
        parts.append(f"{unclassified} Unclassified {_plural(unclassified, 'Failure', 'Failures')}")
    icon = (":x:" if new or cancelled or unclassified else ":warning:" if awaiting
            else ":hourglass_flowing_sand:" if pending else ":white_check_mark:")
    return f"## {icon} " + ", ".join(parts)


def _sections(head: Head, verdicts: list[Verdict], cap: int | None) -> str:
    return "".join(_section(head, s[0], verdicts, cap) for s in _SECTIONS)


def _fitted(head: Head, verdicts: list[Verdict], room: int) -> str:
    """The sections, every job listed when they fit in `room` characters, else at most the
    largest number of jobs per section that fits (the module docstring)."""
    full = _sections(head, verdicts, None)
    if len(full) <= room:
        return full
    lo, hi = 0, len(verdicts)  # invariant: a cap of lo fits (0 lists counts and links only), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(_sections(head, verdicts, mid)) <= room else (lo, mid)
    return _sections(head, verdicts, lo)


def render(head: Head, verdicts: list[Verdict], pending: int, updates: str = DEFAULT_UPDATES) -> str:
    """The whole comment body, markers included, within BODY_BUDGET. `updates`: how often the comment
    can change (`cadence.updates_every`), which its last line tells the pull request's author."""
    links = ""
    url = _pr_page(head)
    if url:
        links = f"## :link: Helpful Links\n### :test_tube: See every job of this pull request at [{url}]({url})\n\n"
    base = head.merge_base or "unknown"
    as_of = f"As of commit {head.head_sha} with merge base {base}"
    if head.merge_base_note:
        as_of += f" ({head.merge_base_note})"
    body = links + title(verdicts, pending) + "\n" + as_of + ":"
    if not failing(verdicts):
        body += "\n:green_heart: Looks good so far! There are no failures yet. :green_heart:\n"
    start = f"{MARKER_START}\n"
    end = f"\nThis comment was automatically generated by torchci-dagster and updates {updates}.\n{MARKER_END}"
    body += _fitted(head, verdicts, BODY_BUDGET - len(start) - len(body) - len(end))
    return start + body + end
