"""The planted truth: which tests are flaky, fail on one platform, or get broken for a while,
which test files get slower for a while, and which pull-request jobs are marked unstable.

Detectors are scored against these, so each is drawn only among tests that the selected
configs actually run and do not skip: a planted test nobody executes could never be found.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from dataclasses import dataclass

from .catalog import PR_WORKFLOWS, TestConfig, TestFile, TestTemplate, config_files, skip_reason
from .model import EPOCH_DAY

FLAKY_MESSAGES = (
    "AssertionError: Tensor-likes are not close!",
    "RuntimeError: NCCL communicator was aborted on rank 1",
    "torch._dynamo.exc.InternalTorchDynamoError: KeyError: 'L__self__'",
    "TimeoutError: Timed out after 300 seconds waiting for process group",
    "AssertionError: Scalars are not equal!",
    "RuntimeError: Process 2 exited with error code 10 and exception: ConnectionResetError",
)
PLATFORM_MESSAGES = {
    "win": "OSError: [WinError 1455] The paging file is too small for this operation to complete",
    "rocm": "RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
    "mac": "AssertionError: Tensor-likes are not close! (MPS fallback returned different values)",
    "xpu": "RuntimeError: UR error: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
    "linux": "AssertionError: Tensor-likes are not close!",
}
BROKEN_MESSAGE = "AssertionError: False is not true : expected the new fast path to be taken"


@dataclass(frozen=True)
class Rule:
    """A planted test: per-try failure probability `rate` on `platforms` (None = all)."""

    template: TestTemplate
    kind: str  # flaky, platform
    rate: float
    platforms: frozenset[str] | None
    message: str


@dataclass(frozen=True)
class Breakage:
    """Tests failing on every config from main commit `first` until (excluding) `fixed`."""

    first: int
    fixed: int
    templates: tuple[TestTemplate, ...]


def _runnable(configs: tuple[TestConfig, ...], suite: tuple[TestFile, ...]):
    """Per file path: the configs that run it."""
    by_file: dict[str, list[TestConfig]] = {}
    for cfg in configs:
        for f in config_files(cfg, suite):
            by_file.setdefault(f.path, []).append(cfg)
    return by_file


def plant_rules(seed: int, suite: tuple[TestFile, ...], configs: tuple[TestConfig, ...],
                platform_failures: int | None = None) -> list[Rule]:
    """Flaky tests (2.5% of the runnable tests) and tests failing on one platform (0.6%, at least 2;
    `platform_failures` overrides that count, 0 for none)."""
    rng = random.Random(f"{seed}|planted")
    by_file = _runnable(configs, suite)
    candidates = [(t, by_file[f.path]) for f in suite if f.path in by_file for t in f.tests if not t.skip]
    if not candidates:
        return []
    n_tests = len(candidates)
    n_flaky = max(3, round(0.025 * n_tests))
    n_platform = max(2, round(0.006 * n_tests)) if platform_failures is None else platform_failures
    picks = rng.sample(candidates, min(len(candidates), n_flaky + n_platform))
    rules = []
    for i, (t, cfgs) in enumerate(picks):
        platforms = sorted({c.platform for c in cfgs if not skip_reason(t, c)})
        if not platforms:
            continue
        if i < n_flaky:
            # log-uniform between 0.5% and 30% per try
            rate = round(math.exp(rng.uniform(math.log(0.005), math.log(0.30))), 4)
            only = None
            if (t.device_generic or rng.random() < 0.3) and platforms:
                only = frozenset([rng.choice(platforms)])
            rules.append(Rule(t, "flaky", rate, only, rng.choice(FLAKY_MESSAGES)))
        else:
            preferred = [p for p in platforms if p in ("win", "rocm", "mac", "xpu")] or platforms
            p = rng.choice(preferred)
            rules.append(Rule(t, "platform", round(rng.uniform(0.6, 0.95), 3), frozenset([p]),
                              PLATFORM_MESSAGES[p]))
    return rules


def identity(t: TestTemplate, classname: str = "", name: str = "") -> dict:
    """How ground-truth records name a test: the lake's file, invoking_file, classname, name."""
    return {"file": t.file + ".py", "invoking_file": t.file.replace("/", "."),
            "classname": classname or t.class_base, "name": name or t.name_base}


def day_number(day: dt.date) -> int:
    return (day - EPOCH_DAY).days


def breakages_for_day(seed: int, day: dt.date, commits_per_day: int, suite: tuple[TestFile, ...],
                      configs: tuple[TestConfig, ...], exclude: frozenset[TestTemplate]) -> list[Breakage]:
    """A day's regressions start on that day's commits and are fixed at most one day of
    commits later, so a day's runs only need the breakages of itself and the day before.
    Tests in `exclude` (already flaky or platform-failing) are not broken on top of that."""
    rng = random.Random(f"{seed}|breakage|{day.isoformat()}")
    by_file = _runnable(configs, suite)
    files = [f for f in suite if f.path in by_file]
    out = []
    n = rng.choices((1, 2), weights=(0.6, 0.4))[0]  # PyTorch lands a regression (or a revert) most days
    base = day_number(day) * commits_per_day
    for _ in range(n if files and commits_per_day >= 2 else 0):
        f = rng.choice(files)
        plain = [t for t in f.tests if not t.device_generic and not t.skip and t not in exclude]
        if not plain:
            continue
        first = base + rng.randrange(commits_per_day)
        length = rng.randint(2, max(2, commits_per_day))
        templates = tuple(rng.sample(plain, min(len(plain), rng.randint(1, 3))))
        out.append(Breakage(first, first + length, templates))
    return out


