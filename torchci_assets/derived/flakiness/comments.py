"""A comment written once, whatever crashes or retries come between it and what follows it.

Closing or editing an issue with an explanation is two writes. The comment carries a marker
(an HTML comment GitHub renders invisibly); before writing it, the issue's comments are read
and a comment with the marker means it was written already (a run that stopped after it):
only the second write is left to do.
"""

from __future__ import annotations

from resources.github import GitHubResource


def comment_once(github: GitHubResource, repo: str, number: int, marker: str, text: str) -> bool:
    """Post `text` + `marker` on the issue unless a comment with `marker` is there; True if posted."""
    comments = github.paginate(f"/repos/{repo}/issues/{number}/comments", {"per_page": 100})
    if any(marker in (c.get("body") or "") for c in comments):
        return False
    github.request("POST", f"/repos/{repo}/issues/{number}/comments", json_body={"body": f"{text}\n\n{marker}"},
                   retry_ambiguous=False)
    return True
