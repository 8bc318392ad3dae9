"""GitHub webhook payloads shaped like the real ones (keys as in @octokit/webhooks-examples).

Most of a payload's bytes are the repository, organization, sender and installation
objects, which never change for pytorch/pytorch; they are serialized once and spliced in
as `orjson.Fragment`s so a day of 200,000 deliveries costs little more than its jobs.
"""

from __future__ import annotations

import base64
from functools import lru_cache

import orjson

from .model import Job, RunAttempt, iso_ms, iso_s

OWNER, REPO = "pytorch", "pytorch"
FULL_NAME = f"{OWNER}/{REPO}"
API = f"https://api.github.com/repos/{FULL_NAME}"
HTML = f"https://github.com/{FULL_NAME}"
REPO_ID, ORG_ID = 65600975, 21003710
REPO_CREATED = "2016-08-13T05:26:41Z"
ZERO_SHA = "0" * 40

# Users: the bots that act on main, plus fictional contributors (ids are stable per login).
MERGEBOT = "pytorchmergebot"
BOT_IDS = {"pytorchmergebot": 97764156, "pytorch-bot[bot]": 54816060, "facebook-github-bot": 6422482}


def _node(kind: str, ident: int) -> str:
    return base64.b64encode(f"0{len(kind)}:{kind}{ident}".encode()).decode().rstrip("=")


def user_id(login: str) -> int:
    if login in BOT_IDS:
        return BOT_IDS[login]
    return 1_000_000 + int.from_bytes(login.encode()[:6].ljust(6, b"\0"), "big") % 150_000_000


def user(login: str) -> dict:
    uid = user_id(login)
    url = f"https://api.github.com/users/{login}"
    return {
        "login": login, "id": uid, "node_id": _node("User", uid),
        "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4", "gravatar_id": "",
        "url": url, "html_url": f"https://github.com/{login}",
        "followers_url": f"{url}/followers", "following_url": f"{url}/following{{/other_user}}",
        "gists_url": f"{url}/gists{{/gist_id}}", "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{url}/subscriptions", "organizations_url": f"{url}/orgs",
        "repos_url": f"{url}/repos", "events_url": f"{url}/events{{/privacy}}",
        "received_events_url": f"{url}/received_events",
        "type": "Bot" if login.endswith("[bot]") else "User", "user_view_type": "public",
        "site_admin": False,
    }


def _owner() -> dict:
    o = user(OWNER)
    o.update(id=ORG_ID, node_id=_node("Organization", ORG_ID), type="Organization",
             avatar_url=f"https://avatars.githubusercontent.com/u/{ORG_ID}?v=4")
    return o


def _repo_urls() -> dict:
    return {
        "html_url": HTML, "description": "Tensors and Dynamic neural networks in Python with strong GPU acceleration",
        "fork": False, "url": API, "forks_url": f"{API}/forks", "keys_url": f"{API}/keys{{/key_id}}",
        "collaborators_url": f"{API}/collaborators{{/collaborator}}", "teams_url": f"{API}/teams",
        "hooks_url": f"{API}/hooks", "issue_events_url": f"{API}/issues/events{{/number}}",
        "events_url": f"{API}/events", "assignees_url": f"{API}/assignees{{/user}}",
        "branches_url": f"{API}/branches{{/branch}}", "tags_url": f"{API}/tags",
        "blobs_url": f"{API}/git/blobs{{/sha}}", "git_tags_url": f"{API}/git/tags{{/sha}}",
        "git_refs_url": f"{API}/git/refs{{/sha}}", "trees_url": f"{API}/git/trees{{/sha}}",
        "statuses_url": f"{API}/statuses/{{sha}}", "languages_url": f"{API}/languages",
        "stargazers_url": f"{API}/stargazers", "contributors_url": f"{API}/contributors",
        "subscribers_url": f"{API}/subscribers", "subscription_url": f"{API}/subscription",
        "commits_url": f"{API}/commits{{/sha}}", "git_commits_url": f"{API}/git/commits{{/sha}}",
        "comments_url": f"{API}/comments{{/number}}", "issue_comment_url": f"{API}/issues/comments{{/number}}",
        "contents_url": f"{API}/contents/{{+path}}", "compare_url": f"{API}/compare/{{base}}...{{head}}",
        "merges_url": f"{API}/merges", "archive_url": f"{API}/{{archive_format}}{{/ref}}",
        "downloads_url": f"{API}/downloads", "issues_url": f"{API}/issues{{/number}}",
        "pulls_url": f"{API}/pulls{{/number}}", "milestones_url": f"{API}/milestones{{/number}}",
        "notifications_url": f"{API}/notifications{{?since,all,participating}}",
        "labels_url": f"{API}/labels{{/name}}", "releases_url": f"{API}/releases{{/id}}",
        "deployments_url": f"{API}/deployments",
    }


