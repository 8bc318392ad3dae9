"""GitHub's Actions REST API for one repository, played by a real HTTP server on 127.0.0.1.

Bodies are GitHub's own OpenAPI examples (`tests/data/octokit-openapi/examples.json`) with the
repository's values laid over them, so every key GitHub documents is present. Served:
- `GET /repos/{o}/{r}`; `GET .../actions/runs` (branch, event, `created=lo..hi`, newest first,
  `total_count`, `per_page`/`page` with `Link` headers; with `list_cap` set, only that many of a
  filtered list are served, as GitHub serves at most 1,000, while `total_count` counts them all); `.../actions/runs/{id}` (latest attempt),
  `.../runs/{id}/attempts/{n}`, `.../runs/{id}/attempts/{n}/jobs`, `.../runs/{id}/artifacts`;
  `.../actions/jobs/{id}`; `.../actions/artifacts/{id}/zip` and `.../actions/jobs/{id}/logs`
  (302 to a blob URL, as GitHub redirects to its storage; 410 for an expired artifact, 404 for a
  log GitHub does not have); `.../commits` (sha, since, until: in `git log`'s order, and cut by
  `since` as git cuts it) and `.../commits/{sha}`; `.../compare/{base}...{head}` (each a sha or a
  branch's name; `git log base..head`, oldest first, paged, with their merge base);
  `.../branches/{name}` (its head: the newest push's `after`, else its newest commit); `.../pulls`
  (`state`: open by default, closed or all; sorted by update, newest first) and `.../pulls/{n}`
  (the full shape, `merged` from `merged_at`); `.../installation` (the App's installation, for a
  request signed with its JWT); `.../activity` (the pushes `add_push` recorded, newest first, `ref` as
  `main` or `refs/heads/main`, `activity_type`, pages with `Link` headers; each the `activity-items`
  example, whose keys (`pushed_at`, `push_type`, `pusher`) are older than the schema's required ones
  (`timestamp`, `activity_type`, `actor`), so both are served, alike).
- `X-RateLimit-Limit/Remaining/Reset/Resource` on every answer, counting down.
`fail(pattern, *responses)` serves scripted answers first to requests whose path matches (a
secondary rate limit, a 502); `requests` logs every (path, args).

`from_world` fills it from the simulator's world, the same objects its webhooks were written from.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import random
import re
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import urlencode

import orjson
from werkzeug import Request, Response

EXAMPLES = json.loads((Path(__file__).parent / "data" / "octokit-openapi" / "examples.json").read_text())
RUNS_PATH = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)(?P<rest>/.*)?$")


def shaped(example: str, values: dict) -> dict:
    """GitHub's example object with `values` laid over it."""
    base = EXAMPLES[example]
    base = copy.deepcopy(base[0] if isinstance(base, list) else base)
    base.update(values)
    return base


def plain(obj) -> dict:
    """The simulator's payload pieces (orjson fragments inside) as plain JSON values."""
    return orjson.loads(orjson.dumps(obj))


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def reply(status: int, body, headers: dict | None = None) -> Response:
    return Response(json.dumps(body), status=status, headers=headers, content_type="application/json")


def secondary_limit(retry_after: int = 60) -> Response:
    return reply(403, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before "
                                  "you try again.",
                       "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"},
                 {"Retry-After": str(retry_after)})


