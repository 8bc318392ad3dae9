"""Hand-made CI histories written as the lake tables the HUD reads (shared by the HUD tests)."""

from __future__ import annotations

import datetime as dt
import itertools

import pyarrow as pa

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.hud.health import build_commit_health, build_pr_jobs
from torchci_assets.derived.hud.inputs import arrow_schema
from torchci_assets.derived.hud.metrics import build_ci_metrics
from torchci_assets.derived.site.site import publish_site

DAY = "2026-10-05"
T0 = dt.datetime(2026, 10, 5, 8, 0, tzinfo=dt.timezone.utc)
REPO = "pytorch/pytorch"
BRANCHES = ("refs/heads/main",)


def schema(table: str) -> pa.Schema:
    full = arrow_schema(table)
    return full.remove(full.get_field_index("day")) if "day" in full.names else full


def sha(i: int) -> str:
    return f"{i:040x}"


class History:
    """Rows per (table, day); `write` puts every table of every day in the lake (empty ones too)."""

    def __init__(self):
        self.rows: dict[tuple[str, str], list[dict]] = {}
        self.ids = itertools.count(1000)

    def add(self, table: str, day: str, **row) -> dict:
        self.rows.setdefault((table, day), []).append(row)
        return row

    def push(self, commit: int, at: dt.datetime = T0) -> str:
        self.add("push", at.date().isoformat(), repo=REPO, ref="refs/heads/main", after=sha(commit), deleted=False,
                 received_at=at)
        return sha(commit)

    def job(self, head: str, name: str, conclusion: str | None, *, workflow: str = "pull", run_id: int = 1,
            attempt: int = 1, status: str | None = None, created: dt.datetime = T0, minutes: float = 30,
            job_id: int | None = None, day: str = DAY, branch: str = "main", queue_s: float = 60.0,
            labels=("linux.2xlarge",), platform: str = "linux", test_config: str | None = None) -> int:
        job_id = job_id or next(self.ids)
        started = created + dt.timedelta(seconds=queue_s)
        done = conclusion is not None
        self.add("workflow_job", day, id=job_id, run_id=run_id, run_attempt=attempt, workflow_name=workflow, name=name,
                 head_sha=head, head_branch=branch, status=status or ("completed" if done else "in_progress"),
                 conclusion=conclusion, created_at=created, started_at=started,
                 completed_at=started + dt.timedelta(minutes=minutes) if done else None, labels=list(labels),
                 queue_s=queue_s, duration_s=minutes * 60 if done else None, build_env=None,
                 test_config=test_config, platform=platform, received_at=created + dt.timedelta(minutes=minutes + 1))
        return job_id

    def run(self, run_id: int, name: str, *, attempt: int = 1, status: str = "completed", conclusion: str = "success",
            created: dt.datetime = T0, minutes: float = 60, event: str = "push", day: str = DAY) -> None:
        self.add("workflow_run", day, id=run_id, run_attempt=attempt, name=name, event=event, status=status,
                 conclusion=conclusion, created_at=created, updated_at=created + dt.timedelta(minutes=minutes))

    def failing_test(self, head: str, job_id: int, test: str, file: str = "test_nn.py", cls: str = "TestNN",
                     day: str = DAY) -> None:
        self.add("test_sha_outcomes", day, file=file, classname=cls, name=test, head_sha=head, failed=1, errors=0,
                 failing_job_ids=[job_id])

    def test_job(self, job_id: int, attempt: int = 1, infra_reason: str | None = None, day: str = DAY) -> None:
        self.add("test_jobs", day, job_id=job_id, workflow_run_attempt=attempt, infra_suspect=infra_reason is not None,
                 infra_reason=infra_reason)

    def verdict(self, test: str, verdict: str, file: str = "test_nn.py", cls: str = "TestNN", day: str = DAY) -> None:
        self.add("flaky_tests", day, file=file, classname=cls, name=test, verdict=verdict)

    def write(self, lake: Lake) -> None:
        days = {d for _, d in self.rows}
        for table in ("push", "workflow_job", "workflow_run", "test_sha_outcomes", "test_jobs", "flaky_tests"):
            for day in days:
                rows = self.rows.get((table, day), [])
                lake.write(table, day, pa.Table.from_pylist(rows, schema=schema(table)))
        for (table, day), rows in self.rows.items():
            if table not in ("push", "workflow_job", "workflow_run", "test_sha_outcomes", "test_jobs", "flaky_tests"):
                lake.write(table, day, pa.Table.from_pylist(rows, schema=schema(table)))


def publish_grid(tmp_path, h: History, now: dt.datetime) -> tuple[Lake, str]:
    """The lake `h` makes with DAY's `commit_health`, `pr_jobs` and metrics as of `now`, and the
    index.html the site publishes from it."""
    lake = Lake.at(str(tmp_path / "lake"))
    h.write(lake)
    build_commit_health(lake, DAY, REPO, BRANCHES, min_groups=1, now=now)
    build_pr_jobs(lake, DAY, REPO, now=now)
    build_ci_metrics(lake, DAY, REPO, BRANCHES)
    publish_site(lake, Store(str(tmp_path / "out")), DAY, REPO)
    return lake, (tmp_path / "out" / "hud" / "index.html").read_text()
