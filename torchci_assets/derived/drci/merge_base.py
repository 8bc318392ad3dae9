"""The real merge base of a pull request head: GitHub's compare API, cached per head sha in the lake.

`pull_request.base.sha` is where the base branch stood when the pull request was last updated,
not where the head branched off; BROKEN TRUNK compares against the commit the head was built on,
so the merge base comes from `GET /repos/{repo}/compare/{main}...{head}` (`merge_base_commit`).
It is always taken with the main branch, as PyTorch's Dr. CI does, whatever the pull request's
base: BROKEN TRUNK looks for the failure on main, and the base of a stacked pull request moves
(to main once the branch under it merges) while its head stays. The merge base of a head with
main never changes, so each head sha costs one request, ever: answers are appended to
`drci_merge_bases` (one row per head sha, `base_ref` the branch compared with) and read back for
the window, only those computed with the same branch (rows written when the pull request's base
was compared are asked again, once).

Without credentials (or when compare fails: a deleted fork, a head GitHub no longer has) the
merge base is estimated from the pull_request webhook's `base.sha`, and the comment says so:
such estimates are not cached, so the real answer replaces them once it can be had.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

import pyarrow as pa

from resources.github import GitHubError, GitHubResource, unavailable
from resources.lake import Lake, connect
from torchci_assets.derived.drci.inputs import rows

log = logging.getLogger(__name__)

TABLE = "drci_merge_bases"
LOOKBACK_DAYS = 30
SCHEMA = pa.schema([
    ("head_sha", pa.string()), ("repo", pa.string()), ("base_ref", pa.string()), ("merge_base", pa.string()),
    ("merge_base_at", pa.timestamp("ms", tz="UTC")), ("resolved_at", pa.timestamp("ms", tz="UTC")),
])
NOT_ASKED = "estimated from the pull request's base sha: the pull request is closed"
NO_CREDENTIALS = "estimated from the pull request's base sha: no GitHub credentials for the compare API"
# after one compare found GitHub down (its whole retry budget): the others are not asked in this run
UNAVAILABLE = "estimated from the pull request's base sha: GitHub unavailable, the compare API asked again next run"
DEFAULT_BRANCH = "main"  # PyTorch's; a deployment's is its config's main branch


@dataclass(frozen=True)
class MergeBase:
    sha: str | None
    note: str = ""          # empty when it came from the compare API
    fetched: bool = False   # asked GitHub in this run (costs one request)

    @property
    def exact(self) -> bool:
        return not self.note


def cached(lake: Lake, day: str, branch: str = DEFAULT_BRANCH, lookback_days: int = LOOKBACK_DAYS) -> dict[str, str]:
    """head sha -> merge base with `branch`, from the cache's partitions of the last `lookback_days` days."""
    first = (dt.date.fromisoformat(day) - dt.timedelta(days=lookback_days)).isoformat()
    days = [d for d in lake.days(TABLE) if first <= d <= day]
    if not days:
        return {}
    con = connect()
    try:
        if not lake.register(con, TABLE, days, name="mb"):
            return {}
        return {r["head_sha"]: r["merge_base"] for r in rows(con, "cached_merge_bases", {"branch": branch})}
    finally:
        con.close()


def compare(github: GitHubResource, repo: str, branch: str, head_sha: str) -> tuple[str, str | None]:
    """(merge base sha, its committer date) from the compare API; raises GitHubError."""
    resp = github.request("GET", f"/repos/{repo}/compare/{branch}...{head_sha}", params={"per_page": 1})
    commit = resp.json()["merge_base_commit"]
    when = ((commit.get("commit") or {}).get("committer") or {}).get("date")
    return commit["sha"], when


def resolve(lake: Lake, github: GitHubResource, day: str, repo: str, heads: list[tuple[str, str | None]],
            ask: bool = True, branch: str = DEFAULT_BRANCH, known: dict[str, str] | None = None) -> dict[str, MergeBase]:
    """head sha -> MergeBase with `branch` (the main branch, without refs/heads/) for `heads`
    [(head sha, base sha from the webhook)], new compare answers appended to the cache. With `ask`
    false (closed pull requests, whose comments are no longer written) only the cache and the
    estimate are used. `known`: the cache (`cached`) as the caller read it, nothing appended since
    (on S3 its days are a listing, and each of them another)."""
    known = cached(lake, day, branch) if known is None else known
    out: dict[str, MergeBase] = {}
    new = []
    now = dt.datetime.now(dt.timezone.utc)
    down = False  # a compare found GitHub unavailable: the other heads are estimated without asking
    for head_sha, base_sha in heads:
        if head_sha in known:
            out[head_sha] = MergeBase(known[head_sha])
            continue
        if github.dry_run or not ask or down:
            why = NO_CREDENTIALS if github.dry_run else UNAVAILABLE if down else NOT_ASKED
            out[head_sha] = MergeBase(base_sha, why)
            continue
        try:
            sha, when = compare(github, repo, branch, head_sha)
        except (GitHubError, KeyError, TypeError, ValueError) as e:
            log.warning("compare %s...%s failed (%s): using the webhook's base sha", branch, head_sha[:10], e)
            out[head_sha] = MergeBase(base_sha, f"estimated from the pull request's base sha: compare API failed "
                                                f"({getattr(e, 'status', None) or type(e).__name__})")
            down = unavailable(e)
            continue
        out[head_sha] = MergeBase(sha, fetched=True)
        at = dt.datetime.fromisoformat(when.replace("Z", "+00:00")) if when else None
        new.append({"head_sha": head_sha, "repo": repo, "base_ref": branch, "merge_base": sha,
                     "merge_base_at": at, "resolved_at": now})
    if new:
        lake.write(TABLE, day, pa.Table.from_pylist(new, schema=SCHEMA), part=f"part-{uuid.uuid4().hex[:12]}")
    return out
