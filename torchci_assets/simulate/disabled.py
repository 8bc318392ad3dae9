"""The life of disabled tests: PyTorch's rerun_disabled_tests jobs and what they are planted to show.

PyTorch runs its disabled tests in scheduled jobs of their own, the test config's name followed by
the mode (`linux-jammy-py3.10-gcc11 / test (default, 1, 1, linux.4xlarge, rerun_disabled_tests)`):
every disabled test runs up to 50 times; one that passed all of them is reported passed, one that
failed all of them failed, and one in between skipped with `{"flaky": true, "num_red": ..,
"num_green": .., "max_num_retries": 50}`; every test that is not disabled is skipped with the
mode's message. The simulator runs such a job once a day per test config, over the tests it
knows to be disabled, and plants, from the day the lifecycle starts:

- `fixed`: tests disabled before the archive begins, flaky until their fix lands on a known day
  and passing ever after (the re-enabling must find them);
- `lingering`: tests disabled before the archive begins that stay flaky at a low rate, so a few
  clean reruns in a row are likely: a rule that re-enables on thin evidence re-enables them, and
  they flake again;
- `burst`: BURST_SIZE tests of one file (a broken fixture) flaky together from one day on (one
  issue for the file, not fifty).

The simulator cannot see which issues the pipeline files, so "disabled" is the planted truth: the
lifecycle's tests, and every planted flaky or platform-failing test (which the pipeline disables).
Rerun results of a test before its issue exists say nothing, and the re-enabling ignores them.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass

from .catalog import TestConfig, TestFile, TestTemplate, config_files, skip_reason

RERUN_MODE = "rerun_disabled_tests"
MAX_NUM_RETRIES = 50
ENABLED_MESSAGE = "Test is enabled but --rerun-disabled-tests verification mode is set, so only disabled tests are run"
RERUN_HOUR = 7  # UTC: the daily rerun runs start at 07:29
FIXED_TESTS = 12
LINGERING_TESTS = 8
BURST_SIZE = 50
FIX_DAYS = (2, 9)  # fixes land between these days after the lifecycle starts
BURST_DAY = 5
FLAKY_MESSAGE = "AssertionError: Tensor-likes are not close!"
BURST_MESSAGE = "RuntimeError: fixture 'tmp_cache_dir' was torn down while a worker still used it"


@dataclass(frozen=True)
class LifeRule:
    """A test failing each try with `rate` from `start` (None: before the archive) until `fixed`
    (None: never fixed), on every platform that runs it."""

    template: TestTemplate
    kind: str  # fixed, lingering, burst
    rate: float
    start: dt.date | None
    fixed: dt.date | None
    message: str

    def rate_on(self, day: dt.date) -> float:
        if (self.start and day < self.start) or (self.fixed and day >= self.fixed):
            return 0.0
        return self.rate


def _plain(files: list[TestFile], exclude: frozenset[TestTemplate]) -> list[TestTemplate]:
    return [t for f in files for t in f.tests if not t.device_generic and not t.skip and t not in exclude]


def plant_lifecycle(seed: int, suite: tuple[TestFile, ...], configs: tuple[TestConfig, ...], first: dt.date,
                    exclude: frozenset[TestTemplate]) -> tuple[LifeRule, ...]:
    """The fixed, lingering and burst tests of a lifecycle starting on `first`, drawn among the
    plain tests the configs run (not planted already)."""
    rng = random.Random(f"{seed}|lifecycle")
    runnable = {f.path for c in configs for f in config_files(c, suite)}
    files = [f for f in suite if f.path in runnable]
    burst_file = max(files, key=lambda f: (len(_plain([f], exclude)), f.path))
    burst = rng.sample(_plain([burst_file], exclude), min(BURST_SIZE, len(_plain([burst_file], exclude))))
    others = rng.sample(_plain([f for f in files if f is not burst_file], exclude), FIXED_TESTS + LINGERING_TESTS)
    start = first + dt.timedelta(days=BURST_DAY)
    rules = [LifeRule(t, "burst", round(rng.uniform(0.05, 0.2), 3), start, None, BURST_MESSAGE) for t in burst]
    for i, t in enumerate(others):
        if i < FIXED_TESTS:
            fixed = first + dt.timedelta(days=rng.randint(*FIX_DAYS))
            rules.append(LifeRule(t, "fixed", round(rng.uniform(0.05, 0.3), 3), None, fixed, FLAKY_MESSAGE))
        else:  # low enough to pass a few reruns of 50 in a row now and then
            rules.append(LifeRule(t, "lingering", round(rng.uniform(0.003, 0.02), 4), None, None, FLAKY_MESSAGE))
    return tuple(rules)


def rerun_job_name(cfg: TestConfig) -> str:
    return f"{cfg.build_env} / test ({cfg.test_config}, 1, 1, {cfg.runner}, {RERUN_MODE})"


def rerun_reds(rng: random.Random, rates: dict[TestTemplate, float], cfg: TestConfig) -> dict[TestTemplate, int]:
    """Per disabled test this config runs, how many of its MAX_NUM_RETRIES reruns failed."""
    return {t: sum(rng.random() < rate for _ in range(MAX_NUM_RETRIES)) if rate > 0 else 0
            for t, rate in rates.items() if not skip_reason(t, cfg)}


def rerun_case(reds: int) -> tuple[str, str]:
    """(result, message) of a disabled test's case in the report, as PyTorch's rerun mode writes it."""
    if reds == 0:
        return "passed", ""
    if reds == MAX_NUM_RETRIES:
        return "failed", FLAKY_MESSAGE
    return "skipped", json.dumps({"flaky": True, "num_red": reds, "num_green": MAX_NUM_RETRIES - reds,
                                  "max_num_retries": MAX_NUM_RETRIES})


def lifecycle_truth(rules: tuple[LifeRule, ...]) -> dict:
    """ground-truth.json's `disabled_lifecycle`: each planted test as PyTorch's lists name it
    (`name (__main__.Class)`), its file, kind, per-try rate and the days it starts and is fixed."""
    return {"rerun_mode": RERUN_MODE, "max_num_retries": MAX_NUM_RETRIES, "tests": [
        {"test": f"{r.template.name_base} (__main__.{r.template.class_base})", "file": r.template.file + ".py",
         "kind": r.kind, "rate": r.rate, "start": r.start.isoformat() if r.start else None,
         "fixed": r.fixed.isoformat() if r.fixed else None} for r in rules]}
