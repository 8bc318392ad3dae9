"""Times for shard plans: smoothing several snapshots, and estimates for files a config never ran."""

import copy
import math
import random

import pytest
from conftest import pytorch_json

from torchci_assets.derived.sharding.estimates import (
    MIN_SHARED_FILES,
    Estimator,
    smooth_test_times,
)
from torchci_assets.derived.sharding.planner import (
    FALLBACK_ESTIMATE_SECONDS,
    plan_shards,
    score_plan,
    select_times,
)



def real(day: str) -> dict:
    return pytorch_json(f"test-times.{day}.json")


def config(seed: int, files: int = 40, scale: float = 1.0, noise: float = 0.05) -> dict[str, float]:
    """A config's table: heavy-tailed base times, scaled, with a little per-file noise."""
    base = random.Random(0)
    rng = random.Random(seed)
    return {f"test_{i:03d}": base.paretovariate(1.2) * 30 * scale * math.exp(rng.gauss(0, noise))
            for i in range(files)}


def plan_with(times, tests, shards):
    return plan_shards(times.known, tests, shards, unknown_estimate=times.fallback,
                       estimates={f: e.seconds for f, e in times.estimates.items()})


# --- smoothing -------------------------------------------------------------------


def test_smoothing_takes_each_entrys_median_over_the_snapshots_that_have_it():
    a = {"env": {"cfg": {"x": 100.0, "y": 10.0, "z": 1.0}}}
    b = {"env": {"cfg": {"x": 900.0, "y": 20.0}}, "other": {"cfg": {"w": 5.0}}}
    c = {"env": {"cfg": {"x": 110.0}}}
    smoothed = smooth_test_times([a, b, c])
    assert smoothed["env"]["cfg"]["x"] == 110.0  # one bad day out of three is ignored
    assert smoothed["env"]["cfg"]["y"] == 15.0  # two values: the mean of the middle two
    assert smoothed["env"]["cfg"]["z"] == 1.0 and smoothed["other"]["cfg"]["w"] == 5.0
    assert smooth_test_times([c, b, a]) == smoothed  # order-free
    assert smooth_test_times([a]) == a and smooth_test_times([a])["env"] is not a["env"]


# --- estimates for files without history -------------------------------------------------


def test_a_missing_file_is_the_same_file_elsewhere_scaled_by_the_configs_relative_speed():
    fast = config(1)
    slow = {f: t * 2.5 for f, t in config(2).items()}  # same files, 2.5x slower, own noise
    target = dict(slow)
    hidden = target.pop("test_007")
    # two configs whose times have nothing to do with the target's: they outvote the
    # similar one, but their ratios predict the target's files badly, so they weigh little
    doc = {"fast": {"default": fast}, "target": {"default": target}}
    for seed in (1, 2):
        unrelated = {f: random.Random(f"{seed}{f}").uniform(1, 5000) for f in fast}
        unrelated["test_007"] = 4000.0 * seed
        doc[f"weird{seed}"] = {"default": unrelated}
    times = Estimator(doc).config_times("target", "default", [*target, "test_007"])
    assert times.source == "target/default" and set(times.estimates) == {"test_007"}
    estimate = times.estimates["test_007"]
    assert estimate.source == "scaled from 3 other configs"
    assert estimate.seconds == pytest.approx(hidden, rel=0.15)


def test_an_exact_scaled_copy_gives_the_exact_time():
    base = config(3, noise=0.0)
    target = {f: 3.0 * t for f, t in base.items() if f != "test_000"}
    times = Estimator({"a": {"c": base}, "b": {"c": target}}).config_times("b", "c", ["test_000"])
    assert times.estimates["test_000"].seconds == pytest.approx(3.0 * base["test_000"])


def test_a_file_skipped_in_one_config_does_not_move_the_ratio():
    base = config(4, noise=0.0)
    target = {f: 2.0 * t for f, t in base.items() if f != "test_001"}
    target["test_002"] = 0.5  # skipped here, thousands of seconds there: an outlier ratio
    base["test_002"] = 5000.0
    times = Estimator({"a": {"c": base}, "b": {"c": target}}).config_times("b", "c", ["test_001"])
    assert times.estimates["test_001"].seconds == pytest.approx(2.0 * base["test_001"])


def test_too_few_shared_files_fall_back_to_the_default_averages():
    base = config(5, noise=0.0)
    few = {f: 2.0 * t for f, t in list(base.items())[: MIN_SHARED_FILES - 1]}
    doc = {"a": {"slow": base}, "b": {"slow": few}, "default": {"slow": {"test_030": 123.0}}}
    times = Estimator(doc).config_times("b", "slow", ["test_030"])
    assert times.estimates["test_030"] == (123.0, "default/slow")


