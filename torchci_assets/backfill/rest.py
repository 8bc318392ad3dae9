"""Reading GitHub's REST API for a backfill: list pages, downloads, and the budget left.

Every call goes through `GitHubResource.request`, so credentials (token or App), retries and
GitHub's rate-limit advice (Retry-After, X-RateLimit-Reset, a minute for secondary limits) are
the rest of the project's. What this adds is counting: requests made, and the budget GitHub
reported on its last answer, which the progress lines show so a user sees how much of the hour's
allowance a backfill takes before it runs dry.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import requests

from resources.github import GitHubError, GitHubResource
from resources.storage import Store

log = logging.getLogger(__name__)

PER_PAGE = 100
MAX_PAGES = 1000  # a bound against a server whose Link headers never end
DOWNLOAD_CHUNK = 1 << 20


@dataclass
class Budget:
    requests: int = 0
    remaining: int | None = None
    limit: int | None = None
    reset: int | None = None
    missing: int = 0  # downloads GitHub no longer has (410 expired artifact, 404 log)

    def note(self, headers) -> None:
        self.requests += 1
        for attr, name in (("remaining", "X-RateLimit-Remaining"), ("limit", "X-RateLimit-Limit"),
                           ("reset", "X-RateLimit-Reset")):
            value = headers.get(name, "")
            if value.isdigit():
                setattr(self, attr, int(value))

    def describe(self) -> str:
        if self.remaining is None:
            return f"{self.requests} requests"
        left = f"{self.remaining}/{self.limit}" if self.limit else str(self.remaining)
        resets = f", resets in {max(0, self.reset - int(time.time())) // 60} min" if self.reset else ""
        return f"{self.requests} requests, budget left {left}{resets}"


class RestReader:
    def __init__(self, gh: GitHubResource, budget: Budget | None = None, per_page: int = PER_PAGE):
        self.gh = gh
        self.budget = budget or Budget()
        self.per_page = per_page

    def get(self, path: str, params: dict | None = None, stream: bool = False, auth_path: str | None = None):
        try:
            resp = self.gh.request("GET", path, params=params, stream=stream, auth_path=auth_path)
        except GitHubError as exc:
            self.budget.requests += 1
            raise exc
        self.budget.note(resp.headers)
        return resp

    def json(self, path: str, params: dict | None = None) -> dict:
        return self.get(path, params).json()

    def pages(self, path: str, key: str | None, params: dict | None = None,
              auth_path: str | None = None) -> Iterator[dict]:
        """Items of a list endpoint across its `Link: rel="next"` pages; `key` names the list in
        an object body (`workflow_runs`, `jobs`, `artifacts`), None for a bare list. Next links
        may name the repository by its id: every page carries the credentials of `auth_path`
        (default: the first page's path)."""
        params = {"per_page": self.per_page, **(params or {})}
        first = auth_path or path
        for _ in range(MAX_PAGES):
            resp = self.get(path, params, auth_path=first)
            body = resp.json()
            yield from (body if key is None else body.get(key) or [])
            nxt = resp.links.get("next", {}).get("url")
            if not nxt:
                return
            path, params = nxt, None
        raise GitHubError(None, f"GET {path}: more than {MAX_PAGES} pages")

    def download(self, path: str, store: Store, rel: str) -> bool:
        """Stream a file behind GitHub's redirect (artifact zip, job log) to `rel` in `store`, a
        megabyte at a time (artifacts run to gigabytes), whole or not at all; False when GitHub no
        longer has it (410: the artifact expired; 404: the log was deleted or never kept).

        A body cut off midway (a reset or a stalled read from GitHub's storage) is asked for again,
        from GitHub's API (the redirect it gave is short-lived), with the client's backoff; one cut
        every time raises GitHubError, so the backfill stops as it does when GitHub stops answering,
        and the same command continues."""
        for attempt in range(1, self.gh.max_retries + 2):
            try:
                resp = self.get(path, stream=True)
            except GitHubError as exc:
                if exc.status in (404, 410):
                    self.budget.missing += 1
                    return False
                raise
            try:
                with resp, store.atomic_output(rel) as out:
                    for chunk in resp.iter_content(DOWNLOAD_CHUNK):
                        out.write(chunk)
                return True
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
                # the storage's signed address (its query) is a credential: never in a message
                error = self.gh.redact(re.sub(r"\?[^\s'\")]*", "?...", f"{type(exc).__name__}: {exc}"))[:200]
            if attempt <= self.gh.max_retries:
                wait = self.gh.backoff_s(attempt)
                log.warning("GET %s: download cut off (%s); retry %d in %.1fs", path, error, attempt, wait)
                self.gh.pause(wait)
        raise GitHubError(None, f"GET {path}: download cut off {attempt} times: {error}")
