"""A small project whose CI follows none of PyTorch's conventions, served by the fake Actions API.

acme/widgets lands its commits on `master`; one workflow, `CI`, runs on pushes and pull requests
with GitHub-hosted runners and matrix job names (`lint`, `build (ubuntu-latest, 3.11)`,
`test / unit (windows-latest)`); its test jobs upload pytest's JUnit report (real pytest output,
tests/data/junit-artifact: a pass with a test rerun and a skip, or, from a job whose test failed,
`test_parse_widget` failing) as an artifact named `junit-<os>`, not PyTorch's `test-reports-*`, a few
seconds before the job ends, whether its tests passed or not (a lost runner uploads nothing).
Its history over `days`: ten pushes to master (the sixth breaks `test / unit (macos-latest)`,
the eighth fixes it) and seven pull requests: one with a test that fails, one all green, one
whose lint fails, one whose Windows test lost its runner and passed on a re-run, one whose
build fails, and two failing as master did when it was broken: one based on the first broken
commit, one on the commit before it. Every failed job has a log as GitHub serves it (timestamped lines).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from fake_github_actions import FakeActions
from pytest_httpserver import HTTPServer

TEAM = "acme/widgets"
BRANCH = "master"
OSES = ("ubuntu-latest", "windows-latest", "macos-latest")
JOBS = ["lint", "build (ubuntu-latest, 3.11)", "build (windows-latest, 3.11)"] + [f"test / unit ({o})" for o in OSES]
JUNIT = (Path(__file__).parent / "data" / "junit-artifact" / "test_ops.xml").read_bytes()
FAILED_JUNIT = (Path(__file__).parent / "data" / "junit-artifact" / "test_widgets.xml").read_bytes()
SYNC_JUNIT = (Path(__file__).parent / "data" / "junit-artifact" / "test_sync.xml").read_bytes()
SYNC_TIMEOUT_JUNIT = (Path(__file__).parent / "data" / "junit-artifact" / "test_sync_timeout.xml").read_bytes()
HTML = f"https://github.com/{TEAM}"

# a failed job's log lines, as the step that failed printed them
FAILED_TEST = ["=================================== FAILURES ===================================",
               "_____________________________ test_parse_widget ______________________________",
               "    def test_parse_widget():",
               ">       assert parse('w-1') == Widget(1)",
               "E       AssertionError: assert None == Widget(id=1)",
               "tests/test_widgets.py:12: AssertionError",
               "=========================== short test summary info ============================",
               "FAILED tests/test_widgets.py::test_parse_widget - AssertionError: assert None == Widget(id=1)",
               "========================= 1 failed, 41 passed in 3.20s =========================",
               "##[error]Process completed with exit code 1."]
# test_sync_widget timing out, as pytest printed it (test_sync_timeout.xml's run)
SYNC_TIMEOUT = ["=================================== FAILURES ===================================",
                "_______________________________ test_sync_widget _______________________________",
                ">           raise TimeoutError(\"widget service did not answer in 5.0s\")",
                "E           TimeoutError: widget service did not answer in 5.0s",
                "tests/test_sync.py:7: TimeoutError",
                "=========================== short test summary info ============================",
                "FAILED tests/test_sync.py::test_sync_widget - TimeoutError: widget service did not answer in 5.0s",
                "========================= 1 failed, 1 passed in 0.11s ==========================",
                "##[error]Process completed with exit code 1."]
LINT = ["widgets/core.py:3:1: F401 [*] `os` imported but unused",
        "Found 1 error.", "##[error]Process completed with exit code 1."]
RUNNER_LOST = ["collected 42 items", "",
               "##[error]The runner has received a shutdown signal. This can happen when the runner service is "
               "stopped, or a manually started runner is canceled."]
COMPILE = ["src/speedups.c:41:5: error: implicit declaration of function 'widget_hash' "
           "[-Wimplicit-function-declaration]",
           "error: command '/usr/bin/gcc' failed with exit code 1",
           "##[error]Process completed with exit code 1."]


def sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def log_bytes(at: dt.datetime, lines: list[str]) -> bytes:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.0000000Z")
    return "".join(f"{stamp} {line}\n" for line in ["##[group]Run pytest -q --junitxml=junit.xml", *lines]).encode()


def junit_zip(report: bytes = JUNIT) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("junit.xml", report)
    return buf.getvalue()


class Team:
    """Fills `api` run by run; ids count up from fixed bases so a history is the same every time."""

    def __init__(self, api: FakeActions, run_id: int = 8_100_000_000, job_id: int = 21_000_000_000):
        self.api = api
        self.run_id = run_id
        self.job_id = job_id
        # the report a passing test job uploads, and a failing one's per the log lines it failed with
        # (a test job failing otherwise, its runner lost say, uploads none)
        self.passing = JUNIT
        self.failed_reports = [(FAILED_TEST, FAILED_JUNIT)]

    def run(self, head: str, branch: str, event: str, at: dt.datetime, failing: dict[str, list[str]],
            pr: dict | None = None, attempt: int = 1, run_id: int | None = None) -> int:
        """One attempt of the CI workflow on `head`: every job passes but those in `failing`
        (job name -> its log lines), which fail."""
        if run_id is None:
            self.run_id += 1
        rid = run_id or self.run_id
        refs = [] if pr is None else [{"id": pr["id"], "number": pr["number"], "url": pr["url"],
                                       "head": {"ref": pr["head"]["ref"], "sha": head, "repo": {"name": "widgets"}},
                                       "base": {"ref": BRANCH, "sha": pr["base"]["sha"], "repo": {"name": "widgets"}}}]
        jobs = [self._job(rid, attempt, head, branch, name, at, i, failing) for i, name in enumerate(JOBS)]
        end = max(j["completed_at"] for j in jobs)
        self.api.add_run({"id": rid, "run_attempt": attempt, "name": "CI", "path": ".github/workflows/ci.yml",
                          "workflow_id": 161335, "event": event, "head_branch": branch, "head_sha": head,
                          "display_title": f"CI on {head[:7]}", "run_number": rid % 1000, "status": "completed",
                          "conclusion": "failure" if failing else "success", "pull_requests": refs,
                          "created_at": iso(at), "run_started_at": iso(at), "updated_at": end,
                          "html_url": f"{HTML}/actions/runs/{rid}", "head_commit": {"id": head, "message": "x"},
                          "previous_attempt_url": None}, jobs)
        return rid

    def _job(self, rid: int, attempt: int, head: str, branch: str, name: str, at: dt.datetime, i: int,
             failing: dict[str, list[str]]) -> dict:
        self.job_id += 1
        started = at + dt.timedelta(seconds=20 + i)
        done = started + dt.timedelta(minutes=2 + 3 * i)
        os_name = next((o for o in OSES if o in name), "ubuntu-latest")
        if name in failing:
            self.api.add_log(self.job_id, log_bytes(done, failing[name]))
        report = self.passing if name not in failing else next(
            (r for lines, r in self.failed_reports if lines == failing[name]), None)
        if name.startswith("test /") and report is not None:
            self.api.add_artifact(rid, f"junit-{os_name}", junit_zip(report), iso(done - dt.timedelta(seconds=5)))
        return {"id": self.job_id, "run_id": rid, "run_attempt": attempt, "head_sha": head, "head_branch": branch,
                "workflow_name": "CI", "name": name, "status": "completed",
                "conclusion": "failure" if name in failing else "success", "labels": [os_name],
                "runner_name": f"GitHub Actions {self.job_id % 97}", "runner_group_name": "GitHub Actions",
                "created_at": iso(at), "started_at": iso(started), "completed_at": iso(done),
                "html_url": f"{HTML}/actions/runs/{rid}/job/{self.job_id}"}


def fill(api: FakeActions, days: list[dt.date]) -> dict:
    """The team's history on `days` (at least two); returns {"master": [shas], "prs": {number: head sha}}."""
    team, start = Team(api), dt.datetime.combine(days[0], dt.time(8), dt.timezone.utc)
    span = (dt.datetime.combine(days[-1], dt.time(20), dt.timezone.utc) - start) / 10
    parent, master = sha("root"), []
    for n in range(10):
        at = start + n * span
        head = sha(f"master-{n}")
        api.add_commit(BRANCH, head, parent, f"Widgets change {n} (#{90 + n})", iso(at), f"dev{n % 3}")
        api.add_push(BRANCH, parent, head, iso(at))
        broken = {"test / unit (macos-latest)": FAILED_TEST} if n in (5, 6) else {}
        team.run(head, BRANCH, "push", at + dt.timedelta(seconds=5), broken)
        parent = head
        master.append(head)
    prs = {}
    plans = {101: {"test / unit (ubuntu-latest)": FAILED_TEST}, 102: {}, 103: {"lint": LINT},
             104: {"test / unit (windows-latest)": RUNNER_LOST}, 105: {"build (ubuntu-latest, 3.11)": COMPILE},
             106: {"test / unit (macos-latest)": FAILED_TEST},  # based on a broken master commit
             107: {"test / unit (macos-latest)": FAILED_TEST}}  # on the one before it
    bases = {101: 0, 102: 2, 103: 4, 104: 6, 105: 8, 106: 5, 107: 4}
    for number, failing in plans.items():
        at = start + (bases[number] + 1) * span + dt.timedelta(minutes=7)
        head, base = sha(f"pr-{number}"), master[bases[number]]
        api.add_commit(f"feature-{number}", head, base, f"Feature {number}", iso(at), "contributor")
        pr = {"id": 5_000_000 + number, "number": number, "state": "open", "title": f"Feature {number}",
              "url": f"https://api.github.com/repos/{TEAM}/pulls/{number}", "html_url": f"{HTML}/pull/{number}",
              "created_at": iso(at), "updated_at": iso(at + dt.timedelta(hours=1)), "closed_at": None,
              "merged_at": None, "draft": False,
              "head": {"ref": f"feature-{number}", "sha": head, "label": f"contributor:feature-{number}"},
              "base": {"ref": BRANCH, "sha": base, "label": f"acme:{BRANCH}"}}
        api.add_pull(pr)
        rid = team.run(head, f"feature-{number}", "pull_request", at, failing, pr)
        if number == 104:  # re-run of the attempt whose runner was lost: it passes
            team.run(head, f"feature-{number}", "pull_request", at + dt.timedelta(minutes=40), {}, pr,
                     attempt=2, run_id=rid)
        prs[number] = head
    return {"master": master, "prs": prs}