def test_default_averages_are_recomputed_when_the_snapshot_lacks_them_then_default_default():
    doc = {
        "e1": {"nogpu": {"x": 100.0, "y": 1.0}, "default": {"z": 30.0}},
        "e2": {"nogpu": {"x": 300.0}},
        "default": {"default": {"w": 7.0}},  # no default["nogpu"] (as on PyTorch's 2026-04-20)
    }
    times = Estimator(doc).config_times("new-env", "nogpu", ["x", "y", "z", "w", "v"])
    assert times.known == {} and times.source == ""
    got = {f: e for f, e in times.estimates.items()}
    assert got["x"] == (200.0, "mean over nogpu in 2 build env(s)")
    assert got["y"] == (1.0, "mean over nogpu in 1 build env(s)")
    assert got["z"] == (30.0, "mean over every config")  # not in nogpu anywhere: default/default, recomputed
    assert got["w"] == (7.0, "default/default")
    assert got["v"].seconds == 7.0 and got["v"].source == "median of the default times"


def test_last_resort_is_the_median_of_the_known_files_then_a_constant():
    doc = {"e": {"c": {"a": 10.0, "b": 20.0, "c": 30.0, "d": 1000.0}}}
    times = Estimator(doc).config_times("e", "c", ["a", "new"])
    assert times.estimates["new"] == (25.0, "median of the config's known files")
    nothing = Estimator({}).config_times("e", "c", ["a"])
    assert nothing.estimates["a"] == (FALLBACK_ESTIMATE_SECONDS, "no times at all")


def test_estimates_do_not_depend_on_the_order_of_the_document():
    doc = {f"env{i}": {"default": {f: t * (1 + i / 7) for f, t in config(10 + i).items() if (i + int(f[-3:])) % 5}}
           for i in range(6)}
    tests = sorted({f for cfgs in doc.values() for files in cfgs.values() for f in files})
    first = Estimator(doc).config_times("env0", "default", tests)
    shuffled = {env: {"default": dict(sorted(doc[env]["default"].items(), reverse=True))}
                for env in reversed(list(doc))}
    assert Estimator(shuffled).config_times("env0", "default", list(reversed(tests))) == first


def test_planner_uses_the_per_file_estimates():
    times = {"a": 100.0, "b": 100.0, "c": 100.0}
    plan = plan_shards(times, ["a", "b", "c", "new"], 2, overhead=0.0, estimates={"new": 300.0})
    assert plan.unknown_files == ("new",) and plan.unknown_seconds == (("new", 300.0),)
    assert sorted(s.expected_seconds for s in plan.shards) == [300.0, 300.0]


# --- on PyTorch's real snapshots -----------------------------------------------------


def test_issue_case_a_big_file_new_to_a_config_is_planned_from_the_other_configs():
    """The issue's 2026-03-09 case, rebuilt on the days we have: inductor/test_cpu_repro is
    taken out of linux-jammy-aarch64-py3.10/default on 2026-08-19 (it is ~2,500 s there and in
    46 other configs), planned, and the plan is scored with 2026-08-20's real times."""
    day, next_day = real("2026-08-19"), real("2026-08-20")
    env, name = "linux-jammy-aarch64-py3.10", "inductor/test_cpu_repro"
    without = copy.deepcopy(day)
    del without[env]["default"][name]
    actual = next_day[env]["default"]
    shards = min(16, math.ceil(sum(actual.values()) / 2400))
    times = Estimator(without).config_times(env, "default", list(actual))
    assert set(times.estimates) == {name}
    assert times.estimates[name].seconds == pytest.approx(actual[name], rel=0.25)
    ours = score_plan(plan_with(times, list(actual), shards), actual).ratio
    one_estimate = score_plan(plan_shards(without[env]["default"], list(actual), shards), actual).ratio
    assert ours < 1.1 < 1.4 < one_estimate


def test_configs_new_on_the_next_day_are_planned_from_the_same_config_elsewhere():
    """default/nogpu_* and default/multigpu are not in 2026-04-20's file but their build envs' are."""
    day, next_day = real("2026-04-20"), real("2026-04-21")
    estimator = Estimator(day)
    for cfg in ("nogpu_AVX512", "nogpu_NO_AVX2", "multigpu"):
        actual = next_day["default"][cfg]
        shards = min(16, math.ceil(sum(actual.values()) / 2400))
        times = estimator.config_times("default", cfg, list(actual))
        assert times.source == "" and len(times.estimates) == len(actual)
        runtest_times, source = select_times(day, "default", cfg)
        assert source == "default/default"
        ours = score_plan(plan_with(times, list(actual), shards), actual).ratio
        runtest = score_plan(plan_shards(runtest_times, list(actual), shards), actual).ratio
        assert ours < runtest and ours < 1.12, cfg
