"""commit_health rows for the guardians' tests: main commits with a job group's state on each."""

from __future__ import annotations

import datetime as dt

T0 = dt.datetime(2026, 11, 20, 8, 0, tzinfo=dt.timezone.utc)
GROUP = "trunk / linux-jammy-py3.10-gcc11 / test (default, linux.4xlarge)"


def sha(i: int) -> str:
    return f"{i:040x}"


def row(i: int, state: str | None, group: str = GROUP, failure_class: str | None = None, tests=(),
        attempts: int = 1, run_id: int | None = None, test_count: int | None = None) -> dict:
    """Commit i's row for `group` (state None: the job was skipped there, its run still exists)."""
    workflow = group.split(" / ")[0]
    if state == "failure" and failure_class is None:
        failure_class = "new"
    return {"sha": sha(i), "pushed_at": T0 + dt.timedelta(minutes=10 * i), "workflow": workflow, "job_group": group,
            "state": state or "skipped", "failure_class": failure_class if state == "failure" else None,
            "attempts": attempts, "run_id": run_id if run_id is not None else 1000 + i, "run_attempt": attempts,
            "job_id": 5000 + i, "failing_tests": list(tests),
            "failing_test_count": len(tests) if test_count is None else test_count}


def history(states: str, group: str = GROUP, **kw) -> list[dict]:
    """One row per character: g green, r red (new failure), R red on two attempts (its rerun
    failed too), f flaky, p pending, i infra failure, k known-flaky failure, s skipped (the run
    exists), . not run at all (no row)."""
    names = {"g": "success", "r": "failure", "R": "failure", "f": "flaky", "p": "pending", "i": "failure",
             "k": "failure", "s": None}
    out = []
    for i, c in enumerate(states):
        if c == ".":
            continue
        fc = {"i": "infra", "k": "known_flaky"}.get(c)
        out.append(row(i, names[c], group, failure_class=fc, **{"attempts": 2 if c == "R" else 1, **kw}))
    return out
