"""Main's CI as the trunk guardians see it, with planted breakages and restarts that really run.

A small world of its own beside the archive simulator: it yields `commit_health` rows (each main
commit's state per job group as of a minute of simulated time) rather than webhooks, so the
autorevert and the alerts can be run every 5 simulated minutes for hours, with each restart they
order (their dry-run ledger rows) becoming a new attempt that finishes a job's duration later.

Planted per world, each on its own job group and (culprits) its own commit:
  breaks_test      a commit makes one test fail on every later commit;
  breaks_build     a commit breaks a build;
  breaks_periodic  a commit breaks a test only a periodic job runs, and that job runs on one
                   commit in four (the others are skipped: a restart of the run runs it);
  flaky_only       a test that is not known to be flaky fails 5% of attempts, anywhere;
  known_flaky      (always present) a test the flaky verdicts know fails 30% of attempts;
  infra_only       for an hour from a commit's push, every attempt of a job dies of infrastructure;
  pre_existing     a test that fails on every commit, the first included.
Only the first three have a culprit; a revert proposal anywhere else is a false one.
"""

from __future__ import annotations

import datetime as dt
import random
import zlib
from dataclasses import dataclass

T0 = dt.datetime(2026, 11, 2, 6, 0, tzinfo=dt.timezone.utc)
CULPRIT_KINDS = ("breaks_test", "breaks_build", "breaks_periodic")
INNOCENT_KINDS = ("flaky_only", "infra_only", "pre_existing")
FLAKY_RATE = 0.05
KNOWN_FLAKY_RATE = 0.30
INFRA_OUTAGE_MIN = 60


@dataclass(frozen=True)
class Group:
    workflow: str
    name: str
    duration_min: int
    every: int = 1  # runs on commits whose index is a multiple of this; skipped on the others


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
BLOCKING = ("pull", "trunk")


@dataclass(frozen=True)
class Planting:
    kind: str
    group: str
    commit: int
    test: str


def sha(seed: int, i: int) -> str:
    return f"{zlib.crc32(f'{seed}:{i}'.encode()):08x}" + f"{i:032x}"


class TrunkWorld:
    def __init__(self, seed: int, commits: int = 48, push_every_min: int = 10, flaky_rate: float = FLAKY_RATE):
        rng = random.Random(seed)
        self.seed, self.push_every, self.flaky_rate = seed, push_every_min, flaky_rate
        self.shas = [sha(seed, i) for i in range(commits)]
        self.index = {s: i for i, s in enumerate(self.shas)}
        culprits = rng.sample(range(6, commits // 2), len(CULPRIT_KINDS) + 1)
        self.plantings = [Planting(k, GROUPS[k].name, c, f"test_{k}_{seed}")
                          for k, c in zip((*CULPRIT_KINDS, "infra_only"), culprits)]
        self.plantings += [Planting("flaky_only", GROUPS["flaky_only"].name, 0, f"test_flaky_{seed}"),
                           Planting("pre_existing", GROUPS["pre_existing"].name, 0, f"test_broken_{seed}")]
        self.attempts: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (group, commit) -> (start, end) min
        for i in range(commits):
            for g in GROUPS.values():
                if i % g.every == 0:
                    self._start(g, i, self.pushed_min(i), rng)
        self.restarts: list[tuple[str, int, str, int]] = []

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
            elif p.kind == "flaky_only" and rng.random() < self.flaky_rate:
                new.append(p.test)
            elif p.kind == "infra_only" and 0 <= end_min - self.pushed_min(p.commit) < INFRA_OUTAGE_MIN:
                classes.append("infra")
        if group == GROUPS["known_flaky"].name and rng.random() < KNOWN_FLAKY_RATE:
            return True, "known_flaky", [f"test_known_flaky_{self.seed}"]
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
            for g in GROUPS.values():
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

    # ---- restarts --------------------------------------------------------------------

    def restart(self, workflow: str, commit_sha: str, mode: str, now_min: int) -> int:
        """A re-run as GitHub does it: refused while the run is in flight; `rerun-failed-jobs`
        runs the failed jobs again, `rerun` every job (a skipped one too). Returns jobs started."""
        i = self.index[commit_sha]
        groups = [g for g in GROUPS.values() if g.workflow == workflow]
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
