"""Posting a comment exactly once per pull request, edited in place only when its body changed.

The comment is found by its marker over every page of the pull request's comments (Dr. CI's
own way), so the lake is never the guard: a crash between GitHub's 201 and the ledger write
costs nothing, since the next run finds the comment and edits it. The steps:
  1. list the comments (all pages); those carrying the start marker are ours;
  2. none: create it; a create without a clear answer (timeout, 5xx) is not resent but looked
     for again, and adopted when GitHub did create it;
  3. after a create, list again: two runs that raced (each saw none, each created) both see
     both comments now, and both keep the oldest (lowest id) and delete the others, so one is
     left whichever finishes first; a twin left by an older crash is removed the same way;
  4. edit the kept comment only when its body differs.
The `drci` pool lets one Dagster run post at a time, so step 3 is the rare case, not the rule. When it
happens, the runs' last writes may land in either order, so a post that met another run's comment
(a twin deleted, the kept comment not its own, or its own new comment edited already) says so
(`Posted.raced`): the publisher then does not trust its ledger row, and the next run lists the
comments and corrects the body. Two runs that both edit an existing comment cannot tell (nothing
differs in what they see), which the pool is there to prevent.

A comment counts as ours when its body starts with the marker (a human quoting it does not) and,
when `author` is given (the app's `<slug>[bot]` login), when that account wrote it (GitHub logins
ignore case, so the comparison does too); a duplicate is deleted only when the kept comment's author
wrote it too. A create GitHub answers for another account than `author` (the token is not the
app's) is deleted again at once and stops the run's posting with what to set (`WrongAuthor`): left
there, it would not be found as ours, and every later run would add one more; the publisher
remembers it, so later runs create nothing until the configuration changes. A create that is not found by the
list after it stops the run's posting too, for the same reason.

A rate limit (403/429 that outlasted the client's retry budget), GitHub down (no answer or a 5xx to
every attempt of the budget), or a refusal that holds for every pull request (401, or 403 "Resource
not accessible": the credentials may not comment) stops this run's posting: the remaining pull
requests wait for the next run rather than extending the limit, waiting out the same budget, or
repeating the refusal for each. Any other refusal (a locked conversation, a 404 for a deleted pull
request) fails that pull request only.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from resources.github import GitHubError, GitHubResource
from torchci_assets.derived.drci.comment import MARKER_START

log = logging.getLogger(__name__)


class StopPosting(GitHubError):
    """A reason that holds for every pull request (a rate limit that outlasted the retries, GitHub
    down, credentials that may not comment or that are another account than `drci.author`, a create
    not found after it): stop posting in this run rather than repeat it for each."""


class WrongAuthor(StopPosting):
    """GitHub wrote a new comment as `login`, not as `drci.author`: the credentials are another
    account's. Every run would create (and delete) one more until the configuration changes, so
    the publisher remembers it (publish.py)."""

    def __init__(self, message: str, author: str, login: str, comment_id: int | None):
        super().__init__(None, message)
        self.author, self.login, self.comment_id = author, login, comment_id


@dataclass(frozen=True)
class Posted:
    action: str             # created, edited, unchanged
    comment_id: int
    removed: tuple[int, ...] = ()   # duplicate comments deleted
    raced: bool = False     # another run was posting at once: the kept comment may show its body, not this one
    listed_at: dt.datetime | None = None  # when the comments were first listed (the post's ledger stamp)
    node_id: str | None = None  # the kept comment's GraphQL id, what later looks ask by (`shown`)


def _login(comment: dict) -> str | None:
    return (comment.get("user") or {}).get("login")


def same_login(a: str | None, b: str | None) -> bool:
    """GitHub logins are case-insensitive: `drci.author` may be spelt otherwise than GitHub answers."""
    return (a or "").lower() == (b or "").lower()


def ours(github: GitHubResource, repo: str, number: int, author: str | None = None) -> list[dict]:
    """Every comment on the pull request that is ours (see the module docstring), oldest first (all pages)."""
    try:
        comments = github.paginate(f"/repos/{repo}/issues/{number}/comments", {"per_page": 100})
    except GitHubError as e:
        raise _stop(e) from None
    return sorted((c for c in comments if (c.get("body") or "").startswith(MARKER_START)
                   and (author is None or same_login(_login(c), author))), key=lambda c: c["id"])


def _stop(e: GitHubError) -> GitHubError:
    """`e` as StopPosting when it holds for every pull request (bad credentials, a rate limit, an
    app without access, GitHub down for the whole retry budget), else `e` itself (a 403 for one
    locked conversation, a 404 for a deleted pull request)."""
    text = str(e).lower()
    limited_or_refused = e.status in (401, 429) or e.status == 403 and ("rate limit" in text or "not accessible" in text)
    if e.unavailable or limited_or_refused:
        return StopPosting(e.status, str(e), unavailable=e.unavailable)
    return e


def _call(github: GitHubResource, method: str, path: str, **kwargs):
    try:
        return github.request(method, path, **kwargs)
    except GitHubError as e:
        raise _stop(e) from None


def _create(github: GitHubResource, repo: str, number: int, body: str) -> dict | None:
    """The created comment as GitHub answered it, or None when the answer was lost (see step 2)."""
    try:
        resp = _call(github, "POST", f"/repos/{repo}/issues/{number}/comments", json_body={"body": body},
                     retry_ambiguous=False)
    except GitHubError as e:
        if not e.ambiguous:
            raise
        log.warning("PR #%d: creating the comment got no clear answer (%s); looking before sending again", number, e)
        return None
    try:
        return resp.json() if resp is not None else None
    except ValueError:  # a 201 without its JSON: the list after the create still finds the comment
        return None


def _check_author(github: GitHubResource, repo: str, number: int, created: dict | None, author: str | None) -> None:
    """Stop posting when GitHub wrote the new comment as another account than `author`: no later
    run would find it as ours, so each would add one (the comment is deleted again first)."""
    login = _login(created or {})
    if author is None or login is None or same_login(login, author):
        return
    try:
        _call(github, "DELETE", f"/repos/{repo}/issues/comments/{created['id']}")
        left = "deleted again"
    except GitHubError as e:
        left = f"left in place, delete it by hand ({e})"
    raise WrongAuthor(f"PR #{number}: the comment was posted as {login!r}, but drci.author is {author!r}: "
                      f"set drci.author to {login!r} or post with {author!r}'s credentials "
                      f"(comment {created['id']} {left})", author, login, created["id"])


def _dedupe(github: GitHubResource, repo: str, found: list[dict]) -> tuple[dict, tuple[int, ...]]:
    keep = found[0]
    extra = [c for c in found[1:] if same_login(_login(c), _login(keep))]
    for c in extra:
        try:
            _call(github, "DELETE", f"/repos/{repo}/issues/comments/{c['id']}")
        except GitHubError as e:
            if e.status != 404:  # the racing run deleted it first
                raise
    return keep, tuple(c["id"] for c in extra)


def shows(github: GitHubResource, repo: str, comment_id: int, body: str) -> tuple[bool | None, str | None]:
    """Whether the comment is on GitHub with `body` (one GET): False when GitHub says it is gone (404)
    or shows another body, None when it could not tell (the caller looks again another time); and
    its node id when GitHub showed it, for the next looks to ask by (`shown`)."""
    try:
        resp = github.request("GET", f"/repos/{repo}/issues/comments/{comment_id}")
    except GitHubError as e:
        return (False if e.status == 404 else None), None
    try:
        comment = resp.json() if resp is not None else {}
        return comment.get("body") == body, comment.get("node_id")
    except (ValueError, AttributeError):
        return None, None


# the comments asked about in one GraphQL query (GitHub's `nodes` takes at most 100 ids)
LOOK_BATCH = 100
_NODES = "query($ids: [ID!]!) { nodes(ids: $ids) { ... on IssueComment { databaseId body } } }"


def shown(github: GitHubResource, repo: str, looks: dict[int, tuple[str, str]]) -> dict[int, bool | None]:
    """comment id -> whether the comment is on GitHub with its body, for `looks` (comment id -> its
    node id and body), LOOK_BATCH a GraphQL query: what `shows` tells, a request per LOOK_BATCH
    comments rather than one each. False when GitHub no longer resolves the id (a deleted comment:
    its place is a NOT_FOUND error) or shows another body, None when it could not tell."""
    out: dict[int, bool | None] = {}
    items = sorted(looks.items())
    for start in range(0, len(items), LOOK_BATCH):
        batch = items[start:start + LOOK_BATCH]
        try:
            answer = github.graphql(_NODES, {"ids": [node for _, (node, _) in batch]}, f"/repos/{repo}/issues")
        except GitHubError as e:
            log.warning("looking at %d Dr. CI comment(s) failed (%s); a later run looks again", len(batch), e)
            out.update((cid, None) for cid, _ in batch)
            continue
        out.update(_read_nodes(batch, answer))
    return out


def _read_nodes(batch: list[tuple[int, tuple[str, str]]], answer: dict) -> dict[int, bool | None]:
    nodes = answer["data"].get("nodes") or []
    missing = {e["path"][1] for e in answer.get("errors") or []
               if e.get("type") == "NOT_FOUND" and len(e.get("path") or ()) == 2 and e["path"][0] == "nodes"}
    out: dict[int, bool | None] = {}
    for i, (cid, (_, body)) in enumerate(batch):
        node = nodes[i] if i < len(nodes) else None
        out[cid] = (False if i in missing else None) if node is None else node.get("body") == body
    return out


def utc_now() -> dt.datetime:
    """The clock a post's ledger row is stamped with (`publish` takes another in tests)."""
    return dt.datetime.now(dt.timezone.utc)