class FakeActions:
    def __init__(self, server, repo: str = "pytorch/pytorch", budget: int = 15_000, default_branch: str = "main"):
        self.server = server
        self.repo = repo
        owner, name = repo.split("/")
        # the example's default branch is master; the repository played here, as pytorch/pytorch, has main
        self.repository = shaped("full-repository", {"name": name, "full_name": repo, "default_branch": default_branch})
        self.repository["owner"] = dict(self.repository["owner"], login=owner)
        self.runs: dict[int, dict[int, dict]] = {}  # run id -> attempt -> run object
        self.jobs: dict[tuple[int, int], list[dict]] = {}
        self.artifacts: dict[int, list[dict]] = {}
        self.blobs: dict[str, bytes] = {}
        self.commits: dict[str, list[dict]] = {}  # branch -> commits, newest first
        self.pulls: list[dict] = []
        self.activity: list[dict] = []  # the branches' pushes, newest first
        self.list_cap: int | None = None  # GitHub's 1,000 for a filtered run list; None: serve all
        self.requests: list[tuple[str, dict]] = []
        self.scripts: list[tuple[re.Pattern, list[Response]]] = []
        self.limit = self.remaining = budget
        self.reset = int(time.time()) + 3600
        self.lock = threading.Lock()
        self._next_artifact = 7_000_000_000
        self.authorizations: list[str | None] = []  # the Authorization header of each API request
        self.minted: list[str] = []  # installation tokens handed to a GitHub App
        self.installation_id = 7890  # the App's installation on the repository's account
        self.installation_lookups: list[str | None] = []  # the Authorization of each lookup
        server.expect_request(re.compile(r"^/repos/[^/]+/[^/]+/installation$")).respond_with_handler(self.installation)
        server.expect_request(re.compile(r"^/(repos|_blob)/.*")).respond_with_handler(self.handle)
        server.expect_request(re.compile(r"^/app/installations/\d+/access_tokens$"),
                              method="POST").respond_with_handler(self.mint)

    # ---- filling ----------------------------------------------------------------------

    def add_run(self, run: dict, jobs: list[dict]) -> None:
        full = shaped("workflow-run", run)
        self.runs.setdefault(full["id"], {})[full.get("run_attempt") or 1] = full
        self.jobs[(full["id"], full.get("run_attempt") or 1)] = [shaped("job", j) for j in jobs]

    def add_artifact(self, run_id: int, name: str, data: bytes | None, created_at: str) -> dict:
        """A run's artifact; `data=None` makes it expired (listed, but 410 on download)."""
        self._next_artifact += 1
        aid = self._next_artifact
        url = f"https://api.github.com/repos/{self.repo}/actions/artifacts/{aid}"
        art = shaped("artifact", {"id": aid, "name": name, "size_in_bytes": len(data or b""), "url": url,
                                  "archive_download_url": f"{url}/zip", "expired": False,
                                  "created_at": created_at, "updated_at": created_at})
        art["workflow_run"] = dict(art["workflow_run"], id=run_id)
        self.artifacts.setdefault(run_id, []).append(art)
        if data is not None:
            self.blobs[f"artifacts/{aid}"] = data
        return art

    def add_log(self, job_id: int, data: bytes) -> None:
        self.blobs[f"logs/{job_id}"] = data

    def add_commit(self, branch: str, sha: str, parent: str, message: str, date: str, author: str,
                   committed: str | None = None) -> None:
        """`date` is the author's; `committed` the committer's (default: the same)."""
        person = {"name": author, "email": f"{author}@users.noreply.github.com", "date": date}
        commit = shaped("commit-items", {"sha": sha, "parents": [{"sha": parent, "url": "", "html_url": ""}]})
        commit["commit"] = dict(commit["commit"], message=message, author=person,
                                committer=dict(person, name="PyTorch MergeBot", date=committed or date,
                                               email="pytorchmergebot@users.noreply.github.com"),
                                tree=dict(commit["commit"]["tree"], sha=sha[::-1]))
        self.commits.setdefault(branch, []).insert(0, commit)
        self.commits[branch].sort(key=lambda c: c["commit"]["committer"]["date"], reverse=True)

    def add_push(self, branch: str, before: str, after: str, at: str, kind: str = "push") -> dict:
        """A push GitHub's activity list gives (`kind`: push, force_push, pr_merge ...)."""
        pusher = dict(EXAMPLES["activity-items"][0]["pusher"], login="pytorchmergebot")
        item = shaped("activity-items", {"id": len(self.activity) + 1, "before": before, "after": after,
                                         "ref": f"refs/heads/{branch}", "pushed_at": at, "timestamp": at,
                                         "push_type": "normal" if kind == "push" else kind,
                                         "activity_type": kind, "pusher": pusher, "actor": pusher})
        self.activity.append(item)
        self.activity.sort(key=lambda a: a["timestamp"], reverse=True)
        return item

    def add_pull(self, pr: dict) -> None:
        self.pulls = [p for p in self.pulls if p["number"] != pr["number"]] + [shaped("pull-request-simple-items", pr)]

    def fail(self, pattern: str, *responses: Response) -> None:
        self.scripts.append((re.compile(pattern), list(responses)))

    def count(self, pattern: str) -> int:
        rx = re.compile(pattern)
        return sum(1 for p, _ in self.requests if rx.search(p))

    # ---- the API ----------------------------------------------------------------------

    def _headers(self) -> dict:
        # the hour's budget counts down; once an answer said 0, the next finds it reset
        self.remaining = self.limit - 1 if self.remaining == 0 else self.remaining - 1
        return {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
                "X-RateLimit-Reset": str(self.reset), "X-RateLimit-Resource": "core"}

    def mint(self, request: Request) -> Response:
        """An App's installation token, for a request signed with the App's JWT (not checked here)."""
        if not (request.headers.get("Authorization") or "").startswith("Bearer ey"):
            return reply(401, {"message": "A JSON web token could not be decoded"})
        token = f"ghs_fakeinstallation{len(self.minted):04d}"
        self.minted.append(token)
        expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        return reply(201, {"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")})

    def installation(self, request: Request) -> Response:
        """`GET /repos/{o}/{r}/installation`: the App's installation on the repository's account, for a
        request signed with the App's JWT (GitHub's `installation` shape, its keys that matter)."""
        self.installation_lookups.append(request.headers.get("Authorization"))
        if not (request.headers.get("Authorization") or "").startswith("Bearer ey"):
            return reply(401, {"message": "A JSON web token could not be decoded"})
        if RUNS_PATH.match(request.path)["repo"] != self.repo:
            return reply(404, {"message": "Not Found"})
        owner = self.repo.split("/")[0]
        url = self.server.url_for(f"/app/installations/{self.installation_id}/access_tokens")
        return reply(200, {"id": self.installation_id, "account": self.repository["owner"], "app_id": 1,
                           "target_type": "Organization", "repository_selection": "all", "access_tokens_url": url,
                           "html_url": f"https://github.com/organizations/{owner}/settings/installations/"
                                       f"{self.installation_id}"})

    def handle(self, request: Request) -> Response:
        with self.lock:
            self.requests.append((request.path, dict(request.args)))
            if request.path.startswith("/repos/"):
                self.authorizations.append(request.headers.get("Authorization"))
            for rx, responses in self.scripts:
                if responses and rx.search(request.path):
                    return responses.pop(0)
            if request.path.startswith("/_blob/"):
                data = self.blobs.get(request.path[len("/_blob/"):])
                return Response(data, content_type="application/zip") if data else reply(404, {"message": "Not Found"})
            m = RUNS_PATH.match(request.path)
            if m["repo"] != self.repo:
                return reply(404, {"message": "Not Found"}, self._headers())
            resp = self._route(request, m["rest"] or "")
            resp.headers.update(self._headers())
            return resp

    def _route(self, request: Request, rest: str) -> Response:
        if rest == "":
            return reply(200, self.repository)
        if rest == "/actions/runs":
            return self._list_runs(request)
        if m := re.fullmatch(r"/actions/runs/(\d+)(?:/attempts/(\d+))?", rest):
            attempts = self.runs.get(int(m[1]))
            run = attempts and attempts.get(int(m[2]) if m[2] else max(attempts))
            return reply(200, run) if run else reply(404, {"message": "Not Found"})
        if m := re.fullmatch(r"/actions/runs/(\d+)/attempts/(\d+)/jobs", rest):
            jobs = self.jobs.get((int(m[1]), int(m[2])))
            return self._page(request, rest, jobs or [], "jobs") if jobs is not None else reply(404, {"message": "Not Found"})
        if m := re.fullmatch(r"/actions/runs/(\d+)/artifacts", rest):
            return self._page(request, rest, self.artifacts.get(int(m[1]), []), "artifacts")
        if m := re.fullmatch(r"/actions/jobs/(\d+)", rest):
            job = next((j for jobs in self.jobs.values() for j in jobs if j["id"] == int(m[1])), None)
            return reply(200, job) if job else reply(404, {"message": "Not Found"})
        if m := re.fullmatch(r"/actions/artifacts/(\d+)/zip", rest):
            key = f"artifacts/{m[1]}"
            if key not in self.blobs:
                return reply(410, {"message": "Artifact has expired"})
            return Response(status=302, headers={"Location": self.server.url_for(f"/_blob/{key}")})
        if m := re.fullmatch(r"/actions/jobs/(\d+)/logs", rest):
            key = f"logs/{m[1]}"
            if key not in self.blobs:
                return reply(404, {"message": "Not Found"})
            return Response(status=302, headers={"Location": self.server.url_for(f"/_blob/{key}")})
        if rest == "/commits":
            return self._list_commits(request, rest)
        if m := re.fullmatch(r"/commits/([0-9a-f]{40})", rest):
            commit = next((c for commits in self.commits.values() for c in commits if c["sha"] == m[1]), None)
            return reply(200, commit) if commit else reply(404, {"message": "No commit found for SHA: " + m[1]})
        if m := re.fullmatch(r"/compare/(.+?)\.\.\.(.+)", rest):
            return self._compare(request, rest, *(self._commitish(x) for x in (m[1], m[2])))
        if m := re.fullmatch(r"/branches/(.+)", rest):
            head = self._head(m[1])
            if head is None:
                return reply(404, {"message": "Branch not found"})
            return reply(200, {"name": m[1], "commit": head, "protected": False,
                               "_links": {"self": f"https://api.github.com/repos/{self.repo}/branches/{m[1]}"}})
        if rest == "/activity":
            ref = request.args.get("ref")
            kind = request.args.get("activity_type")
            items = [a for a in self.activity if (ref is None or a["ref"] in (ref, f"refs/heads/{ref}"))
                     and (kind is None or a["activity_type"] == kind)]
            return self._page(request, rest, items if request.args.get("direction") != "asc" else items[::-1], None)
        if rest == "/pulls":
            state = request.args.get("state", "open")  # GitHub's default
            pulls = sorted((p for p in self.pulls if state == "all" or p["state"] == state),
                           key=lambda p: (p["updated_at"], p["number"]), reverse=True)
            return self._page(request, rest, pulls, None)
        if m := re.fullmatch(r"/pulls/(\d+)", rest):
            pull = next((p for p in self.pulls if p["number"] == int(m[1])), None)
            if pull is None:
                return reply(404, {"message": "Not Found"})
            return reply(200, shaped("pull-request", {**pull, "merged": pull.get("merged_at") is not None}))
        return reply(404, {"message": "Not Found"})

    def _commitish(self, ref: str) -> str:
        """A sha as it is; a branch's name as its head's sha (GitHub's compare takes either)."""
        head = None if re.fullmatch(r"[0-9a-f]{40}", ref) else self._head(ref)
        return head["sha"] if head else ref

    def _head(self, branch: str) -> dict | None:
        """The commit the branch points to: its newest push's, else its newest commit."""
        commits = self.commits.get(branch) or []
        pushed = next((a["after"] for a in self.activity if a["ref"] == f"refs/heads/{branch}"), None)
        return next((c for c in commits if c["sha"] == pushed), commits[0] if commits else None)

    def _page(self, request: Request, rest: str, items: list, key: str | None, total: int | None = None,
              shape: dict | None = None) -> Response:
        per_page = min(100, int(request.args.get("per_page", 30)))
        page = int(request.args.get("page", 1))
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            args = {k: v for k, v in request.args.items() if k != "page"}
            url = self.server.url_for(f"/repos/{self.repo}{rest}")
            headers["Link"] = (f'<{url}?{urlencode({**args, "page": page + 1})}>; rel="next", '
                               f'<{url}?{urlencode({**args, "page": -(-len(items) // per_page)})}>; rel="last"')
        body = chunk if key is None else {"total_count": len(items) if total is None else total, key: chunk}
        if shape is not None:  # an object of its own shape around the list
            body = dict(shape, **{key: chunk})
        return reply(200, body, headers)

    def _git_log(self, head: dict, by_sha: dict[str, dict]) -> list[dict]:
        """`git log <head>`: from the head, the newest (by committer date) of the commits whose
        children were listed comes next."""
        when = lambda c: _t(c["commit"]["committer"]["date"])  # noqa: E731
        queue, seen, out = [head], {head["sha"]}, []
        while queue:
            commit = queue.pop(max(range(len(queue)), key=lambda i: when(queue[i])))
            out.append(commit)
            for p in commit["parents"]:
                if p["sha"] in by_sha and p["sha"] not in seen:
                    seen.add(p["sha"])
                    queue.append(by_sha[p["sha"]])
        return out

    def _compare(self, request: Request, rest: str, base: str, head: str) -> Response:
        """`git log base..head` in chronological order, as GitHub's compare lists it (404 for a commit
        it does not have), the `commit-comparison` example around it."""
        by_sha = {c["sha"]: c for commits in self.commits.values() for c in commits}
        if base not in by_sha or head not in by_sha:
            return reply(404, {"message": "Not Found"})
        below = {c["sha"] for c in self._git_log(by_sha[base], by_sha)}
        above = {c["sha"] for c in self._git_log(by_sha[head], by_sha)}
        ahead = [c for c in self._git_log(by_sha[head], by_sha) if c["sha"] not in below][::-1]
        behind = len(below - above)
        status = {(True, True): "diverged", (True, False): "ahead", (False, True): "behind"}.get(
            (bool(ahead), bool(behind)), "identical")
        merge_base = next((c for c in self._git_log(by_sha[head], by_sha) if c["sha"] in below), None)
        shape = shaped("commit-comparison", {"status": status, "ahead_by": len(ahead), "behind_by": behind,
                                             "total_commits": len(ahead), "files": []})
        if merge_base is not None:  # else the example's
            shape["merge_base_commit"] = merge_base
        return self._page(request, rest, ahead, "commits", shape=shape)

    def _list_runs(self, request: Request) -> Response:
        args = request.args
        lo, hi = None, None
        if "created" in args:
            lo, hi = (_t(x) for x in args["created"].split(".."))
        out = []
        for attempts in self.runs.values():
            first, latest = attempts[min(attempts)], attempts[max(attempts)]
            created = _t(first["created_at"])
            if lo is not None and not lo <= created <= hi:
                continue
            if "branch" in args and latest["head_branch"] != args["branch"]:
                continue
            if "event" in args and latest["event"] != args["event"]:
                continue
            out.append(latest)
        out.sort(key=lambda r: r["id"], reverse=True)
        if self.list_cap is not None and ({"created", "branch", "event"} & set(args)):
            return self._page(request, "/actions/runs", out[:self.list_cap], "workflow_runs", total=len(out))
        return self._page(request, "/actions/runs", out, "workflow_runs")

    def _list_commits(self, request: Request, rest: str) -> Response:
        """`git log <sha>`'s order: from the branch's head, the newest (by committer date) of the
        commits whose children were listed comes next. `since` is git's `--since`: a commit dated
        before it is left out, and git goes no further down that line, so the commits below it
        are left out too, even those dated after `since` (unless another line reaches them)."""
        branch = request.args.get("sha", "main")
        commits, head = self.commits.get(branch, []), self._head(branch)
        by_sha = {c["sha"]: c for c in commits}
        since, until = request.args.get("since"), request.args.get("until")
        when = lambda c: _t(c["commit"]["committer"]["date"])  # noqa: E731
        queue, seen, keep = [head] if head else [], {head["sha"]} if head else set(), []
        while queue:
            commit = queue.pop(max(range(len(queue)), key=lambda i: when(queue[i])))
            if since and when(commit) < _t(since):
                continue
            if not until or when(commit) <= _t(until):
                keep.append(commit)
            for p in commit["parents"]:
                if p["sha"] in by_sha and p["sha"] not in seen:
                    seen.add(p["sha"])
                    queue.append(by_sha[p["sha"]])
        return self._page(request, rest, keep, None)


