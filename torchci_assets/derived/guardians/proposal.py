"""The revert proposal as PyTorch's autorevert writes it: a comment on the culprit's pull request
that asks @pytorchbot to revert it. The merge bot does the revert (and its checks); this project
never pushes. A hidden marker names the commit, so the comment is found again before any
second one could be posted."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

from torchci_assets.config import is_pytorch
from torchci_assets.derived.guardians.signals import TEST_SEPARATOR

MARKER = "<!-- torchci-autorevert sha={sha} -->"
OPT_OUT_LABEL = "autorevert: disable"
MAX_BODY_CHARS = 65_536  # GitHub refuses a longer comment (422)
# What the body is fitted in: the margin covers characters GitHub may count otherwise than Python.
BODY_BUDGET = MAX_BODY_CHARS - 2_048
# A culprit can break hundreds of tests: the comment names this many signals, each cut at
# MAX_KEY_CHARS, and counts the rest (the HUD shows them all), so it always fits.
MAX_LISTED = 50
MAX_KEY_CHARS = 300
# The revert's message (`-m`, the revert commit's message) names at most this many job groups,
# never tests.
MAX_MESSAGE_GROUPS = 3


class PullRef(NamedTuple):
    number: int
    reverts: bool  # the commit reverts the pull request (rather than lands it)


def pull_from_message(message: str, repo: str) -> PullRef | None:
    """The pull request a main commit's message names, as upstream's autorevert reads it: the
    merge bot ends a revert with `Reverted https://github.com/<repo>/pull/N on behalf of ...` and
    a landing with `Pull Request resolved: https://github.com/<repo>/pull/N`; the last such line
    counts (the bot appends it), a revert first. A bare `(#N)` in the title is not read: a
    cherry-pick or a quoted title carries another pull request's number."""
    url = rf"https://github\.com/{re.escape(repo)}/pull/(\d+)"
    for pattern, reverts in ((rf"Reverted {url}", True), (rf"Pull Request resolved: {url}", False)):
        found = re.findall(pattern, message or "", flags=re.IGNORECASE)
        if found:
            return PullRef(int(found[-1]), reverts)
    return None


def pull_into(pulls: list[dict], base: str) -> dict | None:
    """The pull request to blame among those GitHub lists for a commit: only one into `base`, as
    upstream takes it (a cherry-pick into a release branch lists the commit too, as does a
    branch that merged main), the merged one first."""
    into = [p for p in pulls if ((p.get("base") or {}).get("ref")) == base]
    merged = [p for p in into if p.get("merged_at")] or into
    return merged[0] if merged else None


def search_query(sha: str, repo: str) -> str:
    """Upstream's last resort for a commit's pull request: GitHub's search, which indexes a pull
    request's commits; closed ones only, as a landed pull request is."""
    return f"{sha} repo:{repo} is:pr is:closed"


def marker(sha: str) -> str:
    return MARKER.format(sha=sha)


def notify_only(pull: dict, reverts: bool = False) -> str:
    """Why the pull request gets a notification and no revert request ("" when it may be
    reverted): as upstream, the merge bot is asked only for a closed pull request whose author
    did not opt out, and never for a commit that is itself a revert of it. Closed, not merged:
    PyTorch's merge bot lands a pull request by cherry-pick and closes it, so GitHub's
    `merged_at` stays empty on the very pull requests to revert; an open one is not landed (or
    was reverted and reopened)."""
    if reverts:
        return "reverted by the commit"
    if OPT_OUT_LABEL in {label.get("name") for label in pull.get("labels") or []}:
        return f"labelled '{OPT_OUT_LABEL}'"
    if pull.get("state") == "open":
        return "not merged"
    return ""


def no_merge_bot(repo: str) -> str:
    """Why no revert is asked on `repo` ("" when it may be): `@pytorchbot revert` is a command of
    PyTorch's merge bot, which answers on pytorch/pytorch only; elsewhere the pull request is told."""
    return "" if is_pytorch(repo) else f"on {repo}, where no merge bot takes a revert request"


def _cut(text: str, limit: int = MAX_KEY_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def message_signals(signals: list[tuple[str, str]]) -> str:
    """What `{signals}` in the revert's message stands for: the job groups that failed, at most
    MAX_MESSAGE_GROUPS of them, never the tests, so the merge bot's command stays one short line
    whatever the culprit broke. A double quote would end `-m "..."` early."""
    groups = sorted({key.split(TEST_SEPARATOR)[0] for _, key in signals})
    named = ", ".join(_cut(g, 120) for g in groups[:MAX_MESSAGE_GROUPS]).replace('"', "'")
    more = len(groups) - MAX_MESSAGE_GROUPS
    return f"{named} and {more} more job group(s)" if more > 0 else named


def signal_lines(signals: list[tuple[str, str]]) -> list[str]:
    """One line per workflow naming its failing signals, the first MAX_LISTED of them in all (job
    groups before tests: a group says more than any one of its tests); the rest are counted."""
    listed = sorted(set(signals), key=lambda s: (TEST_SEPARATOR in s[1], s))
    by_workflow: dict[str, list[str]] = defaultdict(list)
    for workflow, key in listed[:MAX_LISTED]:
        by_workflow[workflow].append(key)
    lines = [f"- {_cut(wf)}: {', '.join(f'`{_cut(k)}`' for k in keys)}" for wf, keys in sorted(by_workflow.items())]
    if len(listed) > MAX_LISTED:
        lines.append(f"- ...and {len(listed) - MAX_LISTED} more, see the HUD")
    return lines


def fitted(body: str, sha: str) -> str:
    """`body` cut to BODY_BUDGET with its marker kept: the comment must be found again."""
    if len(body) <= BODY_BUDGET:
        return body
    end = marker(sha)
    return body[:BODY_BUDGET - len(end) - 1] + "\n" + end


def revert_comment(sha: str, signals: list[tuple[str, str]], message: str, classification: str,
                   hud_url: str = "", request: bool = True, pull: int | None = None, why: str = "") -> str:
    """`signals` are (workflow, signal key) pairs that failed from `sha` on; without `request`
    the comment only notifies, naming the pull request `pull` (when it goes elsewhere, to the
    notification issue) and `why` it is not reverted. GitHub refuses a comment over
    MAX_BODY_CHARS, and a refused proposal is never made: the signals are capped, and the body
    is fitted whatever the configured message says."""
    source = f" from #{pull}" if pull else ""
    because = f" ({why})" if why else ""
    said = message.format(signals=message_signals(signals), sha=sha[:10])
    lines = [f'@pytorchbot revert -m "{said}" -c {classification}' if request
             else f"The trunk guardian found {sha[:10]}{source} to be a likely culprit; it does not ask for a revert "
                  f"here{because}.",
             "", "This PR is attributed to have caused regression in:", *signal_lines(signals)]
    if hud_url:
        lines += ["", f"See the HUD: {hud_url}"]
    lines += ["", "Please investigate and fix the issues.", marker(sha)]
    return fitted("\n".join(lines), sha)


def has_marker(comments: list[dict], sha: str) -> bool:
    text = marker(sha)
    return any(text in (c.get("body") or "") for c in comments)