def _repository(push: bool) -> dict:
    r = {"id": REPO_ID, "node_id": "MDEwOlJlcG9zaXRvcnk2NTYwMDk3NQ==", "name": REPO,
         "full_name": FULL_NAME, "private": False, "owner": _owner()}
    r.update(_repo_urls())
    r.update({
        "created_at": 1471065601 if push else REPO_CREATED, "updated_at": "2026-08-20T04:12:55Z",
        "pushed_at": 1787198400 if push else "2026-08-20T04:11:02Z",
        "git_url": f"git://github.com/{FULL_NAME}.git", "ssh_url": f"git@github.com:{FULL_NAME}.git",
        "clone_url": f"{HTML}.git", "svn_url": HTML, "homepage": "https://pytorch.org",
        "size": 1093384, "stargazers_count": 94215, "watchers_count": 94215, "language": "Python",
        "has_issues": True, "has_projects": True, "has_downloads": True, "has_wiki": True,
        "has_pages": False, "has_discussions": False, "forks_count": 25317, "mirror_url": None,
        "archived": False, "disabled": False, "open_issues_count": 17823,
        "license": {"key": "other", "name": "Other", "spdx_id": "NOASSERTION", "url": None,
                    "node_id": "MDc6TGljZW5zZTA="},
        "allow_forking": True, "forks": 25317, "open_issues": 17823, "watchers": 94215,
        "default_branch": "main",
    })
    if push:
        r.update({"stargazers": 94215, "master_branch": "main", "organization": OWNER})
    r.update({
        "is_template": False,
        "topics": ["autograd", "deep-learning", "gpu", "machine-learning", "neural-network",
                   "numpy", "python", "tensor"],
        "visibility": "public", "web_commit_signoff_required": False, "custom_properties": {},
    })
    return r


def _minimal_repository() -> dict:
    r = {"id": REPO_ID, "node_id": "MDEwOlJlcG9zaXRvcnk2NTYwMDk3NQ==", "name": REPO,
         "full_name": FULL_NAME, "private": False, "owner": _owner()}
    r.update(_repo_urls())
    return r


def _organization() -> dict:
    base = f"https://api.github.com/orgs/{OWNER}"
    return {
        "login": OWNER, "id": ORG_ID, "node_id": _node("Organization", ORG_ID), "url": base,
        "repos_url": f"{base}/repos", "events_url": f"{base}/events", "hooks_url": f"{base}/hooks",
        "issues_url": f"{base}/issues", "members_url": f"{base}/members{{/member}}",
        "public_members_url": f"{base}/public_members{{/member}}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{ORG_ID}?v=4", "description": "",
    }


