"""The GitHub API the relay writes to, played by a real HTTP server on 127.0.0.1.

- `POST /repos/{o}/{r}/dispatches`: 204, or the replies scripted per repository.
- `POST /repos/{o}/{r}/check-runs`: 201 with the created check run (ids from 1000, one check
  suite per head sha, as GitHub groups one App's check runs of a commit); 422, creating nothing,
  for a `completed` one without a conclusion or with one GitHub does not take, as GitHub answers;
  403 to every one with `refuse_check_runs`.
- `GET /repos/{o}/{r}/commits/{sha}/check-runs` (`check_name`, `filter`) and
  `GET /repos/{o}/{r}/check-suites/{id}/check-runs` (`per_page`, `page`): GitHub's
  `{total_count, check_runs}` shape.
- `POST /repos/{o}/{r}/actions/runs/{id}/rerun-failed-jobs` and `.../rerun` (every job): 201 (a
  new attempt starts), or 403 "This workflow is already running" for the runs in `running`.
- `GET /repos/{o}/{r}/actions/runs/{id}`: the run's `run_attempt` and `run_started_at` (its
  latest attempt's start; the first attempt started on 2026-01-01), `status`.
Every request is logged in `requests` as (method, path, json body or None). `crash_after`
makes a write take effect and then drop the connection, as GitHub committing a write whose
answer is lost.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import threading

from werkzeug import Request, Response

DISPATCH = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/dispatches$")
CHECK_RUNS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/check-runs$")
FOR_REF = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/commits/(?P<sha>[0-9a-f]{40})/check-runs$")
IN_SUITE = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/check-suites/(?P<suite>\d+)/check-runs$")
RERUN = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/actions/runs/(?P<run>\d+)/(?P<what>rerun-failed-jobs|rerun)$")
RUN = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/actions/runs/(?P<run>\d+)$")
FIRST_ATTEMPT = "2026-01-01T00:00:00Z"
# The conclusions GitHub lets a check run be created with (`stale` is GitHub's own to set).
CONCLUSIONS = {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"}


def reply(status: int, body=None, headers: dict | None = None) -> Response:
    return Response(json.dumps(body) if body is not None else "", status=status, headers=headers,
                    content_type="application/json")


class FakeRelayGitHub:
    def __init__(self, httpserver, **dispatch_replies):
        self.dispatch_replies = {repo: list(r) for repo, r in dispatch_replies.items()}
        self.requests: list[tuple[str, str, dict | None]] = []
        self.check_runs: list[dict] = []
        self.suites: dict[str, int] = {}
        self.running: set[tuple[str, int]] = set()
        self.started: dict[tuple[str, int], list[str]] = {}  # the re-runs' starts, per run
        self.crash_after: set[str] = set()  # "check-runs", "rerun"
        self.refuse_check_runs = False  # 403 to every check-run create: the App without Checks: write
        self.ids = itertools.count(1000)
        self.lock = threading.Lock()
        httpserver.expect_request(re.compile(r"^/repos/.*")).respond_with_handler(self)

    # ---- what tests read --------------------------------------------------------------

    def dispatches(self) -> list[tuple[str, dict]]:
        return [(p[len("/repos/"):-len("/dispatches")], b) for m, p, b in self.requests
                if m == "POST" and DISPATCH.match(p)]

    def reruns(self, what: str | None = None) -> list[tuple[str, int]]:
        """(repository, run) of each re-run asked; of one endpoint only with `what`."""
        return [(m_.group("repo"), int(m_.group("run"))) for m, p, _ in self.requests
                if m == "POST" and (m_ := RERUN.match(p)) and what in (None, m_.group("what"))]

    def check_run_names(self, sha: str | None = None) -> list[tuple[str, str, str | None]]:
        return [(c["name"], c["status"], c.get("conclusion")) for c in self.check_runs
                if sha is None or c["head_sha"] == sha]

    def add_check_run(self, name: str, head_sha: str, external_id: str, status: str = "completed",
                      conclusion: str | None = "failure") -> dict:
        """A check run that exists already (created by an earlier relay run)."""
        with self.lock:
            return self._create({"name": name, "head_sha": head_sha, "external_id": external_id,
                                 "status": status, "conclusion": conclusion})

    # ---- the API -----------------------------------------------------------------------

    def __call__(self, request: Request) -> Response:
        body = json.loads(request.data) if request.data else None
        with self.lock:
            self.requests.append((request.method, request.path, body))
            return self._route(request, body)

    def _route(self, request: Request, body) -> Response:
        path, method = request.path, request.method
        if method == "POST" and (m := DISPATCH.match(path)):
            script = self.dispatch_replies.get(m.group("repo")) or [reply(204)]
            n = sum(1 for repo, _ in self.dispatches() if repo == m.group("repo"))
            return script[min(n, len(script)) - 1]
        if method == "POST" and CHECK_RUNS.match(path):
            if self.refuse_check_runs:
                return reply(403, {"message": "Resource not accessible by integration"})
            if body.get("status") == "completed" and body.get("conclusion") not in CONCLUSIONS:
                return reply(422, {"message": "Invalid request.\n\nFor 'properties/conclusion', "
                                              f"{json.dumps(body.get('conclusion'))} is not a member of enum.",
                                   "documentation_url": "https://docs.github.com/rest/checks/runs#create-a-check-run",
                                   "status": "422"})
            created = self._create(body)
            if "check-runs" in self.crash_after:
                self.crash_after.discard("check-runs")
                return reply(502, {"message": "Server Error"})  # committed, answer lost
            return reply(201, created)
        if method == "GET" and (m := FOR_REF.match(path)):
            name = request.args.get("check_name")
            runs = [c for c in self.check_runs if c["head_sha"] == m.group("sha") and (not name or c["name"] == name)]
            return reply(200, {"total_count": len(runs), "check_runs": runs})
        if method == "GET" and (m := IN_SUITE.match(path)):
            runs = [c for c in self.check_runs if c["check_suite"]["id"] == int(m.group("suite"))]
            per_page, page = int(request.args.get("per_page", 30)), int(request.args.get("page", 1))
            return reply(200, {"total_count": len(runs), "check_runs": runs[(page - 1) * per_page:page * per_page]})
        if method == "POST" and (m := RERUN.match(path)):
            key = (m.group("repo"), int(m.group("run")))
            if key in self.running:
                return reply(403, {"message": "This workflow is already running"})
            self.running.add(key)
            self.started.setdefault(key, []).append(
                dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            if "rerun" in self.crash_after:
                self.crash_after.discard("rerun")
                return reply(502, {"message": "Server Error"})
            return reply(201, {})
        if method == "GET" and (m := RUN.match(path)):
            key = (m.group("repo"), int(m.group("run")))
            starts = [FIRST_ATTEMPT, *self.started.get(key, [])]
            return reply(200, {"id": key[1], "run_attempt": len(starts), "run_started_at": starts[-1],
                               "status": "in_progress" if key in self.running else "completed"})
        return reply(404, {"message": "Not Found"})

    def _create(self, body: dict) -> dict:
        suite = self.suites.setdefault(body["head_sha"], 5000 + len(self.suites))
        created = {"id": next(self.ids), "name": body["name"], "head_sha": body["head_sha"],
                   "status": body.get("status", "queued"), "conclusion": body.get("conclusion"),
                   "external_id": body.get("external_id"), "details_url": body.get("details_url"),
                   "output": body.get("output"), "check_suite": {"id": suite}}
        self.check_runs.append(created)
        return created


class LatestFilterGitHub(FakeRelayGitHub):
    """As GitHub lists check runs: `filter` (default `latest`) keeps the newest check run of each name
    (here the one created last), `all` keeps every one."""

    def _route(self, request: Request, body) -> Response:
        suite = IN_SUITE.match(request.path) if request.method == "GET" else None
        ref = FOR_REF.match(request.path) if request.method == "GET" else None
        if not (suite or ref) or request.args.get("filter", "latest") != "latest":
            return super()._route(request, body)
        name = request.args.get("check_name")
        runs = [c for c in self.check_runs if (c["check_suite"]["id"] == int(suite.group("suite")) if suite
                                               else c["head_sha"] == ref.group("sha") and name in (None, c["name"]))]
        runs = list({c["name"]: c for c in runs}.values())  # created in order: the last of a name wins
        per_page, page = int(request.args.get("per_page", 30)), int(request.args.get("page", 1))
        return reply(200, {"total_count": len(runs), "check_runs": runs[(page - 1) * per_page:page * per_page]})