# ---- the simulator's world through the REST API ---------------------------------------------

def report_zip(job, seed: int) -> bytes | None:
    """The job's JUnit reports as PyTorch uploads them: `test/test-reports/python-pytest/<module>/*.xml`
    zipped (what `generate_day` writes as bare files for the same job, byte for byte)."""
    from torchci_assets.simulate.junit import job_cases, render_xml

    cases = job_cases(job, seed)
    if not cases or job.cfg.upload != "xml":
        return None
    rng = random.Random(f"{seed}|upload|{job.id}")
    rng.random()  # the draw that chooses gzip for the bare files
    buf = io.BytesIO()
    t = job.started + 5 * 60_000
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, module, cs in cases:
            data = render_xml(path, cs, job, job.cfg.dialect, t)
            t += int(sum(c.time for c in cs) * 1000)
            zf.writestr(f"test/test-reports/python-pytest/{module}/{module}-{rng.getrandbits(64):016x}.xml", data)
    return buf.getvalue()


def from_world(api: FakeActions, world, days: list[dt.date], reports: bool = True, logs: bool = True) -> None:
    """Every run, job, report, failed job's log, main commit (and its push) and pull request of the activities
    triggered on `days` (a run created late on the last day completes after it, as on GitHub)."""
    from torchci_assets.simulate.catalog import WORKFLOW_FILES
    from torchci_assets.simulate.logs import render_log
    from torchci_assets.simulate.model import iso_s
    from torchci_assets.simulate.payloads import workflow_job_payload, workflow_run_payload

    for day in days:
        for act in world.activities(day):
            by_run: dict[int, list] = {}
            for job in act.jobs:
                by_run.setdefault(id(job.run), []).append(job)
            for run in act.runs:
                obj = plain(workflow_run_payload(run, "completed", WORKFLOW_FILES[run.workflow])["workflow_run"])
                jobs = by_run.get(id(run), [])
                api.add_run(obj, [plain(workflow_job_payload(j, "completed", "")["workflow_job"]) for j in jobs])
                for job in jobs:
                    _job_files(api, world, job, reports, logs, render_log, iso_s)
            for commit, _did, _recv in act.pushes:
                api.add_commit("main", commit.sha, commit.parent, commit.message, iso_s(commit.time), commit.author)
                api.add_push("main", commit.parent, commit.sha, iso_s(commit.time))
            for d in act.deliveries:
                if d.event == "pull_request":
                    api.add_pull(plain(d.obj["pull_request"]))


def _job_files(api: FakeActions, world, job, reports: bool, logs: bool, render_log, iso_s) -> None:
    run = job.run
    if reports and job.kind == "test" and job.conclusion != "skipped":
        data = report_zip(job, world.seed)
        if data is not None:
            name = (f"test-reports-runattempt{run.attempt}-test-{job.cfg.test_config}-{job.shard}-"
                    f"{job.cfg.num_shards}-{job.labels[0]}_{job.id}.zip")  # as upload-test-artifacts names it
            api.add_artifact(run.run_id, name, data, iso_s(job.completed))
    if logs:
        rendered = render_log(job, world.seed)
        if rendered is not None:
            api.add_log(job.id, rendered[0])
