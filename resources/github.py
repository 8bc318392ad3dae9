"""GitHub REST client: repository_dispatch to backends, polling upstream commits, DISABLED issues.

A relay that hammers GitHub gets its token throttled or blocked, and one that gives up at the
first 502 drops commits, so every call goes through one retry loop that follows GitHub's own
rate-limit advice (Retry-After, then X-RateLimit-Reset, then at least a minute for secondary
limits) and stops when its wait budget is spent. A 4xx that is not a rate limit is final: the
downstream refused, and retrying would only burn quota. Beyond recovering from limits, the client
stays under them: searches (their own bucket, 30 a minute) are spaced `search_interval_s` apart
and writes `write_interval_s` apart, as GitHub asks of clients that create content.

A write that is not idempotent (creating an issue) must not be resent blindly after a timeout
or a 5xx, since GitHub may have done it: `request(..., retry_ambiguous=False)` returns such an
outcome at once as `GitHubError(ambiguous=True)`, so the caller can look before sending again.

Credentials are a personal/installation token or a GitHub App (JWT -> installation token).
With none, the client is in dry run: writes are recorded on the client and never sent, while
reads go out unauthenticated (public repos), so the demo can run on a laptop with no secrets.
Secrets never leave the client: they are hidden from reprs and scrubbed from every error text
and log line.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
import requests
from pydantic import Field, PrivateAttr

from resources.credentials import app_jwt, app_missing, token_problem
from resources.names import repo_name_problem

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
USER_AGENT = "torchci-dagster"
# repository_dispatch limits documented by GitHub.
MAX_EVENT_TYPE_CHARS = 100
MAX_PAYLOAD_KEYS = 10
MAX_PAYLOAD_BYTES = 65535
# GitHub asks clients hit by a secondary rate limit without Retry-After to wait a minute.
SECONDARY_LIMIT_WAIT_S = 60.0
# Installation tokens live one hour; renew this long before GitHub's expiry.
TOKEN_RENEW_MARGIN_S = 300.0
# GitHub's search API returns at most this many results for one query.
SEARCH_MAX_RESULTS = 1000
_SAFE_METHODS = frozenset({"GET", "HEAD"})
# No issue is older than GitHub: where a search's creation-date ranges start when its first page
# does not say when its oldest match was created.
SEARCH_EPOCH = dt.datetime(2008, 1, 1, tzinfo=dt.timezone.utc)
# Search results oldest first: the first page of a search matching more than GitHub returns names
# the oldest match, where its creation-date ranges start.
SEARCH_OLDEST_FIRST = {"sort": "created", "order": "asc"}
# Issues created from the first second to the last, both included and whole; None: open-ended.
Created = tuple[dt.datetime | None, dt.datetime | None]


class GitHubError(RuntimeError):
    """A GitHub call that did not succeed; `status` is None when no response arrived.

    `ambiguous` marks a write that may or may not have taken effect (no response, or a 5xx):
    GitHub sometimes commits a write and still fails to answer. `retry_at` (epoch seconds): when
    GitHub's advice (a rate limit's reset, a Retry-After) said to ask again, for a call that gave
    up waiting for it. `unavailable`: GitHub did not answer, or answered 5xx, to every attempt of the
    retry budget (an outage, not a refusal of this one call: every other call would meet it too).
    """

    def __init__(self, status: int | None, message: str, ambiguous: bool = False, retry_at: float | None = None,
                 unavailable: bool = False):
        super().__init__(message)
        self.status = status
        self.ambiguous = ambiguous
        self.retry_at = retry_at
        self.unavailable = unavailable


@dataclass(frozen=True)
class DispatchResult:
    """What became of one repository_dispatch, for the dispatch ledger.

    `ok` means GitHub accepted it; `refused` means a final 4xx (no access, no such repo,
    invalid) that retrying will not fix; neither means a transient failure that outlasted
    the retry budget, `unanswered` when that was no answer or a 5xx (GitHub may have taken it),
    not when the request could not be made at all. In dry run nothing was sent and `status` is None.
    """

    repo: str
    event_type: str
    status: int | None
    ok: bool
    refused: bool
    dry_run: bool
    error: str = ""
    attempts: int = 0
    waited_s: float = 0.0
    unanswered: bool = False


@dataclass(frozen=True)
class _Outcome:
    response: requests.Response | None
    error: str = ""
    attempts: int = 0
    waited_s: float = 0.0
    gave_up: bool = False  # the last failure was retryable but the budget ran out
    dry_run: bool = False
    ambiguous: bool = False  # a non-idempotent write without a clear answer, not resent
    retry_at: float | None = None  # given up: when GitHub's advice said to ask again

    @property
    def ok(self) -> bool:
        return self.response is not None and self.response.ok

    @property
    def status(self) -> int | None:
        return self.response.status_code if self.response is not None else None

    @property
    def unavailable(self) -> bool:
        """Given up on no answer or a 5xx: GitHub was down for the whole retry budget."""
        return self.gave_up and (self.status is None or self.status >= 500)

    def failure(self, message: str) -> GitHubError:
        """The GitHubError of this failed outcome, saying `message`."""
        return GitHubError(self.status, message, self.ambiguous, self.retry_at, self.unavailable)


class _NotInstalled(GitHubError):
    """The App has no installation on the repository's account: the call's outcome is GitHub's
    404 to the lookup (a refusal, as the call itself would have been answered)."""

    def __init__(self, outcome: _Outcome, message: str):
        super().__init__(404, message)
        self.outcome = _Outcome(outcome.response, message, outcome.attempts, outcome.waited_s)


# /repos/{owner}/{repo}/...: the repository a call is about, whose installation's token it needs.
_REPO_PATH = re.compile(r"^/repos/(?P<owner>[^/?#]+)/(?P<repo>[^/?#]+)")


def _iso_second(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _created_at(items: list[dict]) -> dt.datetime | None:
    """When the first of `items` was created, to the second; None when GitHub does not say."""
    text = items[0].get("created_at") if items else None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None
    except ValueError:
        return None
    return at.replace(microsecond=0) if at is not None and at.tzinfo is not None else None


def created_qualifier(start: dt.datetime | None, end: dt.datetime | None) -> str:
    """The `created:` qualifier of a creation range in GitHub's syntax (both ends included); ''
    for all time."""
    if start is None:
        return "" if end is None else f"created:<={_iso_second(end)}"
    return f"created:>={_iso_second(start)}" if end is None else \
        f"created:{_iso_second(start)}..{_iso_second(end)}"


def split_created(start: dt.datetime | None, end: dt.datetime | None,
                  now: dt.datetime) -> tuple[Created, Created] | None:
    """A creation range's two halves by time, or None for a single second, which cannot be split.

    An open start stands for GitHub's launch and an open end for `now` (when the read began); the
    later half keeps the open end, so issues created while the ranges are read are in the last one
    read, as they would be in a single search begun then (a count that grows while that range is
    paged is read again, as any).
    """
    low = start or SEARCH_EPOCH
    high = end or max(now, low)
    if high <= low:
        return None
    middle = low + dt.timedelta(seconds=int((high - low).total_seconds()) // 2)
    return (start, middle), (middle + dt.timedelta(seconds=1), end)


def rate_limited(exc: GitHubError) -> bool:
    """A 403 that was a rate limit: GitHub's message says so, or the client waited on its advice
    until it gave up. Any other 403 (a token without a permission, an organization's SAML or IP
    policy) answers the same however often it is asked."""
    text = str(exc)
    return "rate limit" in text.lower() or "(gave up:" in text


def unavailable(exc: Exception) -> bool:
    """GitHub was down for a call's whole retry budget (no answer, or 5xx): a writer that loops over
    items stops its pass there, since every later item would wait out the same budget in vain; what
    was not done waits for the next pass."""
    return isinstance(exc, GitHubError) and exc.unavailable


def outage_line(cause: object, waiting: str, then: str = "the next run") -> str:
    """What a writer stopped by an outage (`unavailable`) says, once: the same words for every writer,
    `waiting` naming what it left (`3 test(s)`), `then` what does it."""
    return f"GitHub was unavailable ({cause}): nothing lost; {waiting} wait for {then}"


def refused(exc: Exception) -> bool:
    """GitHub refused the credentials (a 401) or their access (a 403 that is no rate limit): it
    answers the same until someone changes them, unlike an outage or a rate limit."""
    status = exc.status if isinstance(exc, GitHubError) else None
    return status == 401 or (status == 403 and not rate_limited(exc))


def refusal_fix(exc: Exception, repo: str, permission: str) -> str | None:
    """What to change when GitHub refused (see `refused`), or None: the refusal does not pass by
    itself, so the message has to say which setting or which permission (`permission` on `repo`)."""
    if not refused(exc):
        return None
    if exc.status == 401:
        return ("GitHub refused the credentials: set a valid GITHUB_TOKEN, or GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY "
                "(and GITHUB_APP_INSTALLATION_ID), where Dagster runs")
    return f"GitHub refused these credentials access: the token or the GitHub App needs {permission} on {repo}"


def _limit_reset(resp: requests.Response) -> int | None:
    """When an exhausted rate limit resets (epoch seconds, X-RateLimit-Reset), or None: the limit is
    not exhausted, or the header is missing."""
    reset = resp.headers.get("X-RateLimit-Reset", "")
    return int(reset) if resp.headers.get("X-RateLimit-Remaining") == "0" and reset.isdigit() else None


def _retry_after_s(value: str) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _message(resp: requests.Response) -> str:
    try:
        body = resp.json()
        text = body.get("message", "") if isinstance(body, dict) else ""
    except ValueError:
        text = resp.text
    return " ".join(str(text).split())[:200]


def payload_bytes(client_payload: dict) -> bytes:
    """A client_payload as the request carries it, what GitHub's size limit counts: compact UTF-8,
    non-ASCII characters as they are (escaped, a Chinese character would count six bytes, not
    three). TypeError or ValueError when it is no JSON."""
    return json.dumps(client_payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def validate_dispatch(owner_repo: str, event_type: str, client_payload: dict) -> bytes:
    """The request body for a repository_dispatch, or ValueError for what GitHub would reject.

    Checked before sending so that a bad payload fails loudly here instead of as a 422 per
    backend, and sized on the exact bytes that will be sent.
    """
    problem = repo_name_problem(owner_repo)
    if problem:
        raise ValueError(f"dispatch target: {problem}")
    if not isinstance(event_type, str) or not event_type:
        raise ValueError("event_type must be a non-empty string")
    if len(event_type) > MAX_EVENT_TYPE_CHARS:
        raise ValueError(f"event_type is {len(event_type)} characters; GitHub allows at most "
                         f"{MAX_EVENT_TYPE_CHARS}")
    if not isinstance(client_payload, dict):
        raise ValueError(f"client_payload must be a JSON object, got {type(client_payload).__name__}")
    if len(client_payload) > MAX_PAYLOAD_KEYS:
        raise ValueError(f"client_payload has {len(client_payload)} top-level keys; GitHub "
                         f"allows at most {MAX_PAYLOAD_KEYS}")
    try:
        payload = payload_bytes(client_payload)
    except (TypeError, ValueError) as e:
        raise ValueError(f"client_payload is not serializable as JSON: {e}") from None
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"client_payload is {len(payload)} bytes as JSON; GitHub allows at "
                         f"most {MAX_PAYLOAD_BYTES}")
    return b'{"event_type":' + json.dumps(event_type).encode() + b',"client_payload":' + payload + b"}"


class GitHubResource(dg.ConfigurableResource):
    """GitHub REST API client with retries, App or token auth, and a dry-run mode."""

    api_url: str = Field(default="https://api.github.com",
                         description="REST base URL (GitHub Enterprise or a test server)")
    token: str | None = Field(default=None, repr=False,
                              description="Token for Authorization: Bearer (GITHUB_TOKEN)")
    app_id: str | None = Field(default=None, description="GitHub App id (or client id)")
    app_private_key: str | None = Field(default=None, repr=False,
                                        description="GitHub App private key, PEM")
    app_installation_id: str | None = Field(default=None,
                                            description="Installation of the App to act as")
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_retries: int = Field(default=5, description="Retries after the first attempt")
    backoff_base_s: float = Field(default=1.0, description="First backoff; doubles per retry")
    max_total_wait_s: float = Field(default=120.0,
                                    description="Give up rather than wait longer than this in total")
    max_pages: int = Field(default=10, description="Pagination bound for list calls")
    search_interval_s: float = Field(default=2.0, description="Least time between two searches "
                                     "(GitHub allows 30 a minute)")
    write_interval_s: float = Field(default=1.0, description="Least time between two writes "
                                    "(GitHub's advice against secondary rate limits)")

    _session: requests.Session | None = PrivateAttr(default=None)
    _sleep: Any = PrivateAttr(default=time.sleep)
    _app_tokens: dict[str, tuple[str, float]] = PrivateAttr(default_factory=dict)  # installation -> token, renew at
    _installations: dict[str, str] = PrivateAttr(default_factory=dict)  # owner (lower case) -> installation
    _minted: set[str] = PrivateAttr(default_factory=set)
    _dry_run_requests: list[dict] = PrivateAttr(default_factory=list)
    _last_call: dict[str, float] = PrivateAttr(default_factory=dict)
    _exhausted_until: dict[str, float] = PrivateAttr(default_factory=dict)

    # ---- state -----------------------------------------------------------------------

    @property
    def dry_run(self) -> bool:
        """True when no credential of any kind is configured: writes are recorded, not sent."""
        return not (self.token or self.app_id or self.app_private_key or self.app_installation_id)

    @property
    def _app_auth(self) -> bool:
        """True when calls carry GitHub App installation tokens (no GITHUB_TOKEN)."""
        return not self.token and not self.dry_run

    @property
    def web_url(self) -> str:
        """The web address matching `api_url`, for links humans open (jobs, issues)."""
        base = self.api_url.rstrip("/")
        if base == "https://api.github.com":
            return "https://github.com"
        return base.removesuffix("/api/v3")  # GitHub Enterprise Server; a test server stays as is

    @property
    def graphql_url(self) -> str:
        """GitHub's GraphQL endpoint: `/graphql` at the REST API's root (`/api/graphql` beside
        GitHub Enterprise Server's `/api/v3`; a test server's own root)."""
        base = self.api_url.rstrip("/")
        return (base.removesuffix("/v3") if base.endswith("/api/v3") else base) + "/graphql"

    @property
    def dry_run_requests(self) -> list[dict]:
        """The writes a dry run would have sent: dicts of method, url and json."""
        return list(self._dry_run_requests)

    def teardown_after_execution(self, context) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _http(self) -> requests.Session:
        if self._session is None:
            session = requests.Session()
            session.headers.update({"User-Agent": USER_AGENT,
                                    "Accept": "application/vnd.github+json",
                                    "X-GitHub-Api-Version": API_VERSION})
            self._session = session
        return self._session

    def redact(self, text: str) -> str:
        """`text` without any credential, as given, trimmed, or escaped as an exception's repr
        of a header shows it (a token read from a file keeps its trailing newline)."""
        forms = {form for secret in (self.token, self.app_private_key, *self._minted) if secret
                 for form in (secret, secret.strip(), repr(secret)[1:-1], repr(secret.strip())[1:-1]) if form}
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, "***")
        return text

    def _url(self, path_or_url: str) -> str:
        base = self.api_url.rstrip("/")
        if path_or_url.startswith(("http://", "https://")):
            # Pagination links come from the server; never carry credentials elsewhere.
            if not path_or_url.startswith(base + "/") and path_or_url != self.graphql_url:
                raise ValueError(f"refusing to call {path_or_url!r}: not under {base}")
            return path_or_url
        return base + "/" + path_or_url.lstrip("/")

    # ---- auth --------------------------------------------------------------------------

    def _authorization(self, url: str, renew: bool = False) -> str | None:
        """The Authorization header for a call to `url`, computed for each attempt (an
        installation token expires within the hour, a rate-limit wait can be longer); `renew`
        drops the cached installation token first (GitHub answered 401 to it)."""
        if self.token:
            if problem := token_problem(self.token):
                raise ValueError(problem)
            return f"Bearer {self.token.strip()}"
        if self.dry_run:
            return None
        installation = self._installation_for(url)
        if renew:
            self._app_tokens.pop(installation, None)
        return f"Bearer {self._installation_token(installation)}"

    def _app_jwt(self) -> str:
        if missing := app_missing(self.app_id, self.app_private_key):
            raise ValueError(missing)
        jwt = app_jwt(self.app_id, self.app_private_key, time.time())
        self._minted.add(jwt)
        return jwt

    def _installation_for(self, url: str) -> str:
        """The App installation whose token reaches `url`'s repository.

        An installation belongs to one account and its token reaches that account's repositories
        only, while the relay writes to the upstream and to downstreams of other organizations: so
        each owner's installation is looked up (`GET /repos/{owner}/{repo}/installation`, signed
        with the App's JWT) and kept for the client's life. A call outside a repository (search)
        uses `app_installation_id`. A repository whose account has not installed the App ends the
        call with GitHub's 404, as a refusal (`_NotInstalled`)."""
        m = _REPO_PATH.match(url[len(self.api_url.rstrip("/")):])
        if m is None:
            if not self.app_installation_id:
                self._app_jwt()  # names missing App settings first
                raise ValueError(f"GitHub App auth: {url} is not a repository's; set "
                                 "GITHUB_APP_INSTALLATION_ID to the installation to use for such calls")
            return self.app_installation_id
        owner = m["owner"].lower()
        if owner not in self._installations:
            outcome = self._send("GET", self._url(f"/repos/{m['owner']}/{m['repo']}/installation"),
                                 lambda renew: f"Bearer {self._app_jwt()}")
            if not outcome.ok:
                error = f"GitHub App installation of {m['owner']}/{m['repo']}: {outcome.error}"
                if outcome.status == 404:
                    raise _NotInstalled(outcome, f"{error} (the App is not installed on {m['owner']})")
                raise outcome.failure(error)
            self._installations[owner] = str(outcome.response.json()["id"])
        return self._installations[owner]

    def _installation_token(self, installation: str) -> str:
        cached = self._app_tokens.get(installation)
        if cached and time.time() < cached[1]:
            return cached[0]
        outcome = self._send("POST", self._url(f"/app/installations/{installation}/access_tokens"),
                             lambda renew: f"Bearer {self._app_jwt()}")
        if not outcome.ok:
            raise outcome.failure(f"GitHub App installation token request failed: {outcome.error}")
        data = outcome.response.json()
        token = data["token"]
        self._minted.add(token)
        expires = dt.datetime.fromisoformat(data["expires_at"].replace("Z", "+00:00"))
        self._app_tokens[installation] = (token, expires.timestamp() - TOKEN_RENEW_MARGIN_S)
        log.info("minted a GitHub App token for installation %s, valid until %s", installation,
                 data["expires_at"])
        return token

    # ---- the retry loop ----------------------------------------------------------------

    def backoff_s(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` (1, 2, ...): doubling from `backoff_base_s`."""
        return self.backoff_base_s * 2 ** (attempt - 1)

    def pause(self, seconds: float) -> None:
        """Wait between attempts, through the hook tests replace to not wait."""
        self._sleep(seconds)

    def _retry_wait(self, resp: requests.Response | None, attempt: int) -> tuple[float | None, str]:
        """Seconds to wait before retrying, or None when the outcome is final; and why."""
        backoff = self.backoff_s(attempt)
        if resp is None:
            return backoff, "no response"
        status = resp.status_code
        if status not in (403, 429) and status < 500:
            return None, ""
        retry_after = _retry_after_s(resp.headers.get("Retry-After", ""))
        if retry_after is not None:
            return retry_after, f"HTTP {status} with Retry-After"
        if status >= 500:
            return backoff, f"HTTP {status}"
        reset = _limit_reset(resp)
        if reset is not None:
            # +1 s: the reset instant is whole seconds and clocks differ slightly.
            return max(0.0, reset - time.time()) + 1.0, f"HTTP {status}, rate limit exhausted"
        if status == 429 or "secondary rate limit" in _message(resp).lower():
            return max(SECONDARY_LIMIT_WAIT_S, backoff), f"HTTP {status}, secondary rate limit"
        return None, ""

    def _send(self, method: str, url: str, authorize: Callable[[bool], str | None],
              body: bytes | None = None, params: dict | None = None,
              retry_ambiguous: bool = True, stream: bool = False) -> _Outcome:
        """Send with retries. Writes are retried after a timeout too: a dispatch GitHub took
        but did not acknowledge may then arrive twice, which the payload's delivery id lets
        the downstream detect, whereas a dropped one would go unnoticed. With
        `retry_ambiguous=False` only rate limits are retried (GitHub refused those before
        doing anything); no response or a 5xx ends the call, marked ambiguous.

        `authorize(renew)` gives each attempt its Authorization header, so a retry after a long
        rate-limit wait carries a token still valid; with App credentials a 401 (the
        installation token expired or was revoked early) is retried once with a new token."""
        waited = 0.0
        attempt = 0
        renew = renewed = False
        while True:
            attempt += 1
            authorization = authorize(renew)
            headers = {"Authorization": authorization} if authorization else {}
            if body is not None:
                headers["Content-Type"] = "application/json"
            resp: requests.Response | None = None
            try:
                resp = self._http().request(method, url, headers=headers, data=body, params=params,
                                            timeout=(self.connect_timeout_s, self.read_timeout_s), stream=stream)
                error = "" if resp.ok else f"HTTP {resp.status_code}: {_message(resp)}"
            except (requests.ConnectionError, requests.Timeout) as e:
                error = self.redact(f"{type(e).__name__}: {e}")[:200]
            except requests.RequestException as e:  # a request that could not be made: final
                return _Outcome(None, self.redact(f"{type(e).__name__}: {e}")[:300], attempt, waited)
            error = self.redact(error)
            renew = resp is not None and resp.status_code == 401 and self._app_auth and not renewed
            if renew:
                log.warning("GitHub %s %s: HTTP 401 with an installation token; retrying once with a new one",
                            method, url)
                renewed = True
                resp.close()
                continue
            if error and not retry_ambiguous and (resp is None or resp.status_code >= 500):
                return _Outcome(resp, error, attempt, waited, ambiguous=True)
            wait, reason = self._retry_wait(resp, attempt) if error else (None, "")
            if wait is None:
                return _Outcome(resp, error, attempt, waited)
            if attempt > self.max_retries or waited + wait > self.max_total_wait_s:
                why = (f"after {attempt} attempt{'s' * (attempt > 1)}" if attempt > self.max_retries else
                       f"a further {wait:.0f}s wait would exceed the {self.max_total_wait_s:.0f}s budget")
                log.warning("GitHub %s %s: giving up (%s): %s", method, url, why, error)
                limited = resp is not None and resp.status_code in (403, 429)  # not an outage's backoff
                # an exhausted limit lifts at its reset, whatever the time spent since the wait was reckoned
                reset = _limit_reset(resp) if limited else None
                retry_at = (reset + 1.0 if reset is not None else time.time() + wait) if limited else None
                return _Outcome(resp, f"{error} (gave up: {why})", attempt, waited, gave_up=True, retry_at=retry_at)
            log.warning("GitHub %s %s: %s; retry %d in %.1fs", method, url, reason or error,
                        attempt, wait)
            self._sleep(wait)
            waited += wait

    def _pace(self, kind: str, bucket: str, interval: float) -> None:
        """Wait until `interval` seconds have passed since the last call of this kind ended, and
        until its rate-limit bucket resets when the last answer said none was left."""
        last = self._last_call.get(kind)
        wait = interval - (time.monotonic() - last) if last is not None and interval > 0 else 0.0
        exhausted_until = self._exhausted_until.pop(bucket, None)
        if exhausted_until is not None:
            until_reset = exhausted_until - time.time()
            if until_reset > self.max_total_wait_s:
                log.warning("GitHub %s rate limit exhausted for %.0fs more; sending anyway (the "
                            "retry loop reports the refusal)", bucket, until_reset)
            else:
                wait = max(wait, until_reset)
        if wait > 0:
            self._sleep(wait)

    def _note_limit(self, bucket: str, resp: requests.Response | None) -> None:
        """Remember that the bucket is empty (last answer: X-RateLimit-Remaining 0) until its reset."""
        if resp is None or resp.headers.get("X-RateLimit-Remaining") != "0":
            return
        reset = resp.headers.get("X-RateLimit-Reset", "")
        if reset.isdigit():
            # +1 s: the reset instant is whole seconds and clocks differ slightly.
            self._exhausted_until[resp.headers.get("X-RateLimit-Resource") or bucket] = int(reset) + 1.0

    def _call(self, method: str, path: str, body: bytes | None = None,
              params: dict | None = None, record: Any = None,
              retry_ambiguous: bool = True, stream: bool = False, auth_path: str | None = None) -> _Outcome:
        method = method.upper()
        url = self._url(path)
        auth_url = self._url(auth_path) if auth_path else url
        if self.dry_run and method not in _SAFE_METHODS:
            self._dry_run_requests.append({"method": method, "url": url, "json": record})
            log.info("dry run (no GitHub credentials): would %s %s", method, url)
            return _Outcome(None, dry_run=True)
        # Searches and GraphQL queries (reads, though POSTed) have their own rate-limit buckets;
        # everything else shares `core`.
        bucket = "search" if url.startswith(self._url("/search/")) else "graphql" if url == self.graphql_url else "core"
        kind = bucket if bucket == "search" else "read" if method in _SAFE_METHODS or bucket == "graphql" else "write"
        interval = {"search": self.search_interval_s, "write": self.write_interval_s}.get(kind, 0.0)
        self._pace(kind, bucket, interval)
        try:
            outcome = self._send(method, url, lambda renew: self._authorization(auth_url, renew), body, params,
                                 retry_ambiguous, stream)
        except _NotInstalled as exc:
            outcome = exc.outcome
        finally:
            self._last_call[kind] = time.monotonic()
        self._note_limit(bucket, outcome.response)
        status = outcome.response.status_code if outcome.response is not None else None
        log.info("GitHub %s %s -> %s (%d attempt(s), waited %.1fs)", method, url, status,
                 outcome.attempts, outcome.waited_s)
        return outcome

    # ---- public calls ------------------------------------------------------------------

    def request(self, method: str, path: str, *, params: dict | None = None,
                json_body: Any = None, retry_ambiguous: bool = True,
                stream: bool = False, auth_path: str | None = None) -> requests.Response | None:
        """One API call with retries; the response, or None for a write in dry run.

        Raises GitHubError (with `.status`, and `.ambiguous` when a write without
        `retry_ambiguous` got no clear answer) when the final answer is not a success.
        With `stream`, a success's body is left unread for the caller to stream (and close).
        `auth_path`, the path whose repository the call is about when `path` does not say
        (GitHub's next-page links name a repository by its id, `/repositories/<id>/...`), decides
        which App installation's token it carries.
        """
        body = None if json_body is None else json.dumps(json_body).encode()
        outcome = self._call(method, path, body, params, record=json_body,
                             retry_ambiguous=retry_ambiguous, stream=stream, auth_path=auth_path)
        if outcome.dry_run:
            return None
        if not outcome.ok:
            raise outcome.failure(f"{method.upper()} {path}: {outcome.error}")
        return outcome.response

    def graphql(self, query: str, variables: dict, auth_path: str) -> dict:
        """GitHub's answer to a GraphQL query, `data` with `errors` beside it as GitHub gives them (a
        node not found is an error of its own place, not a failed query). `auth_path`: a REST path
        of the repository asked about, whose App installation's token the query carries. Raises
        GitHubError when the call fails or GitHub answers without `data` (a dry run sends nothing)."""
        resp = self.request("POST", self.graphql_url, json_body={"query": query, "variables": variables},
                            auth_path=auth_path)
        try:
            answer = resp.json() if resp is not None else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), dict):
            errors = answer.get("errors") if isinstance(answer, dict) else None
            raise GitHubError(resp.status_code if resp is not None else None, f"POST graphql: no data ({errors})")
        return answer

    def account(self) -> str | None:
        """The login GitHub names as the author of what this client writes: a token's user
        (`GET /user`), or a GitHub App's bot, `<slug>[bot]` (`GET /app`, signed with the App's
        JWT); None in dry run. Raises GitHubError when GitHub does not say (an Actions token,
        say, may not read /user)."""
        if self.dry_run:
            return None
        if self.token:
            return str(self.request("GET", "/user").json()["login"])
        outcome = self._send("GET", self._url("/app"), lambda renew: f"Bearer {self._app_jwt()}")
        if not outcome.ok:
            raise outcome.failure(f"GET /app: {outcome.error}")
        return f"{outcome.response.json()['slug']}[bot]"

    def paginate(self, path: str, params: dict | None = None, must_complete: bool = True) -> list:
        """Every item of a list endpoint, following `Link: rel="next"` up to `max_pages`.

        When more pages remain, raises GitHubError (a caller that needs the whole list must not
        mistake its first pages for all of it), or with `must_complete=False` logs it and
        returns the pages read (for lists sorted so that the first pages are what matters).
        """
        items: list = []
        for resp in self.pages(path, params):
            items.extend(resp.json())
            if not resp.links.get("next"):
                return items
        message = f"GET {path}: more than {self.max_pages} pages ({len(items)} items read)"
        if must_complete:
            raise GitHubError(None, f"{message}; raise max_pages or narrow the query")
        log.warning("%s; using those", message)
        return items

    def search_issues(self, query: str, per_page: int = 100) -> list[dict]:
        """Every issue (and pull request) matching a GitHub search query, all pages.

        The search API has its own rate limit (30 requests a minute with credentials, 10
        without): calls are spaced `search_interval_s` apart and its 403/429 answers go through
        the retry loop like any other. GitHub returns at most 1000 results of a search, so one
        that matches more is read again in creation-date ranges (`created:`) from its oldest
        match's creation (its pages come oldest first), each halved until it matches at most 1000
        (see `split_created`); one of 1000 or fewer costs its pages alone.
        A search that timed out on GitHub's side (`incomplete_results`), more than 1000 matches
        created in one second, or ranges whose counts add up to more than twice the whole's
        (GitHub not reading `created:`) raise GitHubError rather than return a partial list, as
        do the pages of a range that did not add up to its `total_count` (issues changed while
        paging) twice in a row.
        """
        if not 1 <= per_page <= 100:
            raise ValueError(f"per_page must be between 1 and 100, got {per_page}")
        now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        found: dict[int, dict] = {}
        ranges: list[Created] = [(None, None)]
        whole = None
        while ranges:
            too_many, counted = [], 0
            for created in ranges:
                items, total, oldest = self._search_range(query, created, per_page)
                counted += total
                found.update(items or {})
                too_many += [((created[0] or oldest, created[1]), total)] if items is None else []
            whole = counted if whole is None else whole
            if counted > 2 * whole:
                raise GitHubError(None, f"search {query!r}: the counts of its creation-date ranges do not add "
                                        f"up ({counted} matches in ranges of {whole}); is `created:` read?")
            ranges = [half for created, total in too_many for half in self._halves(query, created, total, now)]
        return list(found.values())

    @staticmethod
    def _halves(query: str, created: Created, total: int, now: dt.datetime) -> tuple[Created, Created]:
        halves = split_created(*created, now)
        if halves is None:
            second = _iso_second(created[0] or SEARCH_EPOCH)
            raise GitHubError(None, f"search {query!r}: {total} matches created in one second, {second}; "
                                    f"GitHub returns at most {SEARCH_MAX_RESULTS} of them, so not all can be read")
        return halves

    def _search_range(self, query: str, created: Created, per_page: int
                      ) -> tuple[dict[int, dict] | None, int, dt.datetime | None]:
        """The matches created in `created` by id, how many GitHub counts, and when the oldest was
        created (the pages come oldest first); None for the matches when there are more than it
        returns (after the first page), whose oldest then starts the ranges split from it rather
        than GitHub's launch. Pages that do not add up to the count are read once more (issues
        changed while paging), then raise."""
        q = f"{query} {created_qualifier(*created)}".rstrip()
        for attempt in (1, 2):
            items: dict[int, dict] = {}
            total = 0
            # GitHub serves at most 1000 results, so a search's pages are bounded by that, not max_pages
            for resp in self.pages("/search/issues", {"q": q, "per_page": per_page, **SEARCH_OLDEST_FIRST},
                                   -(-SEARCH_MAX_RESULTS // per_page)):
                page = resp.json()
                if page.get("incomplete_results"):
                    raise GitHubError(resp.status_code, f"search {q!r}: GitHub returned "
                                      "incomplete results (its search timed out); try again later")
                total = page.get("total_count", 0)
                if total > SEARCH_MAX_RESULTS:
                    return None, total, _created_at(page.get("items") or [{}])
                items.update((item["id"], item) for item in page.get("items", []))
            if len(items) == total:
                return items, total, None
            log.warning("search %r: read %d of %d results (issues changed while paging)%s",
                        q, len(items), total, "; searching again" if attempt == 1 else "")
        raise GitHubError(None, f"search {q!r}: read {len(items)} results but GitHub counted "
                                f"{total}; the list is not complete")

    def dispatch(self, owner_repo: str, event_type: str, client_payload: dict) -> DispatchResult:
        """Send a repository_dispatch to `owner_repo`; HTTP failures are reported, not raised."""
        body = validate_dispatch(owner_repo, event_type, client_payload)
        outcome = self._call("POST", f"/repos/{owner_repo}/dispatches", body,
                             record={"event_type": event_type, "client_payload": client_payload})
        status = outcome.response.status_code if outcome.response is not None else None
        return DispatchResult(
            repo=owner_repo,
            event_type=event_type,
            status=status,
            ok=outcome.ok,
            refused=status is not None and 400 <= status < 500 and not outcome.gave_up,
            dry_run=outcome.dry_run,
            error=outcome.error,
            attempts=outcome.attempts,
            waited_s=outcome.waited_s,
            # sent and not answered (a timeout, a dropped connection, a 5xx, each retried to the end),
            # as against a request that could not be made (a bad URL: final at once, nothing sent)
            unanswered=not outcome.ok and outcome.gave_up and (status is None or status >= 500),
        )

    def list_commits(self, owner_repo: str, sha_or_branch: str,
                     since: dt.datetime | str | None = None, per_page: int = 100) -> list[dict]:
        """Commits reachable from `sha_or_branch`, newest first, following pagination.

        Stops after `max_pages` pages (logged) so a wrong `since` cannot walk all history.
        """
        problem = repo_name_problem(owner_repo)
        if problem:
            raise ValueError(problem)
        if not 1 <= per_page <= 100:
            raise ValueError(f"per_page must be between 1 and 100, got {per_page}")
        params: dict | None = {"sha": sha_or_branch, "per_page": per_page}
        if since is not None:
            if isinstance(since, dt.datetime):
                since = since.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            params["since"] = since
        commits: list[dict] = []
        for resp in self.pages(f"/repos/{owner_repo}/commits", params):
            commits.extend(resp.json())
            if not resp.links.get("next"):
                return commits
        log.warning("list_commits %s@%s: stopped after %d pages (%d commits)",
                    owner_repo, sha_or_branch, self.max_pages, len(commits))
        return commits

    def pages(self, path: str, params: dict | None, max_pages: int | None = None):
        """Responses of a list endpoint, following `Link: rel="next"`, at most `max_pages`; every
        page carries the credentials of the first page's repository (see `request`'s `auth_path`)."""
        first = path
        for _ in range(max_pages or self.max_pages):
            resp = self.request("GET", path, params=params, auth_path=first)
            yield resp
            next_url = resp.links.get("next", {}).get("url")
            if not next_url:
                return
            path, params = next_url, None  # the next link already carries the query
