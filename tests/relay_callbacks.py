"""Downstream callbacks exactly as the real cross-repo relay produces them, for the tests.

The body comes from pytorch/test-infra's own `report_callback.py` (vendored under
tests/vendor/ with its license), its `build_payload()` run with the environment its composite
action (`action.yml`) gives it on a GitHub Actions job, at a frozen clock; nothing is POSTed.
The record around the body is what the relay's callback handler forwards to HUD
(`callback/callback_handler.py`: `_build_trusted`, `untrusted = {"callback_payload": body}`;
`utils/hud.py`: `{"trusted", "untrusted"}`), and `received_at` is the receiver's
(ARCHITECTURE, Wave 2).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
from pathlib import Path
from unittest import mock

_VENDORED = Path(__file__).parent / "vendor" / "report_callback.py"
_spec = importlib.util.spec_from_file_location("report_callback", _VENDORED)
report_callback = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_callback)

UTC = dt.timezone.utc


def action_env(status: str, *, repo: str, run_id: int | str, run_attempt: int | str = 1, job_name: str = "build",
               workflow: str = "npu-upstream-ci", conclusion: str = "", client_payload: dict | None = None,
               test_results: dict | None = None, artifact_url: str = "", check_run_id: str = "",
               delivery_id: str = "", event_type: str = "") -> dict[str, str]:
    """The `env:` of action.yml's "Send callback to relay server" step: every input is set,
    an unset one to the empty string. `toJson(github.event.client_payload)` is the dispatch's
    payload (a minimal one unless given), or `null` for a self-report (`delivery_id` given), whose
    workflow was not started by repository_dispatch."""
    return {
        "SCHEMA_VERSION": "1", "STATUS": status, "CONCLUSION": conclusion, "WORKFLOW_NAME": workflow,
        "WORKFLOW_URL": f"https://github.com/{repo}/actions/runs/{run_id}",
        "TEST_RESULTS": json.dumps(test_results) if test_results is not None else "",
        "FAILED_TESTS_DETAIL": "", "TRIAGE_VERDICT": "",
        "CLIENT_PAYLOAD": json.dumps(client_payload if client_payload or delivery_id else
                                     {"event_type": "push", "delivery_id": f"d-{run_id}", "payload": {}}, indent=2),
        "OIDC_TOKEN": "not-a-token", "CALLBACK_URL": "http://127.0.0.1:9/github/callback/",
        "ARTIFACT_URL": artifact_url, "JOB_NAME": job_name, "CHECK_RUN_ID": check_run_id,
        "RUN_ID": str(run_id), "RUN_ATTEMPT": str(run_attempt), "MAX_TIME": "10",
        "DELIVERY_ID_OVERRIDE": delivery_id, "EVENT_TYPE_OVERRIDE": event_type,
    }


class _Clock(dt.datetime):
    frozen: dt.datetime

    @classmethod
    def now(cls, tz=None):
        return cls.frozen.astimezone(tz)


def build_payload(env: dict[str, str], at: dt.datetime) -> str:
    """The JSON text report_callback.py would POST, built at instant `at`."""
    _Clock.frozen = at
    with mock.patch.dict(os.environ, env, clear=True), mock.patch.object(report_callback, "datetime", _Clock):
        return report_callback.build_payload()


def forwarded(body: str, repo: str, received: dt.datetime, level: str = "L2", queue_time: float | None = None,
              execution_time: float | None = None) -> dict:
    """The archive line for a callback body: the relay's record for HUD plus `received_at`."""
    return {
        "trusted": {"ci_metrics": {"queue_time": queue_time, "execution_time": execution_time},
                    "verified_repo": repo, "downstream_repo_level": level},
        "untrusted": {"callback_payload": json.loads(body)},
        "received_at": received.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }


def job_callbacks(repo: str, dispatched: dt.datetime, *, run_id: int, job_name: str, queue_s: float = 60.0,
                  exec_s: float = 1800.0, conclusion: str = "success", test_results: dict | None = None,
                  run_attempt: int = 1, client_payload: dict | None = None, completes: bool = True,
                  latency_s: float = 0.5, level: str = "L2") -> list[dict]:
    """A dispatched job's in_progress and completed callbacks as archive lines, with the relay's
    measures: queue_time from dispatch to the in_progress callback, execution_time from there to
    the completed one (each callback reaches the relay `latency_s` after it is built)."""
    latency = dt.timedelta(seconds=latency_s)
    started = dispatched + dt.timedelta(seconds=queue_s)
    common = dict(repo=repo, run_id=run_id, run_attempt=run_attempt, job_name=job_name,
                  client_payload=client_payload or {"event_type": "push", "delivery_id": f"d-{run_id}",
                                                    "payload": {"after": "a" * 40}})
    lines = [forwarded(build_payload(action_env("in_progress", **common), started), repo, started + latency,
                       level, queue_time=round((started + latency - dispatched).total_seconds(), 3))]
    if completes:
        completed = started + dt.timedelta(seconds=exec_s)
        env = action_env("completed", conclusion=conclusion, test_results=test_results, **common)
        lines.append(forwarded(build_payload(env, completed), repo, completed + latency, level,
                               execution_time=round(exec_s, 3)))
    return lines
