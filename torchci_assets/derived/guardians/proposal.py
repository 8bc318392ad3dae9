"""The revert proposal as PyTorch's autorevert writes it: a comment on the culprit's pull request
that asks @pytorchbot to revert it. The merge bot does the revert (and its checks); this project
never pushes. A hidden marker names the commit, so the comment is found again before any
second one could be posted."""

from __future__ import annotations

from collections import defaultdict

MARKER = "<!-- torchci-autorevert sha={sha} -->"


def marker(sha: str) -> str:
    return MARKER.format(sha=sha)


def revert_comment(sha: str, signals: list[tuple[str, str]], message: str, classification: str,
                   hud_url: str = "") -> str:
    """`signals` are (workflow, signal key) pairs that failed from `sha` on."""
    by_workflow: dict[str, list[str]] = defaultdict(list)
    for workflow, key in signals:
        by_workflow[workflow].append(key)
    names = ", ".join(sorted({key for _, key in signals}))
    lines = [f'@pytorchbot revert -m "{message.format(signals=names, sha=sha[:10])}" -c {classification}', "",
             "This PR is attributed to have caused regression in:"]
    lines += [f"- {wf}: {', '.join(f'`{k}`' for k in sorted(keys))}" for wf, keys in sorted(by_workflow.items())]
    if hud_url:
        lines += ["", f"See the HUD: {hud_url}"]
    lines += ["", "Please investigate and fix the issues.", marker(sha)]
    return "\n".join(lines)


def has_marker(comments: list[dict], sha: str) -> bool:
    text = marker(sha)
    return any(text in (c.get("body") or "") for c in comments)
