"""GitHub's pull request comment, compare and Actions APIs for one repository, played by a real
HTTP server on 127.0.0.1 (the Dr. CI loop's counterpart of fake_github_issues.py, whose helpers
it shares).

- `GET /repos/{o}/{r}/issues/{n}/comments` (per_page/page with `Link` headers, oldest first, as
  GitHub lists them), `POST` (201), `GET` (404 once deleted), `PATCH` and `DELETE
  /repos/{o}/{r}/issues/comments/{id}`;
- `GET /repos/{o}/{r}/compare/{base}...{head}`: `merge_base_commit` from `compared[(base, head)]`,
  else `merge_bases[head]` (whatever the base);
- `GET /repos/{o}/{r}/actions/runs?head_sha=` and `/actions/runs/{id}/jobs`, from `runs`;
- `POST /graphql` with `nodes(ids: $ids)`: each comment by its `node_id` (`databaseId`, `body`), and
  for an id no comment has, null and GitHub's `NOT_FOUND` error naming its place, as GitHub answers
  for a deleted comment.
Answers are GitHub's own examples (tests/data/github-rest, from @octokit/openapi) with the fields a
test sets replaced.
`fail(kind, *responses)` serves scripted answers first (kinds: list, create, get, edit, delete, compare,
runs, jobs, graphql); `Scripted(..., after_effect=True)` is served after the request took effect.
`on_create` runs inside a create (a racing run's create, say). Requests are logged in `requests`.
A create or edit whose body is over `max_body_chars` (GitHub's 65,536) is refused with GitHub's 422.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from pathlib import Path
from urllib.parse import urlencode

from fake_github_issues import Scripted, iso, json_response, now
from werkzeug import Request, Response

EXAMPLES = json.loads((Path(__file__).parent / "data" / "github-rest" / "examples.json").read_text())
BOT = {**EXAMPLES["issue-comment"]["user"], "login": "torchci-bot[bot]", "type": "Bot"}
COMMENTS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<number>\d+)/comments$")
COMMENT = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)$")
COMPARE = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/compare/(?P<base>.+)\.\.\.(?P<head>[0-9a-f]+)$")
RUNS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/actions/runs$")
JOBS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/actions/runs/(?P<run>\d+)/jobs$")
GRAPHQL = re.compile(r"^/graphql$")
MAX_BODY_CHARS = 65_536


def too_long() -> Response:
    """GitHub's answer to a comment body over its limit."""
    return json_response(422, {"message": "Validation Failed", "errors": [
        {"resource": "IssueComment", "code": "custom", "field": "body",
         "message": f"body is too long (maximum is {MAX_BODY_CHARS} characters)"}],
        "documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment"})


