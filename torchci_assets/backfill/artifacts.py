"""Which job a run's test-report artifact belongs to, from what GitHub lists: the artifact's name and
creation time, and the jobs of the run's attempts. GitHub lists a run's artifacts without the job or
the attempt that uploaded them, so a report is filed under a job only when these say which one; any
doubt is a reason, never a guess (a report under the wrong job would put its failures on a commit,
a platform or an attempt that did not have them).

PyTorch's upload-test-artifacts action names its report artifacts
`test-reports-runattempt<n>-<suffix>_<job id>.zip` (upload_test_stats reads the job id from there):
the id names the job. A team's workflow names its artifact after the matrix job that uploads it
(`junit-macos-latest` from `test / unit (macos-latest)`): the part of the name after the configured
prefix names the job whose name ends with it, compared case and punctuation aside, when exactly one
name does. A run re-run has a job of that name in each attempt it ran in, and nothing in the name
tells them apart: the artifact is the one of those jobs that was running when the artifact was
created, and none when no single one was.
"""

from __future__ import annotations

import re

from torchci_assets.backfill import shapes

_JOB_ID_IN_NAME = re.compile(r"_(\d+)(?:\.zip)?$")
_ATTEMPT_IN_NAME = re.compile(r"-?runattempt(\d+)-")
_PUNCTUATION = re.compile(r"[^a-z0-9]+")

# why an artifact is filed under no job (the backfill's progress line counts each)
UNKNOWN_ID = "a job id not in its run"
NO_NAME = "no job of that name"
SEVERAL = "several jobs of that name"
RERUN = "re-run, not during one attempt's job of that name"


def normalised(text: str) -> str:
    """`text` lower-cased, each run of punctuation and spaces one `-`: `test / unit (macos-latest)` is
    `test-unit-macos-latest`, as `Unit_MacOS-Latest` is `unit-macos-latest`."""
    return _PUNCTUATION.sub("-", text.lower()).strip("-")


def named_by(rest: str, job_name: str) -> bool:
    """Whether an artifact name's part after the prefix names the job: the whole job name, or its
    end at a word's start, so `ubuntu-latest` names `test / unit (ubuntu-latest)` and not
    `build (ubuntu-latest, 3.11)`."""
    want, name = normalised(rest), normalised(job_name)
    return bool(want) and (name == want or name.endswith(f"-{want}"))


def _attempt(job: dict) -> int:
    return job.get("run_attempt") or 1


def _running_at(job: dict, created_at: str | None) -> bool:
    at, start, end = (shapes.parse_time(t) for t in (created_at, job.get("started_at"), job.get("completed_at")))
    return None not in (at, start, end) and start <= at <= end


def by_name(rest: str, jobs: list[dict], created_at: str | None) -> tuple[dict | None, str]:
    """The job `rest` names among `jobs`; with one name in several attempts, the one running at
    `created_at`."""
    named = [j for j in jobs if named_by(rest, j.get("name") or "")]
    if not named:
        return None, NO_NAME
    if len({normalised(j.get("name") or "") for j in named}) > 1 or len({_attempt(j) for j in named}) < len(named):
        return None, SEVERAL
    running = [j for j in named if len(named) == 1 or _running_at(j, created_at)]
    return (running[0], "") if len(running) == 1 else (None, RERUN)


def artifact_job(name: str, prefix: str, jobs: dict[int, dict], created_at: str | None = None
                 ) -> tuple[dict | None, str]:
    """The job a report artifact named `name` (starting with `prefix`) belongs to, and "", or None and
    why not: the job whose id ends its name; else the only job of its attempt (`runattempt<n>` in
    the name, else any); else the job its name names (`by_name`). A number ending the name that is
    no job of the run may be a team's shard (`junit_1`), so the name is read as a name, but never
    as its attempt's only job: PyTorch's name said which job, and that job was not read."""
    named_id = _JOB_ID_IN_NAME.search(name)
    if named_id and int(named_id.group(1)) in jobs:
        return jobs[int(named_id.group(1))], ""
    rest = name[len(prefix):].removesuffix(".zip")
    m = _ATTEMPT_IN_NAME.search(rest)
    pool = [j for j in jobs.values() if m is None or _attempt(j) == int(m.group(1))]
    if len(pool) == 1 and not named_id:
        return pool[0], ""
    job, why = by_name(_ATTEMPT_IN_NAME.sub("-", rest), pool, created_at)
    return (job, why) if job or not named_id else (None, UNKNOWN_ID)


def report_prefix(name: str, prefixes: tuple[str, ...]) -> str | None:
    """The configured prefix `name` starts with (the longest), None when it is no test-report artifact."""
    return max((p for p in prefixes if name.startswith(p)), key=len, default=None)
