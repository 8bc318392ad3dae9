"""Main's CI as the trunk guardians see it, with planted breakages and restarts that really run.

A small world of its own beside the archive simulator: it yields `commit_health` rows (each main
commit's state per job group as of a minute of simulated time) rather than webhooks, so the
autorevert and the alerts can be run every 5 simulated minutes for hours, with each restart they
order (their dry-run ledger rows) becoming a new attempt that finishes a job's duration later.

Planted per world, each on its own job group (but flaky_beside) and (culprits) its own commit:
  breaks_test      a commit makes one test fail on every later commit;
  breaks_build     a commit breaks a build;
  breaks_periodic  a commit breaks a test only a periodic job runs, and that job runs on one
                   commit in four (the others are skipped: a restart of the run runs it);
  flaky_only       a test that is not known to be flaky fails 5% of attempts, anywhere;
  flaky_beside     another such test, in breaks_test's job: once that job is broken a re-run can
                   fail the broken test alone, so this test failed and passed on one commit while
                   the job failed on both attempts (only the attempts' own failing tests show it);
  known_flaky      (always present) a test the flaky verdicts know fails 30% of attempts;
  infra_only       for an hour from a commit's push, every attempt of a job dies of infrastructure;
  pre_existing     a test that fails on every commit, the first included;
and in one world in LANDRACE_EVERY (its seed a multiple of it), at the end of the day's pushes:
  breaks_new_job   a landrace: the third-last commit adds a test job (a new configuration), the
                   next commit breaks a test only that job runs, and the last commit fails it too.
                   The new job's first run died at startup of infrastructure (its runner never
                   came up: the job failed at once) and PyTorch's retry bot re-ran it when that
                   commit's run completed, so its only success started after the culprit's and
                   the last commit's failing runs (which nobody retried) had started. That is the
                   shape in which the autorevert's infrastructure check re-runs the first red;
and in the other worlds:
  breaks_last      the last commit breaks a test (in infra_only's job, long after its outage). No
                   newer commit runs it, so once its failing run was re-run to confirm, its own two
                   failures are all there are: the pinned culprit is re-run while fewer than 3
                   failures stand (upstream's rule). It is never proposed: `min_red_commits` wants a
                   newer red commit, which never comes (HELD_KINDS: scored apart, not a miss).
Only the breaks_* kinds have a culprit; a revert proposal anywhere else is a false one, and so is one
on breaks_test's culprit from flaky_beside's test alone (`blames` says which signals are whose).

The same CI is also written as the lake's job tables (`job_tables`, `write_job_tables`): every
attempt as a workflow_job row with its start, the runs, the failing tests, the test jobs' infra
verdicts and the known flaky test's verdict, so that the guardians read each attempt through the
HUD's own SQL (`guardians.inputs.main_attempt_rows`) as they do in production; `rows` is what
commit_health, built from those tables, says (tests/test_simulate_trunk.py checks that).
"""

from __future__ import annotations

import datetime as dt
import random
import re
import zlib
from dataclasses import dataclass

import pyarrow as pa

from resources.lake import Lake
from torchci_assets.derived.guardians.signals import TEST_SEPARATOR
from torchci_assets.derived.hud.inputs import arrow_schema

T0 = dt.datetime(2026, 11, 2, 6, 0, tzinfo=dt.timezone.utc)
CULPRIT_KINDS = ("breaks_test", "breaks_build", "breaks_periodic", "breaks_new_job")
SPREAD_KINDS = CULPRIT_KINDS[:3]  # planted at random commits of the first half of the day
LANDRACE_EVERY = 2  # worlds whose seed is a multiple of this have breaks_new_job
INNOCENT_KINDS = ("flaky_only", "flaky_beside", "infra_only", "pre_existing")
HELD_KINDS = ("breaks_last",)  # a culprit no guardian may propose yet (see the module docstring)
FLAKY_RATE = 0.05
KNOWN_FLAKY_RATE = 0.30
INFRA_OUTAGE_MIN = 60
# the planted tests' file and class: commit_health names a failing test `Class.test (file)`
TEST_FILE, TEST_CLASS = "test_trunk.py", "TestTrunk"


