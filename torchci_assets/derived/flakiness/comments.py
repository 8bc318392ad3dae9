"""A comment written once, whatever crashes or retries come between it and what follows it.

Closing or editing an issue with an explanation is two writes. The comment carries a marker
(an HTML comment GitHub renders invisibly); before writing it, the issue's comments are read
and a comment with the marker means it was written already (a run that stopped after it):
only the second write is left to do. Where the same change can be made again later (a line
widened, narrowed, then widened again), only the issue's newest marked comment counts, so that it
is said again then.
"""

from __future__ import annotations

from resources.github import GitHubResource


def comment_once(github: GitHubResource, repo: str, number: int, marker: str, text: str,
                 newest_of: str | None = None) -> bool:
    """Post `text` + `marker` on the issue unless a comment with `marker` is there; True if posted.
    With `newest_of` (what every marker of its kind starts with), only the newest comment with a
    marker of that kind counts: the same change made again later, after others, is said again."""
    comments = github.paginate(f"/repos/{repo}/issues/{number}/comments", {"per_page": 100})
    bodies = [c.get("body") or "" for c in comments if newest_of is None or newest_of in (c.get("body") or "")]
    if any(marker in b for b in (bodies[-1:] if newest_of else bodies)):
        return False
    github.request("POST", f"/repos/{repo}/issues/{number}/comments", json_body={"body": f"{text}\n\n{marker}"},
                   retry_ambiguous=False)
    return True
