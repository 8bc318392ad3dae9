"""What time to plan each test file at: smoothed snapshots, and estimates for files never seen.

Smoothing. `torchci shard-plan` accepts several test-times.json snapshots (say the last three
days'). Each entry is planned at its median over the snapshots that have it. A snapshot is
already a multi-day average, so what differs between consecutive ones is mostly one bad day
entering or leaving the window (a slow runner pool, a run that retried everything): the
median ignores one such snapshot out of three, where a mean would carry a third of it into
every plan. The price is that a real step change is followed once it is in more than half of
the snapshots; `test_time_regressions` reports such steps the day they happen. The median is
order-free, so the snapshots can be given in any order; an even count takes the mean of the
two middle values.

Files without history. A file listed for a config whose table has no time for it (a new
file, or one newly enabled on that platform) is estimated, in order:

1. From the same file in other configs, scaled to this one. For each other config K that
   has the file and shares at least MIN_SHARED_FILES timed files with this config, the
   speed ratio is the median of the per-file log ratios over the shared files (robust:
   a file skipped in one config and thousands of seconds in the other moves a mean, not a
   median), and K's estimate is K's time for the file times that ratio. How well K predicts
   this config is the spread of those log ratios (1.4826 x MAD, the normal-consistent
   robust standard deviation): K's estimates are combined by a weighted median with weights
   1 / spread^2. A spread measured on few files can be small by chance, so it is shrunk
   towards PRIOR_SPREAD as if PRIOR_FILES more files had shown that spread (the usual
   conjugate prior on a variance); a near twin of this config still dominates, but ten
   lucky files do not.
2. PyTorch's "default" averages: the file's `default[test_config]` entry (recomputed as the
   mean over the build envs that ran the config when the snapshot's "default" section
   lacks it), else `default["default"]` (likewise recomputed over every config).
3. The median of the config's known files, as before (or FALLBACK_ESTIMATE_SECONDS when
   nothing is known at all).

Why MIN_SHARED_FILES = 10: the median of n log ratios has a standard error of about
1.25 s / sqrt(n); with the spread of comparable configs (s ~ 0.3) that is ~12% at ten
files, the size of a file's own day-to-day drift, and it doubles by three files. Below
that the ratio adds more error than it removes, and the unscaled averages of step 2 are
the better guess. Leave-one-out on PyTorch's snapshots (hide a file of 100 s or more from
a config, estimate it, compare; 467 to 951 files per snapshot) confirms the order of the
steps: the estimate is off by a median factor of e^0.05-0.07 (5-7%), PyTorch's "default"
averages by e^0.23-0.25 although they even contain the hidden time, and the median of the
config's known files by e^4.4 (about 80x: most files are short, the files that matter long).

Everything here is pure and deterministic (ties broken by name), like the planner.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from torchci_assets.derived.sharding.planner import FALLBACK_ESTIMATE_SECONDS, estimate_unknown_seconds

DEFAULT = "default"
MIN_SHARED_FILES = 10
PRIOR_SPREAD = 0.3  # log-scale spread of a typical comparable config pair (~ +-35%)
PRIOR_FILES = 5
_MAD_TO_SD = 1.4826

TestTimes = Mapping[str, Mapping[str, Mapping[str, float]]]
Key = tuple[str, str]


class Estimate(NamedTuple):
    seconds: float
    source: str  # how it was obtained, for people reading a plan


class ConfigTimes(NamedTuple):
    known: dict[str, float]  # the config's own times (empty for a config never seen)
    source: str  # "build_env/test_config" of the known times, "" when the config has none
    estimates: dict[str, Estimate]  # every listed file without a time in `known`
    fallback: float  # step 3's estimate


def smooth_test_times(snapshots: Sequence[TestTimes]) -> dict:
    """One test-times document whose every entry is its median over the `snapshots` that have it."""
    if len(snapshots) == 1:
        return {env: {cfg: dict(files) for cfg, files in cfgs.items()} for env, cfgs in snapshots[0].items()}
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for doc in snapshots:
        for env, cfgs in doc.items():
            for cfg, files in cfgs.items():
                into = values.setdefault(env, {}).setdefault(cfg, {})
                for name, seconds in files.items():
                    into.setdefault(name, []).append(float(seconds))
    return {env: {cfg: {name: statistics.median(v) for name, v in files.items()} for cfg, files in cfgs.items()}
            for env, cfgs in values.items()}


class Estimator:
    """Estimates over one test-times document; build it once and ask it for every config.

    The per-file index and the config-pair ratios are computed lazily and cached, so
    planning every config of a PyTorch snapshot costs only the files actually unknown.
    """

    def __init__(self, test_times: TestTimes):
        self._tables: dict[Key, Mapping[str, float]] = {
            (env, cfg): files for env, cfgs in test_times.items() for cfg, files in cfgs.items() if files}
        self._by_file: dict[str, list[Key]] | None = None
        self._ratios: dict[tuple[Key, Key], tuple[float, float] | None] = {}

    def config_times(self, build_env: str, test_config: str, tests: Iterable[str]) -> ConfigTimes:
        key = (build_env, test_config)
        known = dict(self._tables.get(key, {}))
        source = f"{build_env}/{test_config}" if known else ""
        fallback = estimate_unknown_seconds(known or self._default_table(test_config))
        estimates = {name: self.estimate(key, name, fallback)
                     for name in sorted(set(tests)) if name not in known}
        return ConfigTimes(known, source, estimates, fallback)

    def estimate(self, key: Key, name: str, fallback: float) -> Estimate:
        scaled = self._scaled(key, name)
        if scaled is not None:
            return scaled
        for config in (key[1], DEFAULT):
            average = self._default_average(config, name)
            if average is not None:
                return average
        source = "median of the config's known files" if key in self._tables else (
            "median of the default times" if fallback != FALLBACK_ESTIMATE_SECONDS else "no times at all")
        return Estimate(fallback, source)

    # -- step 1 -------------------------------------------------------------------------

    def _scaled(self, key: Key, name: str) -> Estimate | None:
        own = self._tables.get(key)
        if not own or len(own) < MIN_SHARED_FILES:
            return None
        votes = []
        for other in self._index().get(name, ()):
            seconds = self._tables[other][name]
            if other == key or seconds <= 0:
                continue
            ratio = self._ratio(key, other)
            if ratio is not None:
                log_ratio, weight = ratio
                votes.append((math.log(seconds) + log_ratio, other, weight))
        if not votes:
            return None
        value = _weighted_median(votes)
        return Estimate(math.exp(value), f"scaled from {len(votes)} other config{'s' * (len(votes) > 1)}")

    def _ratio(self, key: Key, other: Key) -> tuple[float, float] | None:
        """(median log ratio of this config's times to `other`'s, weight of `other`'s estimates)."""
        cached = self._ratios.get((key, other), False)
        if cached is not False:
            return cached
        own, theirs = self._tables[key], self._tables[other]
        small, large = (own, theirs) if len(own) <= len(theirs) else (theirs, own)
        logs = sorted(math.log(own[f] / theirs[f]) for f in small if f in large and own[f] > 0 and theirs[f] > 0)
        result = None
        if len(logs) >= MIN_SHARED_FILES:
            mid = statistics.median(logs)
            spread = _MAD_TO_SD * statistics.median(abs(x - mid) for x in logs)
            n = len(logs)
            variance = (n * spread ** 2 + PRIOR_FILES * PRIOR_SPREAD ** 2) / (n + PRIOR_FILES)
            result = (mid, 1.0 / variance)
        self._ratios[(key, other)] = result
        return result

    def _index(self) -> dict[str, list[Key]]:
        if self._by_file is None:
            self._by_file = {}
            for key in sorted(self._tables):
                for name in self._tables[key]:
                    self._by_file.setdefault(name, []).append(key)
        return self._by_file

    # -- step 2 -------------------------------------------------------------------------

    def _default_table(self, test_config: str) -> Mapping[str, float]:
        return self._tables.get((DEFAULT, test_config)) or self._tables.get((DEFAULT, DEFAULT)) or {}

    def _default_average(self, test_config: str, name: str) -> Estimate | None:
        table = self._tables.get((DEFAULT, test_config), {})
        if name in table:
            return Estimate(float(table[name]), f"{DEFAULT}/{test_config}")
        values = [self._tables[k][name] for k in self._index().get(name, ())
                  if k[0] != DEFAULT and (test_config == DEFAULT or k[1] == test_config)]
        if not values:
            return None
        where = "every config" if test_config == DEFAULT else f"{test_config} in {len(values)} build env(s)"
        return Estimate(sum(values) / len(values), f"mean over {where}")


def _weighted_median(votes: list[tuple[float, Key, float]]) -> float:
    """The smallest value whose cumulative weight reaches half the total (ties by config name)."""
    votes = sorted(votes)
    half = sum(w for _, _, w in votes) / 2
    acc = 0.0
    for value, _, weight in votes:
        acc += weight
        if acc >= half:
            return value
    return votes[-1][0]