@dataclass(frozen=True)
class Group:
    workflow: str
    name: str
    duration_min: int
    every: int = 1  # runs on commits whose index is a multiple of this; skipped on the others

    @property
    def job(self) -> str:
        """The job's name as GitHub gives it: the group's without the workflow, with its shard
        (`test (default, 1, 1, runner)`), which the HUD strips again to find the group."""
        return re.sub(r"\(([^,()]+), ", r"(\1, 1, 1, ", self.name.split(" / ", 1)[1])

    @property
    def test_config(self) -> str | None:
        """A test job's config (the HUD expects test results from such a job), None for a build."""
        m = re.search(r"\(([^,()]+),", self.name)
        return m.group(1) if m else None


GROUPS = {
    "breaks_test": Group("pull", "pull / linux-jammy-py3.10-gcc11 / test (default, linux.4xlarge)", 70),
    "breaks_build": Group("pull", "pull / linux-jammy-py3.10-clang12 / build", 35),
    "breaks_periodic": Group("periodic", "periodic / linux-jammy-cuda12.8-debug / test (default, linux.g5.4xlarge."
                             "nvidia.gpu)", 150, every=4),
    "flaky_only": Group("trunk", "trunk / linux-jammy-cuda12.8 / test (default, linux.g5.4xlarge.nvidia.gpu)", 90),
    "known_flaky": Group("trunk", "trunk / macos-py3-arm64 / test (default, macos-m1-stable)", 75),
    "infra_only": Group("trunk", "trunk / win-vs2022-cpu-py3 / test (default, windows.4xlarge)", 80),
    "pre_existing": Group("pull", "pull / linux-jammy-py3.10-gcc11 / test (crossref, linux.2xlarge)", 60),
    "healthy": Group("pull", "pull / linux-docs / build-docs-python-false", 25),
}
# the job breaks_new_job's landrace adds (a world without that planting does not have it)
NEW_JOB = Group("pull", "pull / linux-noble-py3.13-gcc14 / test (default, linux.4xlarge)", 60)
BLOCKING = ("pull", "trunk")


@dataclass(frozen=True)
class Planting:
    kind: str
    group: str
    commit: int
    test: str


def sha(seed: int, i: int) -> str:
    return f"{zlib.crc32(f'{seed}:{i}'.encode()):08x}" + f"{i:032x}"


def blames(signal_key: str, p: Planting) -> bool:
    """Whether a guardian's signal (its job group, or `group :: test`) is about planting `p`: its
    test's signal, or its group's (a group holding two plantings, breaks_test's and
    flaky_beside's, fails for either)."""
    return signal_key in (p.group, p.group + TEST_SEPARATOR + p.test)


def test_name(name: str) -> str:
    """A planted test as commit_health lists it (`Class.test (file)`)."""
    return f"{TEST_CLASS}.{name} ({TEST_FILE})"


