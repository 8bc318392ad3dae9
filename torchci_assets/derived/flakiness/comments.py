"""A comment written once, whatever crashes or retries come between it and what follows it.

Closing or editing an issue with an explanation is two writes. The comment carries a marker
(an HTML comment GitHub renders invisibly); before writing it, the issue's comments are read
and a comment with the marker means it was written already (a run that stopped after it):
only the second write is left to do. Where the same change can be made again later (a line
widened, narrowed, then widened again), only the issue's newest comment saying a change of that
kind counts, so that it is said again then; a comment saying no change (the day's evidence) comes
between a stopped run and the next one without hiding the first. A close can be undone without a
comment (a human reopens the issue): an issue closed after its newest closing comment and reopened
after that close, in the order GitHub lists the issue's events, is closed again with a comment.
"""

from __future__ import annotations

import hashlib

from resources.github import GitHubResource

# the event a change makes, by the event that undoes it
MADE_BY = {"reopened": "closed"}


def digest_marker(prefix: str, *parts: str) -> str:
    """The hidden line ending a comment: `prefix` and a digest of what the comment says (`parts`),
    so a run finds its own comment again without the text's varying details (job links)."""
    return f"{prefix}{hashlib.sha1(chr(0).join(parts).encode()).hexdigest()[:12]} -->"


def comment_once(github: GitHubResource, repo: str, number: int, marker: str, text: str,
                 newest_of: str | tuple[str, ...] | None = None, undone_by: str | None = None) -> bool:
    """Post `text` + `marker` on the issue unless a comment with `marker` is there; True if posted.
    With `newest_of` (what every marker of its kind starts with, or of each of its kinds), only the
    newest comment with a marker of those kinds counts: the same change made again later, after
    others, is said again. With `undone_by` (an issue event, `reopened` for a close), a comment the
    issue had the change's event after (in its second too) and then `undone_by` said an earlier
    time of the change, undone since: it is said again."""
    comments = github.paginate(f"/repos/{repo}/issues/{number}/comments", {"per_page": 100})
    kinds = (newest_of,) if isinstance(newest_of, str) else newest_of
    marked = [c for c in comments if not kinds or any(k in (c.get("body") or "") for k in kinds)]
    said = [c for c in (marked[-1:] if kinds else marked) if marker in (c.get("body") or "")]
    if said and not (undone_by and _undone_since(github, repo, number, undone_by, said[-1].get("created_at") or "")):
        return False
    github.request("POST", f"/repos/{repo}/issues/{number}/comments", json_body={"body": f"{text}\n\n{marker}"},
                   retry_ambiguous=False)
    return True


def _undone_since(github: GitHubResource, repo: str, number: int, undone_by: str, since: str) -> bool:
    """Whether the issue had the change's event (`MADE_BY`) at or after the time `since` and then
    `undone_by`, in GitHub's order of its events (their ids): its times have one-second resolution,
    so a reopening in the second of a comment whose close never came is before that close, not after
    it. Read only when a comment says the change was made: the rare run after a crash or an undo."""
    events = sorted(github.paginate(f"/repos/{repo}/issues/{number}/events", {"per_page": 100}),
                    key=lambda e: e.get("id") or 0)
    made = next((i for i, e in enumerate(events)
                 if e.get("event") == MADE_BY[undone_by] and (e.get("created_at") or "") >= since), None)
    return made is not None and any(e.get("event") == undone_by for e in events[made + 1:])
