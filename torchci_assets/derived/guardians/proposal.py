"""The revert proposal as PyTorch's autorevert writes it: a comment on the culprit's pull request
that asks @pytorchbot to revert it. The merge bot does the revert (and its checks); this project
never pushes. A hidden marker names the commit, so the comment is found again before any
second one could be posted."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

MARKER = "<!-- torchci-autorevert sha={sha} -->"
OPT_OUT_LABEL = "autorevert: disable"


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


def revert_comment(sha: str, signals: list[tuple[str, str]], message: str, classification: str,
                   hud_url: str = "", request: bool = True, pull: int | None = None, why: str = "") -> str:
    """`signals` are (workflow, signal key) pairs that failed from `sha` on; without `request`
    the comment only notifies, naming the pull request `pull` (when it goes elsewhere, to the
    notification issue) and `why` it is not reverted."""
    by_workflow: dict[str, list[str]] = defaultdict(list)
    for workflow, key in signals:
        by_workflow[workflow].append(key)
    names = ", ".join(sorted({key for _, key in signals}))
    source = f" from #{pull}" if pull else ""
    because = f" ({why})" if why else ""
    lines = [f'@pytorchbot revert -m "{message.format(signals=names, sha=sha[:10])}" -c {classification}' if request
             else f"The trunk guardian found {sha[:10]}{source} to be a likely culprit; it does not ask for a revert "
                  f"here{because}.",
             "", "This PR is attributed to have caused regression in:"]
    lines += [f"- {wf}: {', '.join(f'`{k}`' for k in sorted(keys))}" for wf, keys in sorted(by_workflow.items())]
    if hud_url:
        lines += ["", f"See the HUD: {hud_url}"]
    lines += ["", "Please investigate and fix the issues.", marker(sha)]
    return "\n".join(lines)


def has_marker(comments: list[dict], sha: str) -> bool:
    text = marker(sha)
    return any(text in (c.get("body") or "") for c in comments)