class TrunkWorld:
    def __init__(self, seed: int, commits: int = 48, push_every_min: int = 10, flaky_rate: float = FLAKY_RATE):
        rng = random.Random(seed)
        self.seed, self.push_every, self.flaky_rate = seed, push_every_min, flaky_rate
        self.shas = [sha(seed, i) for i in range(commits)]
        self.index = {s: i for i, s in enumerate(self.shas)}
        culprits = rng.sample(range(6, commits // 2), len(SPREAD_KINDS) + 1)
        self.plantings = [Planting(k, GROUPS[k].name, c, test_name(f"test_{k}_{seed}"))
                          for k, c in zip((*SPREAD_KINDS, "infra_only"), culprits)]
        self.plantings += [Planting("flaky_only", GROUPS["flaky_only"].name, 0, test_name(f"test_flaky_{seed}")),
                           Planting("pre_existing", GROUPS["pre_existing"].name, 0, test_name(f"test_broken_{seed}")),
                           Planting("flaky_beside", GROUPS["breaks_test"].name, 0,
                                    test_name(f"test_flaky_beside_{seed}"))]
        self.known_flaky_test = test_name(f"test_known_flaky_{seed}")
        self.groups = dict(GROUPS)
        self.since: dict[str, int] = {}  # a job added by a commit: its group -> that commit
        self.attempts: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (group, commit) -> (start, end) min
        for i in range(commits):
            for g in GROUPS.values():
                if i % g.every == 0:
                    self._start(g, i, self.pushed_min(i), rng)
        if seed % LANDRACE_EVERY == 0:
            self._plant_landrace(commits - 2)
        else:  # no random draw: the rest of the world is the same
            self.plantings.append(Planting("breaks_last", GROUPS["infra_only"].name, commits - 1,
                                           test_name(f"test_breaks_last_{seed}")))
        self.restarts: list[tuple[str, int, str, int]] = []

    def _plant_landrace(self, culprit: int) -> None:
        """breaks_new_job (see the module docstring): the job added by the commit before `culprit`,
        its first attempt there dead at startup and retried when that commit's run completed. Its
        own random draws, so that the rest of the world is the same with or without it."""
        g, added = NEW_JOB, culprit - 1
        self.groups["breaks_new_job"], self.since[g.name] = g, added
        test = test_name(f"test_breaks_new_job_{self.seed}")
        self.plantings.append(Planting("breaks_new_job", g.name, culprit, test))
        rng = random.Random(zlib.crc32(f"{self.seed}:{g.name}".encode()))
        for i in range(added, len(self.shas)):
            self._start(g, i, self.pushed_min(i), rng)
        start, _ = self.attempts[g.name, added][0]
        self.attempts[g.name, added] = [(start, start + 1)]
        run = {x.name for x in self.groups.values() if x.workflow == g.workflow}
        completed = max(a[0][1] for (name, i), a in self.attempts.items() if i == added and name in run)
        self._start(g, added, completed, rng)

    def exists(self, g: Group, i: int) -> bool:
        """Whether commit i's workflow has the job at all (a job added later is not there)."""
        return i >= self.since.get(g.name, 0)

    def pushed_min(self, i: int) -> int:
        return i * self.push_every

    def pushed_at(self, i: int) -> dt.datetime:
        return T0 + dt.timedelta(minutes=self.pushed_min(i))

    def _start(self, g: Group, i: int, at: int, rng: random.Random) -> None:
        start = at + rng.randint(1, 6)  # queueing
        self.attempts.setdefault((g.name, i), []).append((start, start + g.duration_min + rng.randint(-5, 5)))

    # ---- outcomes --------------------------------------------------------------------

    def outcome(self, group: str, i: int, attempt: int, end_min: int) -> tuple[bool, str | None, list[str]]:
        """(failed, failure_class, failing tests) of one attempt."""
        rng = random.Random(zlib.crc32(f"{self.seed}:{group}:{i}:{attempt}".encode()))
        new, classes = [], []
        for p in self.plantings:
            if p.group != group:
                continue
            if p.kind in ("breaks_test", "breaks_periodic", "pre_existing") and i >= p.commit:
                new.append(p.test)
            elif p.kind == "breaks_build" and i >= p.commit:
                classes.append("new")
            elif p.kind in ("flaky_only", "flaky_beside") and rng.random() < self.flaky_rate:
                new.append(p.test)
            elif p.kind == "infra_only" and 0 <= end_min - self.pushed_min(p.commit) < INFRA_OUTAGE_MIN:
                classes.append("infra")
            elif p.kind in ("breaks_new_job", "breaks_last") and i >= p.commit:
                new.append(p.test)
            elif p.kind == "breaks_new_job" and (i, attempt) == (p.commit - 1, 0):
                classes.append("infra")  # the runner never came up
        if group == GROUPS["known_flaky"].name and rng.random() < KNOWN_FLAKY_RATE:
            return True, "known_flaky", [self.known_flaky_test]
        if new or "new" in classes:
            return True, "new", new
        if classes:
            return True, "infra", []
        return False, None, []

    def rows(self, now_min: int) -> list[dict]:
        """commit_health rows as of `now_min` simulated minutes."""
        out = []
        for i, s in enumerate(self.shas):
            if self.pushed_min(i) > now_min:
                break
            for g in self.groups.values():
                if self.exists(g, i):
                    out.append(self._row(g, i, s, now_min))
        return out

    def _row(self, g: Group, i: int, s: str, now: int) -> dict:
        atts = [a for a in self.attempts.get((g.name, i), []) if a[0] <= now]
        base = {"sha": s, "pushed_at": self.pushed_at(i), "workflow": g.workflow, "job_group": g.name,
                "blocking": g.workflow in BLOCKING, "run_id": self.run_id(g.workflow, i), "run_attempt": 1,
                "attempts": len(atts), "job_id": None, "failure_class": None, "failing_tests": [],
                "failing_test_count": 0}
        if not atts:
            scheduled = (g.name, i) in self.attempts
            return {**base, "state": "pending" if scheduled else "skipped", "attempts": 0}
        if any(end > now for _, end in atts):
            return {**base, "state": "pending", "run_attempt": len(atts)}
        results = [self.outcome(g.name, i, k, end) for k, (_, end) in enumerate(atts)]
        failed, cls, tests = results[-1]
        state = "failure" if all(r[0] for r in results) else "flaky" if any(r[0] for r in results) else "success"
        return {**base, "state": state, "run_attempt": len(atts), "failure_class": cls if state == "failure" else None,
                "failing_tests": tests if state == "failure" else [],
                "failing_test_count": len(tests) if state == "failure" else 0}

    def run_id(self, workflow: str, i: int) -> int:
        return zlib.crc32(f"{self.seed}:{workflow}:{i}".encode())

    # ---- the lake's job tables -------------------------------------------------------

    def job_tables(self, now_min: int) -> dict[str, list[dict]]:
        """The job tables as the webhooks and test reports would have filled them by `now_min`:
        a workflow_job row per attempt started (in progress until its end), a workflow_run row
        per run attempt (completed once its jobs are), per commit and failing test the jobs it
        failed in, a test_jobs row per finished test job (infra-suspect when infrastructure
        killed it, as the HUD then classes the failure), and the flaky verdict of the known flaky
        test. A job is created when it starts (no queue): commit_health's rows count an attempt
        from its start too. Skipped jobs have no row: the HUD then has no cell, `rows` a skipped one."""
        jobs, outcomes, test_jobs = [], {}, []
        runs: dict[tuple[int, int], dict] = {}
        for gi, g in enumerate(self.groups.values()):
            for i, s in enumerate(self.shas):
                for k, (start, end) in enumerate(self.attempts.get((g.name, i), [])):
                    if start > now_min:
                        continue
                    job_id, run_id, done = 1_000_000 + i * 10_000 + gi * 100 + k, self.run_id(g.workflow, i), \
                        end <= now_min
                    failed, cls, tests = self.outcome(g.name, i, k, end) if done else (False, None, [])
                    jobs.append(self._job_row(g, s, job_id, run_id, k + 1, start, end if done else None, failed))
                    run = runs.setdefault((run_id, k + 1), {"id": run_id, "run_attempt": k + 1, "name": g.workflow,
                                                            "event": "push", "status": "completed",
                                                            "conclusion": "success", "created_at": self.at(start),
                                                            "updated_at": self.at(start)})
                    run["created_at"] = min(run["created_at"], self.at(start))
                    if not done:
                        run.update(status="in_progress", conclusion=None)
                    else:
                        run["updated_at"] = max(run["updated_at"], self.at(end))
                        if failed and run["conclusion"] is not None:
                            run["conclusion"] = "failure"
                    if done and g.test_config is not None:
                        test_jobs.append({"job_id": job_id, "workflow_run_attempt": k + 1,
                                          "infra_suspect": cls == "infra", "infra_reason": "runner died"
                                          if cls == "infra" else None})
                    for t in tests:
                        outcomes.setdefault((s, t), []).append(job_id)
        return {"workflow_job": jobs, "workflow_run": list(runs.values()),
                "test_sha_outcomes": [{**_split(t), "head_sha": s, "failed": len(ids), "errors": 0,
                                       "failing_job_ids": ids} for (s, t), ids in outcomes.items()],
                "test_jobs": test_jobs,
                "flaky_tests": [{**_split(self.known_flaky_test), "verdict": "flaky"}]}

    def at(self, minute: int) -> dt.datetime:
        return T0 + dt.timedelta(minutes=minute)

    def _job_row(self, g: Group, s: str, job_id: int, run_id: int, attempt: int, start: int, end: int | None,
                 failed: bool) -> dict:
        done = end is not None
        return {"id": job_id, "run_id": run_id, "run_attempt": attempt, "workflow_name": g.workflow, "name": g.job,
                "head_sha": s, "head_branch": "main", "status": "completed" if done else "in_progress",
                "conclusion": ("failure" if failed else "success") if done else None,
                "created_at": self.at(start), "started_at": self.at(start),
                "completed_at": self.at(end) if done else None, "labels": [], "queue_s": 0.0,
                "duration_s": (end - start) * 60.0 if done else None, "build_env": None,
                "test_config": g.test_config, "platform": "linux", "received_at": self.at(end if done else start)}

    # ---- restarts --------------------------------------------------------------------

    def restart(self, workflow: str, commit_sha: str, mode: str, now_min: int) -> int:
        """A re-run as GitHub does it: refused while the run is in flight; `rerun-failed-jobs`
        runs the failed jobs again, `rerun` every job (a skipped one too). Returns jobs started."""
        i = self.index[commit_sha]
        groups = [g for g in self.groups.values() if g.workflow == workflow and self.exists(g, i)]
        rows = {g.name: self._row(g, i, commit_sha, now_min) for g in groups}
        if any(r["state"] == "pending" for r in rows.values()):
            return 0
        chosen = [g for g in groups if mode == "rerun" or rows[g.name]["state"] == "failure"]
        rng = random.Random(zlib.crc32(f"{self.seed}:{commit_sha}:{now_min}".encode()))
        for g in chosen:
            self._start(g, i, now_min, rng)
        self.restarts.append((workflow, i, mode, now_min))
        return len(chosen)

    def culprits(self) -> dict[int, Planting]:
        return {p.commit: p for p in self.plantings if p.kind in CULPRIT_KINDS}


def _split(test: str) -> dict:
    """`Class.test (file)` as test_sha_outcomes and flaky_tests hold it."""
    m = re.fullmatch(r"([^.]+)\.(\S+) \((.+)\)", test)
    return {"classname": m.group(1), "name": m.group(2), "file": m.group(3)}


def write_job_tables(world: TrunkWorld, lake: Lake, now_min: int) -> None:
    """Write `world`'s job tables as of `now_min` to `lake`, typed as the HUD reads them, each
    partition replaced whole: the CI in the partition of the world's first day (a later minute's
    rewrite then never leaves a stale copy in another day; readers take a window of days), the
    flaky verdicts, which are daily, in today's."""
    for table, rows in world.job_tables(now_min).items():
        day = (world.at(now_min) if table == "flaky_tests" else T0).date().isoformat()
        schema = arrow_schema(table)
        schema = schema.remove(schema.get_field_index("day")) if "day" in schema.names else schema
        lake.write(table, day, pa.Table.from_pylist(rows, schema=schema))
