"""GitHub's Actions re-run API and commit -> pull request lookup, played by a real HTTP server.

What the autorevert relies on, with GitHub's shapes: `GET /repos/{o}/{r}/actions/runs/{id}` (the
run object of the `workflow_run` webhook example in tests/data/octokit, with our id, sha, name
and attempt), `POST .../actions/runs/{id}/rerun` and `.../rerun-failed-jobs` (201 with no body;
the run's `run_attempt` goes up by one), and `GET /repos/{o}/{r}/commits/{sha}/pulls`.
`fail(kind, *responses)` serves scripted answers first, for `rerun` (either re-run endpoint),
`run` or `pulls`; `Scripted(..., after_effect=True)` is served after the re-run took effect
(GitHub starting the run and failing to say so). Shares the server with FakeIssueTracker.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from pathlib import Path

from werkzeug import Request, Response

from tests.fake_github_issues import Scripted, json_response

EXAMPLES = Path(__file__).parent / "data" / "octokit" / "examples.json"


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
        base = re.escape(f"/repos/{repo}")
        httpserver.expect_request(re.compile(rf"^{base}/actions/runs/\d+(/rerun|/rerun-failed-jobs)?$")) \
            .respond_with_handler(self.runs_api)
        httpserver.expect_request(re.compile(rf"^{base}/commits/[0-9a-fA-F]+/pulls$"), method="GET") \
            .respond_with_handler(self.pulls_api)

    def add_run(self, run_id: int, sha: str, name: str, attempt: int = 1) -> dict:
        run = copy.deepcopy(self.template)
        run.update(id=run_id, head_sha=sha, name=name, run_attempt=attempt, status="completed",
                   conclusion="failure", head_branch="main")
        self.runs[run_id] = run
        return run

    def add_pull(self, sha: str, number: int, merged: bool = True) -> None:
        self.pulls.setdefault(sha, []).append({
            "number": number, "state": "closed" if merged else "open",
            "merged_at": "2026-11-20T10:00:00Z" if merged else None,
            "html_url": f"https://github.com/{self.repo}/pull/{number}"})

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

    def pulls_api(self, request: Request) -> Response:
        sha = request.path.split("/commits/")[1].split("/")[0]
        with self.lock:
            script = self.scripts.get("pulls")
            if script:
                return script.pop(0).response
            return json_response(200, self.pulls.get(sha, []))