@dataclass(frozen=True)
class TimeRegression:
    """`file` runs `factor` times slower from main commit `first` until (excluding) `fixed`, on
    the configs of `platforms` (None = every config that runs it)."""

    first: int
    fixed: int
    file: str
    factor: float
    platforms: frozenset[str] | None


TIME_REGRESSION_MAX_DAYS = 7
# Files at least this long (on a linux CPU runner) can be planted; the factor is capped so that
# a file stays under an hour there, as build_suite keeps them (the slowest config runs 3x).
TIME_REGRESSION_MIN_SECONDS = 20.0
TIME_REGRESSION_MAX_SECONDS = 3600.0


def time_regressions_for_day(seed: int, day: dt.date, commits_per_day: int, suite: tuple[TestFile, ...],
                             configs: tuple[TestConfig, ...], rate: float) -> list[TimeRegression]:
    """The day's draw: with probability `rate`, one file (chosen in proportion to its time: a
    change is likelier to slow the files that run the most code) gets 1.5x-4x slower from one
    of the day's commits, on every config or on one platform, for one to
    TIME_REGRESSION_MAX_DAYS days of commits (a fix, a revert, or a test moved to the slow
    suite). PyTorch sees several of these a month. See `World.time_regressions` for overlaps."""
    rng = random.Random(f"{seed}|time-regression|{day.isoformat()}")
    if rate <= 0 or rng.random() >= rate:
        return []
    by_file = _runnable(configs, suite)
    files = [f for f in suite if f.path in by_file
             and TIME_REGRESSION_MIN_SECONDS <= f.seconds <= TIME_REGRESSION_MAX_SECONDS / 1.5]
    if not files:
        return []
    f = rng.choices(files, weights=[f.seconds for f in files])[0]
    top = min(4.0, TIME_REGRESSION_MAX_SECONDS / f.seconds)
    factor = round(math.exp(rng.uniform(math.log(1.5), math.log(top))), 3)
    platforms = None
    if rng.random() < 0.4:
        platforms = frozenset([rng.choice(sorted({c.platform for c in by_file[f.path]}))])
    first = day_number(day) * commits_per_day + rng.randrange(commits_per_day)
    fixed = first + rng.randint(commits_per_day, TIME_REGRESSION_MAX_DAYS * commits_per_day)
    return [TimeRegression(first, fixed, f.path, factor, platforms)]


def overlaps(a: TimeRegression, b: TimeRegression) -> bool:
    """Same file, intersecting commit ranges and platforms: the two would compound."""
    return (a.file == b.file and a.first < b.fixed and b.first < a.fixed
            and (a.platforms is None or b.platforms is None or bool(a.platforms & b.platforms)))


UNSTABLE_AUTHOR = "ci-sheriff"  # a maintainer with write access: only such authors' issues count
UNSTABLE_FIRST_ISSUE = 170_000


@dataclass(frozen=True)
class UnstableJob:
    """An open issue titled `UNSTABLE <job>` that marks jobs of a pull-request workflow unstable
    (they run, but their failures are not the pull request's): with `test_config`, the test jobs
    of that build environment and config (`pull / <env> / test (<config>)`, every shard and
    runner); without, every job of the build environment, its build included (`pull / <env>`),
    as PyTorch's maintainers mark a whole environment whose runners misbehave."""

    workflow: str
    build_env: str
    test_config: str | None
    number: int

    @property
    def job(self) -> str:
        env = f"{self.workflow} / {self.build_env}"
        return f"{env} / test ({self.test_config})" if self.test_config else env

    def marks(self, workflow: str, cfg: TestConfig | None, kind: str) -> bool:
        """Whether a job (its workflow, config and kind: build, test, lint...) is one it marks."""
        if cfg is None or workflow != self.workflow or cfg.build_env != self.build_env:
            return False
        return self.test_config is None or (kind == "test" and cfg.test_config == self.test_config)


def plant_unstable(seed: int, configs: tuple[TestConfig, ...], count: int) -> tuple[UnstableJob, ...]:
    """Up to `count` (0-2) unstable marks on the pull-request workflows' jobs: one test config, then
    a whole build environment, the one with the fewest test shards (so that the jobs it marks do not
    crowd out the failures of the other kinds a scorer wants). Drawn from their own generator, so
    nothing else moves."""
    rng = random.Random(f"{seed}|unstable")
    pr = [c for c in configs if c.workflow in PR_WORKFLOWS and not c.build_env.endswith("-test")]
    shards: dict[tuple[str, str], int] = {}
    for c in pr:
        shards[(c.workflow, c.build_env)] = shards.get((c.workflow, c.build_env), 0) + c.num_shards
    fewest = sorted(k for k, n in shards.items() if n == min(shards.values(), default=0))
    env = rng.choice(fewest) if fewest else None
    out: list[UnstableJob] = []
    rest = [c for c in pr if (c.workflow, c.build_env) != env]
    if count >= 1 and rest:
        c = rng.choice(rest)
        out.append(UnstableJob(c.workflow, c.build_env, c.test_config, UNSTABLE_FIRST_ISSUE))
    if count >= 2 and env is not None:
        out.append(UnstableJob(env[0], env[1], None, UNSTABLE_FIRST_ISSUE + 1))
    return tuple(out)
