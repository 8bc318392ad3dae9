"""A comment written once, whatever crashes or retries come between it and what follows it.

Closing or editing an issue with an explanation is two writes. The comment carries a marker
(an HTML comment GitHub renders invisibly); before writing it, the issue's comments are read
and a comment with the marker means it was written already (a run that stopped after it):
only the second write is left to do. Where the same change can be made again later (a line
widened, narrowed, then widened again), only the issue's newest marked comment counts, so that it
is said again then. A close can be undone without a comment (a human reopens the issue): an issue
reopened since its newest closing comment was closed after it, so the next close is said again.
"""

from __future__ import annotations

import hashlib

from resources.github import GitHubResource


def digest_marker(prefix: str, *parts: str) -> str:
    """The hidden line ending a comment: `prefix` and a digest of what the comment says (`parts`),
    so a run finds its own comment again without the text's varying details (job links)."""
    return f"{prefix}{hashlib.sha1(chr(0).join(parts).encode()).hexdigest()[:12]} -->"


def comment_once(github: GitHubResource, repo: str, number: int, marker: str, text: str,
                 newest_of: str | None = None, undone_by: str | None = None) -> bool:
    """Post `text` + `marker` on the issue unless a comment with `marker` is there; True if posted.
    With `newest_of` (what every marker of its kind starts with), only the newest comment with a
    marker of that kind counts: the same change made again later, after others, is said again.
    With `undone_by` (an issue event, `reopened` for a close), a comment the issue had that event
    after (or in the same second) said an earlier time of the change, undone since: it is said again."""
    comments = github.paginate(f"/repos/{repo}/issues/{number}/comments", {"per_page": 100})
    marked = [c for c in comments if newest_of is None or newest_of in (c.get("body") or "")]
    said = [c for c in (marked[-1:] if newest_of else marked) if marker in (c.get("body") or "")]
    if said and not (undone_by and _had_since(github, repo, number, undone_by, said[-1].get("created_at") or "")):
        return False
    github.request("POST", f"/repos/{repo}/issues/{number}/comments", json_body={"body": f"{text}\n\n{marker}"},
                   retry_ambiguous=False)
    return True


def _had_since(github: GitHubResource, repo: str, number: int, event: str, since: str) -> bool:
    """Whether the issue had `event` at or after the time `since` (GitHub's ISO times compare as text).
    Read only when a comment says the change was made: the rare run after a crash or an undo."""
    events = github.paginate(f"/repos/{repo}/issues/{number}/events", {"per_page": 100})
    return any(e.get("event") == event and (e.get("created_at") or "") >= since for e in events)