class FakePullRequests:
    def __init__(self, httpserver, repo: str = "pytorch/pytorch"):
        self.server = httpserver
        self.repo = repo
        self.comments: dict[int, list[dict]] = {}
        self.merge_bases: dict[str, str] = {}
        self.compared: dict[tuple[str, str], str] = {}  # (base, head) -> merge base, before merge_bases
        self.runs: dict[str, list[dict]] = {}        # head sha -> workflow runs
        self.jobs: dict[int, list[dict]] = {}         # run id -> jobs
        self.requests: list[tuple[str, str, dict]] = []
        self.scripts: dict[str, list[Scripted]] = {}
        self.on_create = None
        self.next_id = 1_000_000
        self.max_body_chars = MAX_BODY_CHARS
        self.lock = threading.RLock()
        for pattern in (COMMENTS, COMMENT, COMPARE, RUNS, JOBS):
            httpserver.expect_request(pattern).respond_with_handler(self.handle)
        httpserver.expect_request(GRAPHQL, method="POST").respond_with_handler(self.handle_graphql)

    # ---- test helpers ------------------------------------------------------------------

    def add_comment(self, number: int, body: str, user: dict | None = None) -> dict:
        with self.lock:
            self.next_id += 1
            c = copy.deepcopy(EXAMPLES["issue-comment"])
            c.update(id=self.next_id, node_id=f"IC_{self.next_id}", body=body, user=user or BOT,
                     html_url=f"https://github.com/{self.repo}/pull/{number}#issuecomment-{self.next_id}",
                     issue_url=f"https://api.github.com/repos/{self.repo}/issues/{number}",
                     created_at=iso(now()), updated_at=iso(now()))
            self.comments.setdefault(number, []).append(c)
            return c

    def fail(self, kind: str, *responses) -> None:
        self.scripts.setdefault(kind, []).extend(r if isinstance(r, Scripted) else Scripted(r) for r in responses)

    def count(self, method: str, pattern: str = "") -> int:
        return sum(1 for m, p, _ in self.requests if m == method and re.search(pattern, p))

    def bodies(self, number: int) -> list[str]:
        return [c["body"] for c in self.comments.get(number, [])]

    # ---- the API -----------------------------------------------------------------------

    def _page(self, request: Request, items: list, wrap: str | None = None) -> Response:
        per_page = int(request.args.get("per_page", 30))
        page = int(request.args.get("page", 1))
        chunk = items[(page - 1) * per_page: page * per_page]
        args = {k: v for k, v in request.args.items() if k != "page"}
        headers = {}
        if page * per_page < len(items):
            headers["Link"] = f'<{self.server.url_for(request.path)}?{urlencode({**args, "page": page + 1})}>; rel="next"'
        return json_response(200, chunk if wrap is None else {"total_count": len(items), wrap: chunk}, headers)

    def _kind(self, request: Request) -> tuple[str, re.Match]:
        for kind, pattern in (("comments", COMMENTS), ("comment", COMMENT), ("compare", COMPARE),
                              ("runs", RUNS), ("jobs", JOBS)):
            m = pattern.match(request.path)
            if m:
                if kind == "comments":
                    return ("list" if request.method == "GET" else "create"), m
                if kind == "comment":
                    return {"PATCH": "edit", "GET": "get"}.get(request.method, "delete"), m
                return kind, m
        raise AssertionError(request.path)

    def handle(self, request: Request) -> Response:
        kind, m = self._kind(request)
        with self.lock:
            self.requests.append((request.method, request.path, dict(request.args)))
            if m["repo"] != self.repo:
                return json_response(404, {"message": "Not Found"})
            script = self.scripts.get(kind)
            scripted = script.pop(0) if script else None
            if scripted and not scripted.after_effect:
                return scripted.response
            response = self._answer(kind, m, request)
            return scripted.response if scripted else response

    def handle_graphql(self, request: Request) -> Response:
        with self.lock:
            asked = json.loads(request.data)
            self.requests.append((request.method, request.path, {"ids": list(asked["variables"]["ids"])}))
            script = self.scripts.get("graphql")
            if script:
                return script.pop(0).response
            assert "nodes(ids:" in asked["query"], asked["query"]
            by_node = {c["node_id"]: c for listed in self.comments.values() for c in listed}
            nodes, errors = [], []
            for i, node_id in enumerate(asked["variables"]["ids"]):
                c = by_node.get(node_id)
                nodes.append(None if c is None else {"databaseId": c["id"], "body": c["body"]})
                if c is None:
                    errors.append({"type": "NOT_FOUND", "path": ["nodes", i], "locations": [{"line": 1, "column": 30}],
                                   "message": f"Could not resolve to a node with the global id of '{node_id}'."})
            return json_response(200, {"data": {"nodes": nodes}, **({"errors": errors} if errors else {})})

    def _answer(self, kind: str, m: re.Match, request: Request) -> Response:
        if kind in ("create", "edit") and len(json.loads(request.data)["body"]) > self.max_body_chars:
            return too_long()
        if kind == "list":
            return self._page(request, sorted(self.comments.get(int(m["number"]), []), key=lambda c: c["id"]))
        if kind == "create":
            if self.on_create is not None:
                hook, self.on_create = self.on_create, None
                hook()
            return json_response(201, self.add_comment(int(m["number"]), json.loads(request.data)["body"]))
        if kind in ("edit", "delete", "get"):
            for number, listed in self.comments.items():
                for c in listed:
                    if c["id"] == int(m["id"]):
                        if kind == "get":
                            return json_response(200, c)
                        if kind == "delete":
                            listed.remove(c)
                            return Response(status=204)
                        c.update(body=json.loads(request.data)["body"], updated_at=iso(now()))
                        return json_response(200, c)
            return json_response(404, {"message": "Not Found"})
        if kind == "compare":
            base = self.compared.get((m["base"], m["head"]), self.merge_bases.get(m["head"]))
            if base is None:
                return json_response(404, {"message": "Not Found"})
            answer = copy.deepcopy(EXAMPLES["commit-comparison"])
            answer["merge_base_commit"]["sha"] = base
            return json_response(200, answer)
        if kind == "runs":
            template = EXAMPLES["workflow-run-paginated"]["workflow_runs"][0]
            runs = [{**copy.deepcopy(template), **r} for r in self.runs.get(request.args.get("head_sha", ""), [])]
            return self._page(request, runs, wrap="workflow_runs")
        template = EXAMPLES["job-paginated"]["jobs"][0]
        return self._page(request, [{**copy.deepcopy(template), **j} for j in self.jobs.get(int(m["run"]), [])],
                          wrap="jobs")