REPOSITORY = orjson.Fragment(orjson.dumps(_repository(push=False)))
PUSH_REPOSITORY = orjson.Fragment(orjson.dumps(_repository(push=True)))
MIN_REPOSITORY = orjson.Fragment(orjson.dumps(_minimal_repository()))
ORGANIZATION = orjson.Fragment(orjson.dumps(_organization()))
INSTALLATION = orjson.Fragment(orjson.dumps(
    {"id": 12436985, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMTI0MzY5ODU="}))


@lru_cache(maxsize=4096)
def sender(login: str) -> orjson.Fragment:
    return orjson.Fragment(orjson.dumps(user(login)))


def envelope(event: str, delivery_id: str, received_ms: int, payload: dict) -> bytes:
    return orjson.dumps({"event": event, "delivery_id": delivery_id,
                         "received_at": iso_ms(received_ms), "payload": payload}) + b"\n"


# ----------------------------------------------------------------------------- workflow_job

_SETUP = ("Set up job", "Setup SSH (Click me for login details)", "Checkout PyTorch", "Setup {os}",
          "Login to ECR", "Calculate docker image", "Pull docker image", "Check if in a container runner")
TEST_STEPS = _SETUP + (
    "Install nvidia driver, nvidia-docker runtime, set GPU_FLAG", "Download build artifacts",
    "Parse ref", "Get workflow job id", "Check for keep-going label and re-enabled test issues",
    "Test", "Upload test artifacts", "Upload test statistics", "Teardown {os}",
    "Post Checkout PyTorch", "Complete job")
BUILD_STEPS = _SETUP + ("Parse ref", "Build", "Archive artifacts into zip",
                        "Store PyTorch Build Artifacts on S3", "Upload sccache stats", "Teardown {os}",
                        "Post Checkout PyTorch", "Complete job")
SHORT_STEPS = ("Set up job", "Checkout PyTorch", "Run {what}", "Post Checkout PyTorch", "Complete job")
_ALWAYS = {"Upload test artifacts", "Upload test statistics", "Teardown {os}", "Post Checkout PyTorch",
           "Complete job", "Upload sccache stats"}
_MAIN = {"Test", "Build", "Run {what}"}
_OS = {"linux": "Linux", "win": "Windows", "mac": "macOS", "rocm": "Linux", "xpu": "XPU"}


def _step_names(job: Job) -> tuple[str, ...]:
    if job.kind == "test":
        return TEST_STEPS
    if job.kind == "build":
        return BUILD_STEPS
    return SHORT_STEPS


def _steps(job: Job) -> list[dict]:
    """Completed steps: fixed small costs, the main step takes the rest; on failure the
    main step fails, `if: always()` steps still run and the others are skipped."""
    names = _step_names(job)
    os_name = _OS.get(job.cfg.platform if job.cfg else "linux", "Linux")
    what = "lintrunner" if job.kind == "lint" else "runner determinator" if job.kind == "label" else "docs upload"
    span = max(job.completed - job.started, len(names) * 1000)
    small = max(500, min(60_000, span // (4 * len(names))))
    main_ms = span - small * (len(names) - 1)
    steps = []
    t = job.started
    failed = job.conclusion in ("failure", "cancelled")
    after_main = False
    for i, raw in enumerate(names, 1):
        is_main = raw in _MAIN
        dur = main_ms if is_main else small
        if is_main:
            conclusion = job.conclusion if failed else "success"
        elif after_main and failed and raw not in _ALWAYS:
            conclusion, dur = "skipped", 0
        else:
            conclusion = "success"
        steps.append({"name": raw.format(os=os_name, what=what), "status": "completed",
                      "conclusion": conclusion, "number": i, "started_at": iso_ms(t),
                      "completed_at": iso_ms(t + dur)})
        t += dur
        after_main = after_main or is_main
    return steps


def workflow_job_payload(job: Job, state: str, old: str) -> dict:
    """`old` reproduces payloads from older GitHub versions: "meta" lacks run_attempt,
    workflow_name, created_at and head_branch; "steps" lacks the steps list."""
    run = job.run
    done = state == "completed"
    started = state in ("in_progress", "completed")
    if done:
        steps = _steps(job) if job.queued_event else []
    elif state == "in_progress":
        steps = [{"name": "Set up job", "status": "in_progress", "conclusion": None, "number": 1,
                  "started_at": iso_ms(job.started), "completed_at": None}]
    else:
        steps = []
    jid = job.id
    wj = {
        "id": jid, "run_id": run.run_id, "workflow_name": run.workflow, "head_branch": run.head_branch,
        "run_url": f"{API}/actions/runs/{run.run_id}", "run_attempt": run.attempt,
        "node_id": _node("CheckRun", jid), "head_sha": run.head_sha,
        "url": f"{API}/actions/jobs/{jid}", "html_url": f"{HTML}/actions/runs/{run.run_id}/job/{jid}",
        "status": state, "conclusion": job.conclusion if done else None,
        "created_at": iso_s(job.created),
        "started_at": iso_s(job.started if started else job.created),
        "completed_at": iso_s(job.completed) if done else None,
        "name": job.name, "steps": steps, "check_run_url": f"{API}/check-runs/{jid}",
        "labels": job.labels,
        "runner_id": job.runner_id if started and job.runner_id else None,
        "runner_name": job.runner_name if started and job.runner_id else None,
        "runner_group_id": (1 if job.runner_group == "Default" else 2) if started and job.runner_id else None,
        "runner_group_name": job.runner_group if started and job.runner_id else None,
    }
    if old == "meta":
        for k in ("run_attempt", "workflow_name", "created_at", "head_branch"):
            del wj[k]
    elif old == "steps":
        del wj["steps"]
    return {"action": state, "workflow_job": wj, "repository": REPOSITORY,
            "organization": ORGANIZATION, "sender": sender(run.actor), "installation": INSTALLATION}


# ----------------------------------------------------------------------------- workflow_run

def _pr_refs(run: RunAttempt) -> list[dict]:
    repo = {"id": REPO_ID, "url": API, "name": REPO}
    return [{"url": f"{API}/pulls/{n}", "id": 1_900_000_000 + n, "number": n,
             "head": {"ref": run.head_branch, "sha": run.head_sha, "repo": repo},
             "base": {"ref": "main", "sha": run.head_commit.get("base_sha", run.head_sha), "repo": repo}}
            for n in run.pr_numbers]


def workflow_run_payload(run: RunAttempt, action: str, workflow_path: str) -> dict:
    rid = run.run_id
    status = {"requested": "queued", "in_progress": "in_progress", "completed": "completed"}[action]
    updated = {"requested": run.created, "in_progress": run.started, "completed": run.completed}[action]
    run_url = f"{API}/actions/runs/{rid}"
    head_commit = {k: v for k, v in run.head_commit.items() if k != "base_sha"}
    wr = {
        "id": rid, "name": run.workflow, "node_id": _node("WorkflowRun", rid),
        "head_branch": run.head_branch, "head_sha": run.head_sha, "path": workflow_path,
        "display_title": run.title, "run_number": run.run_number, "event": run.event,
        "status": status, "conclusion": run.conclusion if action == "completed" else None,
        "workflow_id": run.workflow_id, "check_suite_id": 30_000_000_000 + rid % 10_000_000_000,
        "check_suite_node_id": _node("CheckSuite", rid), "url": run_url,
        "html_url": f"{HTML}/actions/runs/{rid}", "pull_requests": _pr_refs(run),
        "created_at": iso_s(run.created), "updated_at": iso_s(updated), "actor": sender(run.actor),
        "run_attempt": run.attempt, "referenced_workflows": [],
        "run_started_at": iso_s(run.created), "triggering_actor": sender(run.actor),
        "jobs_url": f"{run_url}/jobs", "logs_url": f"{run_url}/logs",
        "check_suite_url": f"{API}/check-suites/{30_000_000_000 + rid % 10_000_000_000}",
        "artifacts_url": f"{run_url}/artifacts", "cancel_url": f"{run_url}/cancel",
        "rerun_url": f"{run_url}/rerun",
        "previous_attempt_url": f"{run_url}/attempts/{run.attempt - 1}" if run.attempt > 1 else None,
        "workflow_url": f"{API}/actions/workflows/{run.workflow_id}",
        "head_commit": head_commit, "repository": MIN_REPOSITORY, "head_repository": MIN_REPOSITORY,
    }
    workflow = {"id": run.workflow_id, "node_id": _node("Workflow", run.workflow_id),
                "name": run.workflow, "path": workflow_path, "state": "active",
                "created_at": "2021-12-06T19:31:38.000Z", "updated_at": "2026-07-30T17:02:11.000Z",
                "url": f"{API}/actions/workflows/{run.workflow_id}",
                "html_url": f"{HTML}/blob/main/{workflow_path}",
                "badge_url": f"{HTML}/workflows/{run.workflow}/badge.svg"}
    return {"action": action, "workflow_run": wr, "workflow": workflow, "repository": REPOSITORY,
            "organization": ORGANIZATION, "sender": sender(run.actor), "installation": INSTALLATION}


# ----------------------------------------------------------------------------- push / PR

def commit_object(sha: str, message: str, time_ms: int, author: str) -> dict:
    person = {"name": author, "email": f"{author}@users.noreply.github.com", "username": author}
    bot = {"name": "PyTorch MergeBot", "email": "pytorchmergebot@users.noreply.github.com", "username": MERGEBOT}
    return {"id": sha, "tree_id": sha[::-1], "distinct": True, "message": message,
            "timestamp": iso_s(time_ms).replace("Z", "+00:00"), "url": f"{HTML}/commit/{sha}",
            "author": person, "committer": bot,
            "added": [], "removed": [], "modified": ["torch/_inductor/codegen/triton.py"]}


def push_payload(ref: str, before: str, after: str, commits: list[dict], pusher: str,
                 forced: bool = False, created: bool = False, deleted: bool = False) -> dict:
    head = commits[-1] if commits else None
    compare = (f"{HTML}/compare/{before[:12]}...{after[:12]}" if not created
               else f"{HTML}/commit/{after[:12]}")
    return {"ref": ref, "before": before, "after": after, "repository": PUSH_REPOSITORY,
            "pusher": {"name": pusher, "email": f"{pusher}@users.noreply.github.com"},
            "organization": ORGANIZATION, "installation": INSTALLATION, "sender": sender(pusher),
            "created": created, "deleted": deleted, "forced": forced, "base_ref": None,
            "compare": compare, "commits": commits, "head_commit": head}


LABEL_COLORS = {"ciflow/trunk": "7F0799", "topic: not user facing": "006b75", "open source": "ededed"}


def label_object(name: str) -> dict:
    lid = 2_000_000_000 + int.from_bytes(name.encode()[:4].ljust(4, b"\0"), "big") % 1_000_000_000
    return {"id": lid, "node_id": _node("Label", lid), "url": f"{API}/labels/{name.replace(' ', '%20')}",
            "name": name, "color": LABEL_COLORS.get(name, "c5def5"), "default": False, "description": ""}


def pull_request_payload(action: str, number: int, author: str, branch: str, head_sha: str,
                         base_sha: str, title: str, labels: list[str], created_ms: int, updated_ms: int,
                         state: str = "open", merged: bool = False, extra: dict | None = None,
                         actor: str | None = None) -> dict:
    url = f"{API}/pulls/{number}"
    closed = state == "closed"
    u = sender(author)
    pr = {
        "url": url, "id": 1_900_000_000 + number, "node_id": _node("PullRequest", number),
        "html_url": f"{HTML}/pull/{number}", "diff_url": f"{HTML}/pull/{number}.diff",
        "patch_url": f"{HTML}/pull/{number}.patch", "issue_url": f"{API}/issues/{number}",
        "number": number, "state": state, "locked": False, "title": title, "user": u,
        "body": f"Stack from [ghstack](https://github.com/ezyang/ghstack):\n* __->__ #{number}\n\n{title}.",
        "created_at": iso_s(created_ms), "updated_at": iso_s(updated_ms),
        "closed_at": iso_s(updated_ms) if closed else None,
        "merged_at": iso_s(updated_ms) if merged else None,
        "merge_commit_sha": head_sha[::-1], "assignee": None, "assignees": [],
        "requested_reviewers": [], "requested_teams": [], "labels": [label_object(n) for n in labels],
        "milestone": None, "draft": False, "commits_url": f"{url}/commits",
        "review_comments_url": f"{url}/comments", "review_comment_url": f"{API}/pulls/comments{{/number}}",
        "comments_url": f"{API}/issues/{number}/comments", "statuses_url": f"{API}/statuses/{head_sha}",
        "head": {"label": f"{OWNER}:{branch}", "ref": branch, "sha": head_sha, "user": sender(OWNER),
                 "repo": REPOSITORY},
        "base": {"label": f"{OWNER}:main", "ref": "main", "sha": base_sha, "user": sender(OWNER),
                 "repo": REPOSITORY},
        "_links": {k: {"href": v} for k, v in (
            ("self", url), ("html", f"{HTML}/pull/{number}"), ("issue", f"{API}/issues/{number}"),
            ("comments", f"{API}/issues/{number}/comments"), ("review_comments", f"{url}/comments"),
            ("review_comment", f"{API}/pulls/comments{{/number}}"), ("commits", f"{url}/commits"),
            ("statuses", f"{API}/statuses/{head_sha}"))},
        "author_association": "CONTRIBUTOR", "auto_merge": None, "active_lock_reason": None,
        "merged": merged, "mergeable": None, "rebaseable": None, "mergeable_state": "unknown",
        "merged_by": sender(MERGEBOT) if merged else None, "comments": 2, "review_comments": 0,
        "maintainer_can_modify": False, "commits": 1, "additions": 40, "deletions": 7, "changed_files": 3,
    }
    payload = {"action": action, "number": number, "pull_request": pr}
    if extra:
        payload.update(extra)
    payload.update({"repository": REPOSITORY, "organization": ORGANIZATION,
                    "sender": sender(actor) if actor else u,
                    "installation": INSTALLATION})
    return payload