def fill_with_flaky_sync(api: FakeActions, days: list[dt.date]) -> dict:
    """fill()'s history, then four more pushes to master late on the last day whose test jobs run
    tests/test_sync.py (real pytest output: test_sync.xml, test_sync_timeout.xml): on the first three
    `test_sync_widget` times out in `test / unit (ubuntu-latest)` and passes when the run is re-run, a
    team's flaky test without a rerun plugin; then pull request 108, on the last of them, whose Ubuntu
    test job times out the same way. Returns fill()'s dict with the four pushes as "flaky_master"."""
    history = fill(api, days)
    team = Team(api, run_id=8_200_000_000, job_id=22_000_000_000)
    team.passing, team.failed_reports = SYNC_JUNIT, [(SYNC_TIMEOUT, SYNC_TIMEOUT_JUNIT)]
    timeout = {"test / unit (ubuntu-latest)": SYNC_TIMEOUT}
    start = dt.datetime.combine(days[-1], dt.time(20, 30), dt.timezone.utc)
    parent, pushed = history["master"][-1], []
    for n in range(4):
        at, head = start + n * dt.timedelta(minutes=20), sha(f"master-sync-{n}")
        api.add_commit(BRANCH, head, parent, f"Widgets sync {n} (#{120 + n})", iso(at), f"dev{n % 3}")
        api.add_push(BRANCH, parent, head, iso(at))
        rid = team.run(head, BRANCH, "push", at + dt.timedelta(seconds=5), timeout if n < 3 else {})
        if n < 3:
            team.run(head, BRANCH, "push", at + dt.timedelta(minutes=40), {}, attempt=2, run_id=rid)
        parent = head
        pushed.append(head)
    at, head = start + dt.timedelta(hours=2), sha("pr-108")
    api.add_commit("feature-108", head, parent, "Feature 108", iso(at), "contributor")
    pr = {"id": 5_000_108, "number": 108, "state": "open", "title": "Feature 108",
          "url": f"https://api.github.com/repos/{TEAM}/pulls/108", "html_url": f"{HTML}/pull/108",
          "created_at": iso(at), "updated_at": iso(at + dt.timedelta(minutes=30)), "closed_at": None,
          "merged_at": None, "draft": False,
          "head": {"ref": "feature-108", "sha": head, "label": "contributor:feature-108"},
          "base": {"ref": BRANCH, "sha": parent, "label": f"acme:{BRANCH}"}}
    api.add_pull(pr)
    team.run(head, "feature-108", "pull_request", at, timeout, pr)
    return history | {"flaky_master": pushed, "prs": history["prs"] | {108: head}}


@contextlib.contextmanager
def served(history: Callable[[FakeActions, list[dt.date]], dict], days: list[dt.date]) -> Iterator[FakeActions]:
    """The fake Actions API on a free port of 127.0.0.1, filled by `history` (fill, fill_with_flaky_sync)."""
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    try:
        api = FakeActions(server, repo=TEAM, default_branch=BRANCH)
        history(api, days)
        yield api
    finally:
        server.stop()
