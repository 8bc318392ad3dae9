"""GitHub's issues API for one repository, played by a real HTTP server on 127.0.0.1.

What the DISABLED-issue loop relies on, with GitHub's shapes and its awkward parts:
- `GET /search/issues`: the `q` qualifiers the loop uses (repo:, is:issue, is:open/closed,
  in:title, quoted phrases, words, `created:` with GitHub's range syntax: `A..B`, `>=A`, `<=B`,
  `>A`, `<B`, `A..*`, `*..B`, each a date or a `YYYY-MM-DDTHH:MM:SSZ` time), `per_page`/`page`
  with `Link` headers, `total_count`, `incomplete_results`. As GitHub, it serves at most the first
  1,000 results of a search (a page past them is a 422) while `total_count` counts them all.
  Search reads an *index* that lags writes: with `lag=True` it shows
  issues as of the last `index()` call, as GitHub's does for seconds to minutes.
- `GET /repos/{o}/{r}/issues`: state, sort (created/updated), direction, since, pagination;
  pull requests included, as GitHub does. Always current.
- `GET/PATCH /repos/{o}/{r}/issues/{n}`, `POST /repos/{o}/{r}/issues` (201; 422 for a title over
  256 characters, as GitHub answers),
  `POST /repos/{o}/{r}/issues/{n}/comments` (pull requests' conversation comments too); the
  issue list filters by `labels` (comma-separated, all required) as GitHub's does.
- `GET /repos/{o}/{r}/collaborators/{user}/permission`: from `permissions` ({login: "write"}),
  404 for a user who is not a collaborator.
- `GET /repos/{o}/{r}/contents/{path}?ref=`: a file of `files` ({path: text}) in GitHub's
  content-file shape (base64 in 60-character lines), else 404.
- `GET /user` and `GET /app`: the account creates are authored by (`ACCOUNT`), in the shapes of
  GitHub's `private-user` and `integration` examples (tests/data/octokit-openapi); with
  `says_account=False`, 403 as GitHub answers an Actions token.
`GET .../issues/{n}/comments` lists `comments[n]`, paginated, each with the time it was made;
`GET .../issues/{n}/events` lists the issue's `closed` and `reopened` events, paginated. `clock`
is GitHub's time (now; a simulation of past days sets its own).
`fail(kind, *responses)` serves scripted answers first (a secondary rate limit, a 502); an
answer marked `after_effect=True` is served after the request took effect (GitHub committing a
create and failing to say so). Every request is logged in `requests` as (method, path, args).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
import threading
from pathlib import Path
from urllib.parse import urlencode

from werkzeug import Request, Response

CONTENTS_PATH = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/contents/(?P<path>.+)$")
PERMISSION_PATH = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/collaborators/(?P<user>[^/]+)/permission$")
ACCOUNT = "torchci-bot[bot]"  # the author of every issue and comment the API creates
EXAMPLES = json.loads((Path(__file__).parent / "data" / "octokit-openapi" / "examples.json").read_text())
# GitHub refuses a title over 256 characters, as it answers then
MAX_TITLE_CHARS = 256
TITLE_TOO_LONG = {"message": "Validation Failed", "errors": [{"resource": "Issue", "code": "custom", "field": "title",
                  "message": "title is too long (maximum is 256 characters)"}],
                  "documentation_url": "https://docs.github.com/rest/issues/issues#create-an-issue", "status": "422"}
# GitHub's search serves at most this many results of a query, and answers a page past them so
SEARCH_CAP = 1000
BEYOND_CAP = {"message": "Only the first 1000 search results are available",
              "documentation_url": "https://docs.github.com/v3/search/"}
ISSUE_PATH = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues(?:/(?P<number>\d+))?(?P<comments>/comments)?$")
EVENTS_PATH = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<number>\d+)/events$")


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _instant(text: str, end_of_day: bool) -> dt.datetime:
    """A `created:` bound: a time, or a date standing for its first (or, as an upper bound, last) second."""
    if "T" in text:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    day = dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
    return day + dt.timedelta(days=1, seconds=-1) if end_of_day else day


def created_within(qualifier: str, created_at: str) -> bool:
    """Whether an issue created at `created_at` matches `created:<qualifier>`, as GitHub reads it."""
    at = dt.datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    if ".." in qualifier:
        low, high = qualifier.split("..", 1)
        return ((low == "*" or at >= _instant(low, False)) and (high == "*" or at <= _instant(high, True)))
    for op, test in ((">=", lambda b: at >= _instant(b, False)), ("<=", lambda b: at <= _instant(b, True)),
                     (">", lambda b: at > _instant(b, True)), ("<", lambda b: at < _instant(b, False))):
        if qualifier.startswith(op):
            return test(qualifier[len(op):])
    return _instant(qualifier, False) <= at <= _instant(qualifier, True)


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def json_response(status: int, body, headers: dict | None = None) -> Response:
    return Response(json.dumps(body), status=status, headers=headers, content_type="application/json")


class Scripted:
    def __init__(self, response: Response, after_effect: bool = False):
        self.response = response
        self.after_effect = after_effect


class FakeIssueTracker:
    def __init__(self, httpserver, repo: str = "pytorch/pytorch", lag: bool = False):
        self.server = httpserver
        self.repo = repo
        self.lag = lag
        self.issues: dict[int, dict] = {}
        self.search_view: dict[int, dict] = {}
        self.comments: dict[int, list[str]] = {}
        self.commented_at: dict[int, list[str]] = {}  # when each of `comments` was made
        self.events: dict[int, list[dict]] = {}  # each issue's closes and reopens, oldest first
        self.requests: list[tuple[str, str, dict]] = []
        self.scripts: dict[str, list[Scripted]] = {}
        self.next_number = 190_000
        self.permissions: dict[str, str] = {}
        self.files: dict[str, str] = {}
        self.lock = threading.Lock()
        self.clock = now  # GitHub's clock: a simulation sets its own time
        self.says_account = True
        httpserver.expect_request(re.compile(r"^/search/issues$"), method="GET").respond_with_handler(self.search)
        httpserver.expect_request(ISSUE_PATH).respond_with_handler(self.issues_api)
        httpserver.expect_request(EVENTS_PATH, method="GET").respond_with_handler(self.events_api)
        httpserver.expect_request(PERMISSION_PATH, method="GET").respond_with_handler(self.permission)
        httpserver.expect_request(CONTENTS_PATH, method="GET").respond_with_handler(self.contents)
        httpserver.expect_request(re.compile(r"^/(user|app)$"), method="GET").respond_with_handler(self.whoami)

    # ---- test helpers ------------------------------------------------------------------

    def add(self, title: str, body: str | None = "", state: str = "open", *, user: str = "a-human",
            age: dt.timedelta = dt.timedelta(days=3), pull_request: bool = False, labels=(),
            number: int | None = None) -> dict:
        """An issue (or PR) that exists already, indexed by search, last changed `age` ago
        (numbered `number`, else the next free number)."""
        with self.lock:
            issue = self._new(title, body, user, labels, self.clock() - age, number)
            if pull_request:
                issue["pull_request"] = {"url": issue["url"].replace("/issues/", "/pulls/")}
            if state == "closed":
                issue.update(state="closed", closed_at=issue["updated_at"])
            self.search_view[issue["number"]] = dict(issue)
            return issue

    def index(self) -> None:
        """Search catches up with every write."""
        with self.lock:
            self.search_view = {n: dict(i) for n, i in self.issues.items()}

    def age(self, number: int, by: dt.timedelta) -> None:
        """Move an issue's last change `by` into the past (time passing for it)."""
        with self.lock:
            issue = self.issues[number]
            for k in ("created_at", "updated_at", "closed_at"):
                if issue.get(k):
                    issue[k] = iso(dt.datetime.fromisoformat(issue[k].replace("Z", "+00:00")) - by)

    def close(self, number: int) -> None:
        """A human closes the issue."""
        with self.lock:
            self._patch(self.issues[number], {"state": "closed"})

    def fail(self, kind: str, *responses: Response | Scripted) -> None:
        """Serve these first for `kind`: search, list, get, create, update, comment, comments, permission."""
        self.scripts.setdefault(kind, []).extend(r if isinstance(r, Scripted) else Scripted(r) for r in responses)

    def titled(self, title: str, state: str | None = None) -> list[dict]:
        return [i for i in self.issues.values() if i["title"] == title and (state is None or i["state"] == state)]

    def count(self, method: str, path_prefix: str = "") -> int:
        return sum(1 for m, p, _ in self.requests if m == method and p.startswith(path_prefix))

    # ---- the API ----------------------------------------------------------------------

    def _new(self, title, body, user, labels, at: dt.datetime, number: int | None = None) -> dict:
        n = self.next_number if number is None else number
        if number is None:
            self.next_number += 1
        issue = {
            "id": 10_000_000 + n, "number": n, "title": title, "body": body, "state": "open",
            "url": f"https://api.github.com/repos/{self.repo}/issues/{n}",
            "html_url": f"https://github.com/{self.repo}/issues/{n}",
            "user": {"login": user}, "labels": [{"name": x} for x in labels],
            "created_at": iso(at), "updated_at": iso(at), "closed_at": None, "state_reason": None,
        }
        self.issues[n] = issue
        if not self.lag:
            self.search_view[n] = dict(issue)
        return issue

    def _patch(self, issue: dict, fields: dict) -> None:
        for k in ("title", "body", "labels"):
            if k in fields:
                issue[k] = fields[k] if k != "labels" else [{"name": x} for x in fields[k]]
        if fields.get("state") in ("open", "closed") and fields["state"] != issue["state"]:
            issue["state"] = fields["state"]
            issue["closed_at"] = iso(self.clock()) if fields["state"] == "closed" else None
            issue["state_reason"] = fields.get("state_reason", "completed" if fields["state"] == "closed" else "reopened")
            self.events.setdefault(issue["number"], []).append(
                {"id": sum(map(len, self.events.values())) + 1, "event": "closed" if fields["state"] == "closed"
                 else "reopened", "created_at": iso(self.clock())})
        issue["updated_at"] = iso(self.clock())
        if not self.lag:
            self.search_view[issue["number"]] = dict(issue)

    def _scripted(self, kind: str) -> Scripted | None:
        script = self.scripts.get(kind)
        return script.pop(0) if script else None

    def _page(self, request: Request, path: str, items: list, extra: dict | None = None) -> Response:
        per_page = int(request.args.get("per_page", 30))
        page = int(request.args.get("page", 1))
        chunk = items[(page - 1) * per_page: page * per_page]
        args = {k: v for k, v in request.args.items() if k != "page"}
        headers = {}
        if page * per_page < len(items):
            headers["Link"] = f'<{self.server.url_for(path)}?{urlencode({**args, "page": page + 1})}>; rel="next"'
        body = chunk if extra is None else {**extra, "items": chunk}
        return json_response(200, body, headers)

    def search(self, request: Request) -> Response:
        with self.lock:
            self.requests.append(("GET", request.path, dict(request.args)))
            scripted = self._scripted("search")
            if scripted:
                return scripted.response
            q = request.args["q"]
            phrases = [p.lower() for p in re.findall(r'"([^"]*)"', q)]
            words = re.sub(r'"[^"]*"', " ", q).split()
            repos = [w[len("repo:"):] for w in words if w.startswith("repo:")]
            states = [w[len("is:"):] for w in words if w in ("is:open", "is:closed")]
            bare = [w.lower() for w in words if ":" not in w]
            created = [w[len("created:"):] for w in words if w.startswith("created:")]
            hits = []
            for issue in self.search_view.values():
                if any(r != self.repo for r in repos) or (states and issue["state"] not in states):
                    continue
                if not all(created_within(c, issue["created_at"]) for c in created):
                    continue
                if "is:issue" in words and "pull_request" in issue:
                    continue
                title = issue["title"].lower()
                if all(p in title for p in phrases) and all(b in title for b in bare):
                    hits.append(issue)
            hits.sort(key=lambda i: -i["number"])  # GitHub's best match: any order will do
            if request.args.get("sort") == "created":
                hits.sort(key=lambda i: i["created_at"], reverse=request.args.get("order", "desc") != "asc")
            if (int(request.args.get("page", 1)) - 1) * int(request.args.get("per_page", 30)) >= SEARCH_CAP:
                return json_response(422, BEYOND_CAP)
            return self._page(request, request.path, hits[:SEARCH_CAP],
                              {"total_count": len(hits), "incomplete_results": False})

    def permission(self, request: Request) -> Response:
        m = PERMISSION_PATH.match(request.path)
        with self.lock:
            self.requests.append(("GET", request.path, dict(request.args)))
            scripted = self._scripted("permission")
            if scripted:
                return scripted.response
            level = self.permissions.get(m["user"])
        if m["repo"] != self.repo or level is None:
            return json_response(404, {"message": f"{m['user']} is not a user", "status": "404"})
        # GitHub's example (repos/get-collaborator-permission-level), with this user
        return json_response(200, {"permission": level, "role_name": level,
                                   "user": {"login": m["user"], "type": "User", "site_admin": False}})

    def whoami(self, request: Request) -> Response:
        with self.lock:
            self.requests.append(("GET", request.path, dict(request.args)))
        if not self.says_account:
            return json_response(403, {"message": "Resource not accessible by integration"})
        if request.path == "/user":
            return json_response(200, {**EXAMPLES["private-user"], "login": ACCOUNT})
        return json_response(200, {**EXAMPLES["integration"], "slug": ACCOUNT.removesuffix("[bot]")})

    def contents(self, request: Request) -> Response:
        m = CONTENTS_PATH.match(request.path)
        with self.lock:
            self.requests.append(("GET", request.path, dict(request.args)))
            text = self.files.get(m["path"]) if m["repo"] == self.repo else None
        if text is None:
            return json_response(404, {"message": "Not Found", "status": "404"})
        data = text.encode()
        encoded = base64.b64encode(data).decode()
        # GitHub's example (repos/get-content, content-file), for this file
        return json_response(200, {
            "type": "file", "encoding": "base64", "size": len(data), "name": m["path"].rsplit("/", 1)[-1],
            "path": m["path"], "sha": hashlib.sha1(data).hexdigest(),
            "content": "\n".join(encoded[i:i + 60] for i in range(0, len(encoded), 60)) + "\n",
            "url": f"https://api.github.com/repos/{self.repo}/contents/{m['path']}?ref={request.args.get('ref', 'main')}",
        })

    def events_api(self, request: Request) -> Response:
        m = EVENTS_PATH.match(request.path)
        with self.lock:
            self.requests.append((request.method, request.path, dict(request.args)))
            if m["repo"] != self.repo or int(m["number"]) not in self.issues:
                return json_response(404, {"message": "Not Found"})
            return self._page(request, request.path, self.events.get(int(m["number"]), []))

    def issues_api(self, request: Request) -> Response:
        m = ISSUE_PATH.match(request.path)
        if m["repo"] != self.repo:
            return json_response(404, {"message": "Not Found"})
        number = int(m["number"]) if m["number"] else None
        kind = ("comments" if m["comments"] and request.method == "GET" else
                "comment" if m["comments"] else "list" if number is None and request.method == "GET" else
                "create" if number is None else "get" if request.method == "GET" else "update")
        with self.lock:
            self.requests.append((request.method, request.path, dict(request.args)))
            scripted = self._scripted(kind)
            if scripted and not scripted.after_effect:
                return scripted.response
            response = self._handle(kind, request, number)
            return scripted.response if scripted else response

    def _handle(self, kind: str, request: Request, number: int | None) -> Response:
        if kind == "list":
            state = request.args.get("state", "open")
            items = [i for i in self.issues.values() if state == "all" or i["state"] == state]
            wanted = [x for x in request.args.get("labels", "").split(",") if x]
            items = [i for i in items if all(w in {lb["name"] for lb in i["labels"]} for w in wanted)]
            since = request.args.get("since")
            if since:
                items = [i for i in items if i["updated_at"] >= since]
            key = "created_at" if request.args.get("sort", "created") == "created" else "updated_at"
            items.sort(key=lambda i: (i[key], i["number"]), reverse=request.args.get("direction", "desc") == "desc")
            return self._page(request, request.path, items)
        if kind == "create":
            body = json.loads(request.data)
            if len(body["title"]) > MAX_TITLE_CHARS:
                return json_response(422, TITLE_TOO_LONG)
            issue = self._new(body["title"], body.get("body"), ACCOUNT, body.get("labels", []), self.clock())
            return json_response(201, issue)
        issue = self.issues.get(number)
        if issue is None:
            return json_response(404, {"message": "Not Found"})
        if kind == "get":
            return json_response(200, issue)
        if kind == "comments":
            times = self.commented_at.get(number, [])
            listed = [{"id": i + 1, "body": b, "user": {"login": ACCOUNT},
                       "created_at": times[i] if i < len(times) else iso(self.clock())}
                      for i, b in enumerate(self.comments.get(number, []))]
            return self._page(request, request.path, listed)
        if kind == "update":
            self._patch(issue, json.loads(request.data))
            return json_response(200, issue)
        self.comments.setdefault(number, []).append(json.loads(request.data)["body"])
        self.commented_at.setdefault(number, []).append(iso(self.clock()))
        issue["updated_at"] = iso(self.clock())
        return json_response(201, {"id": len(self.comments[number]), "body": self.comments[number][-1]})
