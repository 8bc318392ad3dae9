"""Unstable jobs on the HUD, as PyTorch's HUD treats them.

PyTorch marks a CI job unstable with an open `UNSTABLE <job>` issue: the job still runs, but its
failure neither blocks viable/strict nor turns a main commit red, and the HUD shows it as a
warning, not as a failure (test-infra `torchci/lib/jobUtils.ts`, `isUnstableJob`). A job is
unstable when its name contains `unstable`, or when `UNSTABLE <its name>` contains the title of
an open UNSTABLE issue, its name read as `workflow / job (config)` (`transformJobName`: shard
numbers and runner dropped). So `UNSTABLE pull / linux-jammy-py3.10-gcc11` marks every job of
that build in `pull`, and `UNSTABLE pull / linux-jammy-py3.10-gcc11 / test (default)` the shards
of its default config.

The open UNSTABLE issues are read from `stats/unstable-jobs.json`, whose keys are the issues'
titles without the prefix: the `unstable_jobs` asset publishes it from GitHub earlier in the same
run, or leaves the list published last when it cannot.
The matching itself is SQL (`sql/commit_groups.sql`, step `unstable`); `is_unstable` says the same
in Python for the pages and the tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from resources.storage import Store
from torchci_assets.derived.flakiness.job_issues import UNSTABLE_PREFIX, load_unstable

_JOB_NAME = re.compile(r"^(.*) \(([^,]*),.*\)")


def load_unstable_jobs(outputs: Store, log: Callable[[str], None] = lambda s: None) -> list[str]:
    """The jobs of the published unstable-jobs.json, read as Dr. CI reads it (`load_unstable`: none
    when nothing is published, a file or entry that is not one reported and left out), so the HUD
    and the comments mark the same jobs, and a bad file never stops commit_health or pr_jobs. An
    empty job name (an issue titled just `UNSTABLE`, which PyTorch's list keeps) is left out too: its
    title is in every job's, and would make every job unstable."""
    return sorted(load_unstable(outputs, log))


def transform_job_name(name: str) -> str:
    """`workflow / job (config, shard, shards, runner)` -> `workflow / job (config)`."""
    m = _JOB_NAME.match(name)
    return f"{m.group(1)} ({m.group(2)})" if m else name


def is_unstable(name: str, unstable_jobs: list[str]) -> bool:
    """Whether the job `name` (with its workflow, as the HUD names jobs) is unstable."""
    if "unstable" in name:
        return True
    title = f"{UNSTABLE_PREFIX} {transform_job_name(name)}"
    return any(f"{UNSTABLE_PREFIX} {job}" in title for job in unstable_jobs)