def upsert(github: GitHubResource, repo: str, number: int, body: str, author: str | None = None,
           clock: Callable[[], dt.datetime] = utc_now) -> Posted:
    """Make the pull request carry exactly one comment with `body` (see the module docstring).

    `listed_at` is read once the comments are listed, not before: a write this post finds was made
    before it, so another run's post whose write it overwrites was stamped earlier, whatever the
    two threads' or processes' clocks were read in between (stamped before the listing, the run that
    created a comment could be stamped after the run that then edited it, and its body, no longer
    shown, would be the one the ledger vouched for)."""
    found = ours(github, repo, number, author)
    listed_at = clock()
    mine = None  # the id of the comment this call created
    if not found:
        made = _create(github, repo, number, body)
        _check_author(github, repo, number, made, author)
        found = ours(github, repo, number, author)
        if not found:  # a failure of this PR would be retried by the next run, adding a comment each time
            raise StopPosting(None, f"PR #{number}: the comment is not listed after its create; posting stops "
                                    "until the next run, which looks for it again before creating")
        mine = (made or {}).get("id", found[0]["id"])
    keep, removed = _dedupe(github, repo, found)
    created = mine is not None
    # a twin, a kept comment another run created, or this run's new comment already edited by another
    # run: that run may write its body after this one's
    raced = bool(removed) or (created and (keep["id"] != mine or keep.get("body") != body))
    if keep.get("body") == body:
        return Posted("created" if created else "unchanged", keep["id"], removed, raced, listed_at, keep.get("node_id"))
    _call(github, "PATCH", f"/repos/{repo}/issues/comments/{keep['id']}", json_body={"body": body})
    return Posted("created" if created else "edited", keep["id"], removed, raced, listed_at, keep.get("node_id"))
