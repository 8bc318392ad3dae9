"""GitHub's Actions re-run API and commit -> pull request lookup, played by a real HTTP server.

What the autorevert relies on, with GitHub's shapes: `GET /repos/{o}/{r}/actions/runs/{id}` (the
run object of the `workflow_run` webhook example in tests/data/octokit, with our id, sha, name
and attempt), `POST .../actions/runs/{id}/rerun` and `.../rerun-failed-jobs` (201 with no body;
the run's `run_attempt` goes up by one), `GET /repos/{o}/{r}/commits/{sha}/pulls`, and to find a
culprit's pull request from its message `GET /repos/{o}/{r}/commits/{sha}` (the `commit-items`
example of tests/data/octokit-openapi, with our sha and message: GitHub knows every main commit)
and `GET /repos/{o}/{r}/pulls/{n}` (its `pull-request-simple-items` example with our number,
state, merge time, labels and base branch; 404 for a number never added); the lookup lists the
same shape. Upstream's last resort, `GET /search/issues?q=<sha> repo:{o}/{r} is:pr is:closed`,
finds a pull request by any commit sha it was added with (GitHub's search indexes a pull
request's commits), as issue-shaped items, `is:open`/`is:closed` filtering on its state.
`fail(kind, *responses)` serves scripted answers first, for `rerun` (either re-run endpoint),
`run`, `pulls`, `commit`, `pull` or `search`; `Scripted(..., after_effect=True)` is served after the re-run took
effect (GitHub starting the run and failing to say so). Shares the server with FakeIssueTracker:
create this one first, so that its search for pull requests (`is:pr`) is matched before the
tracker's search, which answers every other query.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from pathlib import Path
from urllib.parse import parse_qs

from pytest_httpserver.httpserver import QueryMatcher
from werkzeug import Request, Response

from tests.fake_github_issues import Scripted, json_response

EXAMPLES = Path(__file__).parent / "data" / "octokit" / "examples.json"
REST_EXAMPLES = Path(__file__).parent / "data" / "octokit-openapi" / "examples.json"


class PullRequestSearch(QueryMatcher):
    """Matches searches for pull requests only (`is:pr` in `q`)."""

    def get_comparing_values(self, request_query_string: bytes) -> tuple[bool, bool]:
        q = parse_qs(request_query_string.decode()).get("q", [""])[0]
        return "is:pr" in q.split(), True


def _run_template() -> dict:
    examples = json.loads(EXAMPLES.read_text())["api.github.com"]["workflow_run"]
    return next(e["workflow_run"] for e in examples if e.get("workflow_run", {}).get("run_attempt"))


class FakeActions:
    def __init__(self, httpserver, repo: str = "pytorch/pytorch"):
        self.repo = repo
        self.runs: dict[int, dict] = {}
        self.pulls: dict[str, list[dict]] = {}
        self.reruns: list[tuple[int, str]] = []
        self.scripts: dict[str, list[Scripted]] = {}
        self.lock = threading.Lock()
        self.template = _run_template()
        rest = json.loads(REST_EXAMPLES.read_text())
        self.commit_template, self.pull_template = rest["commit-items"][0], rest["pull-request-simple-items"][0]
        self.messages: dict[str, str] = {}
        self.numbered: dict[int, dict] = {}
        self.bases: dict[int, str] = {}
        self.indexed: dict[str, list[int]] = {}  # sha -> pull requests search finds by it
        self.searches: list[str] = []
        base = re.escape(f"/repos/{repo}")
        httpserver.expect_request(re.compile(rf"^{base}/actions/runs/\d+(/rerun|/rerun-failed-jobs)?$")) \
            .respond_with_handler(self.runs_api)
        httpserver.expect_request(re.compile(rf"^{base}/commits/[0-9a-fA-F]+/pulls$"), method="GET") \
            .respond_with_handler(self.pulls_api)
        httpserver.expect_request(re.compile(rf"^{base}/commits/[0-9a-fA-F]+$"), method="GET") \
            .respond_with_handler(self.commit_api)
        httpserver.expect_request(re.compile(rf"^{base}/pulls/\d+$"), method="GET") \
            .respond_with_handler(self.pull_api)
        httpserver.expect_request("/search/issues", method="GET", query_string=PullRequestSearch()) \
            .respond_with_handler(self.search_api)

    def add_run(self, run_id: int, sha: str, name: str, attempt: int = 1) -> dict:
        run = copy.deepcopy(self.template)
        run.update(id=run_id, head_sha=sha, name=name, run_attempt=attempt, status="completed",
                   conclusion="failure", head_branch="main")
        self.runs[run_id] = run
        return run

    def add_pull(self, sha: str | None, number: int, merged: bool = True, labels=(), base: str = "main",
                 listed: bool = True, merged_at_unset: bool = False) -> dict:
        """Pull request `number` into `base`, merged or open; search finds it by `sha`, and GitHub's
        lookup lists it for `sha` unless not `listed` (None: for no commit, only
        `GET .../pulls/{number}` and a commit message find it). `merged_at_unset`: closed with no
        `merged_at`, as GitHub shows a pull request PyTorch's merge bot landed by cherry-pick."""
        pull = {"number": number, "state": "closed" if merged else "open",
                "merged_at": "2026-11-20T10:00:00Z" if merged and not merged_at_unset else None,
                "html_url": f"https://github.com/{self.repo}/pull/{number}",
                "labels": [{"name": x} for x in labels]}
        self.numbered[number] = pull
        self.bases[number] = base
        if sha is not None:
            self.indexed.setdefault(sha, []).append(number)
            if listed:
                self.pulls.setdefault(sha, []).append(pull)
        return pull

    def set_message(self, sha: str, message: str) -> None:
        self.messages[sha] = message

    def fail(self, kind: str, *responses: Response | Scripted) -> None:
        self.scripts.setdefault(kind, []).extend(r if isinstance(r, Scripted) else Scripted(r) for r in responses)

    def attempt(self, run_id: int) -> int:
        return self.runs[run_id]["run_attempt"]

    def runs_api(self, request: Request) -> Response:
        run_id = int(request.path.split("/actions/runs/")[1].split("/")[0])
        mode = request.path.rsplit("/", 1)[-1] if request.method == "POST" else None
        with self.lock:
            script = self.scripts.get("rerun" if mode else "run")
            scripted = script.pop(0) if script else None
            if scripted and not scripted.after_effect:
                return scripted.response
            run = self.runs.get(run_id)
            if run is None:
                return json_response(404, {"message": "Not Found"})
            if mode is None:
                return scripted.response if scripted else json_response(200, run)
            run.update(run_attempt=run["run_attempt"] + 1, status="queued", conclusion=None)
            self.reruns.append((run_id, mode))
            return scripted.response if scripted else Response("", status=201)

    def commit_api(self, request: Request) -> Response:
        sha = request.path.rsplit("/", 1)[-1]
        with self.lock:
            script = self.scripts.get("commit")
            if script:
                return script.pop(0).response
            commit = copy.deepcopy(self.commit_template)
            commit["commit"]["message"] = self.messages.get(sha, commit["commit"]["message"])
        commit.update(sha=sha, url=f"https://api.github.com/repos/{self.repo}/commits/{sha}",
                      html_url=f"https://github.com/{self.repo}/commit/{sha}")
        return json_response(200, commit)

    def pull_api(self, request: Request) -> Response:
        number = int(request.path.rsplit("/", 1)[-1])
        with self.lock:
            script = self.scripts.get("pull")
            if script:
                return script.pop(0).response
            pull = self.numbered.get(number)
            if pull is None:
                return json_response(404, {"message": "Not Found"})
            return json_response(200, self._pull_body(pull))

    def _pull_body(self, pull: dict) -> dict:
        body = {**copy.deepcopy(self.pull_template), **pull}
        body["base"]["ref"] = body["base"]["label"] = self.bases[pull["number"]]
        return body

    def pulls_api(self, request: Request) -> Response:
        sha = request.path.split("/commits/")[1].split("/")[0]
        with self.lock:
            script = self.scripts.get("pulls")
            if script:
                return script.pop(0).response
            return json_response(200, [self._pull_body(p) for p in self.pulls.get(sha, [])])

    def search_api(self, request: Request) -> Response:
        """A search for pull requests: by a commit sha among the words, `repo:` and state."""
        q = request.args["q"]
        words = q.split()
        with self.lock:
            self.searches.append(q)
            script = self.scripts.get("search")
            if script:
                return script.pop(0).response
            states = [w[len("is:"):] for w in words if w in ("is:open", "is:closed")]
            wrong_repo = any(w.startswith("repo:") and w != f"repo:{self.repo}" for w in words)
            numbers = [] if wrong_repo else sorted({n for w in words for n in self.indexed.get(w, [])}, reverse=True)
            pulls = [self.numbered[n] for n in numbers]
            items = [{"id": 10_000_000 + p["number"], "number": p["number"], "title": f"pull request {p['number']}",
                      "state": p["state"], "html_url": p["html_url"], "labels": p["labels"],
                      "pull_request": {"url": f"https://api.github.com/repos/{self.repo}/pulls/{p['number']}",
                                       "merged_at": p["merged_at"]}}
                     for p in pulls if not states or p["state"] in states]
        return json_response(200, {"total_count": len(items), "incomplete_results": False, "items": items})
