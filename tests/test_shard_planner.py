import json
import math
import random
import statistics
from collections import Counter

import pytest
from conftest import pytorch_json

from torchci_assets.derived.sharding.cli import main as shard_plan_main
from torchci_assets.derived.sharding.planner import (
    FALLBACK_ESTIMATE_SECONDS,
    PYTORCH_SPLIT_SECONDS,
    plan_candidates,
    plan_longest_first,
    plan_round_robin,
    plan_shards,
    plan_to_dict,
    score_plan,
    select_times,
)



def heavy_tailed(seed: int, files: int) -> dict[str, float]:
    """Pareto-distributed file times: most files short, a few very long, like PyTorch's."""
    rng = random.Random(seed)
    return {f"dir{i % 4}/test_{i:03d}": round(rng.paretovariate(1.1) * 20, 3) for i in range(files)}


def makespan(plan) -> float:
    return max(s.expected_seconds for s in plan.shards)


def entries(plan):
    return [t for s in plan.shards for t in s.tests]


def assert_complete(plan, tests, num_shards):
    """Every listed file appears, once per part, with parts numbered 1..k; shards are 1..N."""
    assert [s.index for s in plan.shards] == list(range(1, num_shards + 1))
    parts_seen: dict[str, list[int]] = {}
    for t in entries(plan):
        parts_seen.setdefault(t.file, []).append(t.part)
        assert 1 <= t.part <= t.parts
    assert set(parts_seen) == set(tests)
    for name, parts in parts_seen.items():
        k = next(t.parts for t in entries(plan) if t.file == name)
        assert sorted(parts) == list(range(1, k + 1)), name


@pytest.mark.parametrize("seed,files,num_shards", [(1, 40, 4), (2, 200, 16), (3, 7, 12), (4, 500, 9)])
def test_every_file_once_per_part(seed, files, num_shards):
    times = heavy_tailed(seed, files)
    plan = plan_shards(times, list(times), num_shards)
    assert_complete(plan, times, num_shards)


def test_expected_seconds_is_the_sum_of_entries_under_the_model():
    times = heavy_tailed(5, 120)
    overhead = 12.5
    plan = plan_shards(times, list(times), 6, overhead=overhead)
    for shard in plan.shards:
        model = sum(times[t.file] / t.parts + overhead for t in shard.tests)
        assert shard.expected_seconds == pytest.approx(model)
        assert sum(t.seconds for t in shard.tests) == pytest.approx(model)
    as_json = plan_to_dict(plan)
    assert [s["expected_seconds"] for s in as_json["shards"]] == pytest.approx(
        [s.expected_seconds for s in plan.shards], abs=1e-3
    )


def test_same_inputs_give_the_same_plan_whatever_the_order():
    times = heavy_tailed(6, 150)
    # equal times force the tie-breaking by name to decide
    times.update({f"tie/test_{c}": 100.0 for c in "qwertyuiop"})
    tests = list(times)
    first = plan_shards(times, tests, 7)
    assert plan_shards(times, tests, 7) == first
    rng = random.Random(0)
    for _ in range(3):
        shuffled = tests[:]
        rng.shuffle(shuffled)
        reordered_times = dict(sorted(times.items(), key=lambda kv: rng.random()))
        assert plan_shards(reordered_times, shuffled, 7) == first


def test_unknown_files_get_the_median_of_known_files():
    times = {"a": 10.0, "b": 20.0, "c": 30.0, "d": 1000.0}
    plan = plan_shards(times, ["a", "b", "c", "d", "new_1", "new_2"], 3, overhead=5.0)
    assert plan.unknown_files == ("new_1", "new_2")
    assert plan.unknown_estimate == 25.0  # median of 10, 20, 30, 1000: not dragged up by the 1000
    for t in entries(plan):
        if t.file.startswith("new_"):
            assert t.seconds == pytest.approx(25.0 / t.parts + 5.0)


def test_without_any_history_every_file_gets_the_same_estimate():
    tests = [f"t{i}" for i in range(10)]
    plan = plan_shards({}, tests, 3, overhead=15.0)
    assert plan.unknown_estimate == FALLBACK_ESTIMATE_SECONDS
    assert plan.unknown_files == tuple(tests)
    assert all(t.seconds == FALLBACK_ESTIMATE_SECONDS / t.parts + 15.0 for t in entries(plan))
    loads = [s.expected_seconds for s in plan.shards]
    assert max(loads) - min(loads) <= FALLBACK_ESTIMATE_SECONDS + 15.0


def test_parts_are_never_shorter_than_the_overhead():
    times = {"a": 40.0, "b": 44.0, "c": 1.0}
    plan = plan_shards(times, list(times), 8, overhead=15.0)
    assert all(times[t.file] / t.parts >= 15.0 or t.parts == 1 for t in entries(plan))
    assert {t.file: t.parts for t in entries(plan)} == {"a": 2, "b": 2, "c": 1}


def test_more_shards_than_files():
    times = {"small_a": 1.0, "small_b": 2.0, "big": 900.0}
    plan = plan_shards(times, list(times), 10, overhead=15.0)
    assert_complete(plan, times, 10)
    # the big file is worth cutting: one part per shard beats running it whole
    assert makespan(plan) < 900.0 + 15.0
    tiny = plan_shards({"a": 1.0, "b": 2.0}, ["a", "b"], 5, overhead=15.0)
    assert_complete(tiny, ["a", "b"], 5)
    assert sum(1 for s in tiny.shards if not s.tests) == 3  # empty shards are listed, not dropped


def test_one_shard_never_splits():
    times = heavy_tailed(7, 30)
    plan = plan_shards(times, list(times), 1)
    assert all(t.parts == 1 for t in entries(plan))
    assert plan.shards[0].expected_seconds == pytest.approx(sum(times.values()) + 15.0 * len(times))
    # PyTorch's fixed rule cuts long files even then, paying overhead for nothing
    pytorch = plan_longest_first(times, list(times), 1, split_above=PYTORCH_SPLIT_SECONDS)
    if max(times.values()) > PYTORCH_SPLIT_SECONDS:
        assert makespan(plan) < makespan(pytorch)


def test_zero_time_files():
    times = {f"z{i}": 0.0 for i in range(6)}
    plan = plan_shards(times, list(times), 4, overhead=15.0)
    assert_complete(plan, times, 4)
    assert all(t.parts == 1 and t.seconds == 15.0 for t in entries(plan))
    assert makespan(plan) == 30.0  # 6 entries of pure overhead over 4 shards
    free = plan_shards(times, list(times), 4, overhead=0.0)
    assert makespan(free) == 0.0


def test_duplicate_list_entries_run_once():
    plan = plan_shards({"a": 5.0}, ["a", "a", "b"], 2)
    assert Counter(t.file for t in entries(plan)) == {"a": 1, "b": 1}


@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15, 16])
def test_never_longer_than_the_baselines_on_heavy_tailed_configs(seed):
    rng = random.Random(seed)
    times = heavy_tailed(seed, rng.choice([8, 30, 120, 400]))
    for num_shards in (2, 5, 16):
        # with no drift allowance the planner minimises exactly the makespan it reports
        plan = plan_shards(times, list(times), num_shards, time_noise=0.0)
        for baseline in (
            plan_round_robin(times, list(times), num_shards),
            plan_longest_first(times, list(times), num_shards),
            plan_longest_first(times, list(times), num_shards, split_above=PYTORCH_SPLIT_SECONDS),
            plan_longest_first(
                times, list(times), num_shards, split_above=PYTORCH_SPLIT_SECONDS, count_overhead=False
            ),
        ):
            assert makespan(plan) <= makespan(baseline) * (1 + 1e-9)


def test_drift_allowance_spreads_a_dominant_file():
    # one file is a whole shard's worth: exact planning keeps it whole, but then that
    # shard rides entirely on one file's day-to-day change
    times = {"huge": 2000.0, **{f"s{i:03d}": 20.0 for i in range(300)}}
    exact = plan_shards(times, list(times), 4, overhead=5.0, time_noise=0.0)
    robust = plan_shards(times, list(times), 4, overhead=5.0, time_noise=0.1)
    assert [t.parts for t in entries(exact) if t.file == "huge"] == [1]
    assert len([t for t in entries(robust) if t.file == "huge"]) > 1
    # and it pays off when every file drifts independently by ~10%
    rng = random.Random(3)
    worse = []
    for _ in range(200):
        actual = {f: t * math.exp(rng.gauss(0, 0.1)) for f, t in times.items()}
        worse.append(score_plan(exact, actual).makespan - score_plan(robust, actual).makespan)
    assert statistics.fmean(worse) > 0


@pytest.mark.parametrize("seed,files,num_shards", [(11, 60, 4), (12, 300, 16), (13, 25, 9)])
def test_the_plan_is_the_candidate_it_expects_shortest(seed, files, num_shards):
    # plan_candidates lists what plan_shards chooses among (the benchmark scores them in
    # hindsight); without drift allowance the choice is the shortest expected makespan,
    # the fewest entries on ties
    times = heavy_tailed(seed, files)
    candidates = plan_candidates(times, list(times), num_shards)
    assert len(candidates) > 1
    for candidate in candidates:
        assert_complete(candidate, times, num_shards)
    chosen = plan_shards(times, list(times), num_shards, time_noise=0.0)
    assert chosen in candidates
    best = min((makespan(c), len(entries(c))) for c in candidates)
    assert (makespan(chosen), len(entries(chosen))) == pytest.approx(best)
    # with drift allowance the choice moves, but stays among them
    assert plan_shards(times, list(times), num_shards, time_noise=0.2) in candidates


def test_score_plan_follows_the_issue_formula():
    times = {"a": 100.0, "b": 50.0, "c": 30.0}
    plan = plan_longest_first(times, list(times), 2, overhead=10.0)  # a | b + c
    actual = {"a": 120.0, "b": 40.0, "c": 30.0}
    score = score_plan(plan, actual)
    assert score.makespan == 130.0
    assert score.lower_bound == max((190.0 + 3 * 10.0) / 2, 130.0)
    assert score.ratio == 1.0
    split = plan_longest_first(times, list(times), 2, overhead=10.0, split_above=60.0)  # a in 2 parts
    s = score_plan(split, actual)
    assert s.lower_bound == max(220.0 / 2, 40.0 + 10.0, 120.0 / 2 + 10.0)
    assert s.ideal_bound == max(110.0, 120.0 / 2 + 10.0)


def test_select_times_falls_back_like_run_test():
    data = {
        "linux-env": {"default": {"x": 1.0}},
        "default": {"slow": {"x": 2.0}, "default": {"x": 3.0}},
    }
    assert select_times(data, "linux-env", "default") == ({"x": 1.0}, "linux-env/default")
    assert select_times(data, "linux-env", "slow") == ({"x": 2.0}, "default/slow")
    assert select_times(data, "missing-env", "slow") == ({"x": 2.0}, "default/slow")
    assert select_times(data, "missing-env", "crossref") == ({"x": 3.0}, "default/default")
    assert select_times({}, "e", "c") == ({}, "")


@pytest.mark.parametrize("bad", [0, -3])
def test_planner_rejects_bad_shard_counts(bad):
    with pytest.raises(ValueError):
        plan_shards({"a": 1.0}, ["a"], bad)


def test_real_snapshot_slice():
    """Plan with one real day, score with the next, on a few kinds of config."""
    day = pytorch_json("test-times.2026-08-19.json")
    next_day = pytorch_json("test-times.2026-08-20.json")
    for env, config in [
        ("linux-jammy-py3.10-gcc11", "default"),  # ~600 files, one of 22,000 s
        ("unit-test / inductor-test", "inductor"),  # 22 files, a few of several hours
        ("linux-jammy-cuda13.0-py3.10-gcc11", "multigpu"),
    ]:
        actual = next_day[env][config]
        times, source = select_times(day, env, config)
        assert source == f"{env}/{config}"
        num_shards = min(16, max(1, math.ceil(sum(actual.values()) / 2400)))
        plan = plan_shards(times, list(actual), num_shards)
        assert_complete(plan, actual, num_shards)
        pytorch = plan_longest_first(
            times, list(actual), num_shards, split_above=PYTORCH_SPLIT_SECONDS, count_overhead=False
        )
        assert makespan(plan) <= makespan(pytorch)
        assert score_plan(plan, actual).ratio < 1.1


# --- CLI ---------------------------------------------------------------------------


@pytest.fixture
def cli_files(tmp_path):
    times = {
        "linux-env": {"default": {"test_ops": 1800.0, "test_nn": 600.0, "test_jit": 300.0, "test_fx": 0.0}},
        "default": {"default": {"test_ops": 1500.0}},
    }
    times_path = tmp_path / "test-times.json"
    times_path.write_text(json.dumps(times))
    tests_path = tmp_path / "tests.txt"
    tests_path.write_text("test_ops\ntest_nn\n\n# a comment\ntest_jit\ntest_fx\ntest_new\n")
    return times_path, tests_path


def run_cli(capsys, *argv):
    code = shard_plan_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json(cli_files, capsys):
    times_path, tests_path = cli_files
    code, out, err = run_cli(
        capsys, "--test-times", times_path, "--build-env", "linux-env", "--test-config", "default",
        "--shards", 3, "--tests", tests_path, "--json",
    )
    assert code == 0, err
    plan = json.loads(out)
    assert [s["index"] for s in plan["shards"]] == [1, 2, 3]
    files = Counter(t["file"] for s in plan["shards"] for t in s["tests"])
    assert set(files) == {"test_ops", "test_nn", "test_jit", "test_fx", "test_new"}
    for s in plan["shards"]:
        for t in s["tests"]:
            assert set(t) == {"file", "part", "parts"}
            assert files[t["file"]] == t["parts"]
    assert plan["unknown_files"] == ["test_new"]
    assert plan["times_from"] == "linux-env/default" and plan["test_times_files"] == 1
    # too few files to scale from another config, none in the averages: the median of the known
    assert plan["unknown_seconds"] == {"test_new": 450.0} == {"test_new": plan["unknown_estimate_seconds"]}
    assert plan["unknown_estimated_from"] == {"test_new": "median of the config's known files"}
    # the expected seconds agree with the model and the default 15 s overhead
    known = {"test_ops": 1800.0, "test_nn": 600.0, "test_jit": 300.0, "test_fx": 0.0, "test_new": 450.0}
    for s in plan["shards"]:
        assert s["expected_seconds"] == pytest.approx(
            sum(known[t["file"]] / t["parts"] + 15.0 for t in s["tests"]), abs=1e-3
        )


def test_cli_table_and_fallback_warning(cli_files, capsys):
    times_path, tests_path = cli_files
    code, out, err = run_cli(
        capsys, "--test-times", times_path, "--build-env", "other-env", "--test-config", "slow",
        "--shards", 2, "--tests", tests_path, "--process-overhead", 0,
    )
    assert code == 0
    assert "no times for other-env/slow" in err
    assert "shard 1:" in out and "shard 2:" in out
    # every file is estimated, each with where its estimate came from
    assert "5 file(s) without history in this config, estimated:" in out
    assert "1500.0 s  test_ops  (default/default)" in out
    assert "600.0 s  test_nn  (mean over every config)" in out
    assert "test_new  (median of the default times)" in out


def test_cli_plans_from_the_median_of_several_snapshots(cli_files, capsys, tmp_path):
    times_path, tests_path = cli_files
    paths = []
    for day, ops in enumerate((1800.0, 9000.0, 2000.0)):  # one bad day in three
        doc = json.loads(times_path.read_text())
        doc["linux-env"]["default"]["test_ops"] = ops
        paths.append(tmp_path / f"test-times.{day}.json")
        paths[-1].write_text(json.dumps(doc))
    code, out, err = run_cli(
        capsys, "--test-times", *paths, "--build-env", "linux-env", "--test-config", "default",
        "--shards", 1, "--tests", tests_path, "--json", "--process-overhead", 0,
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["test_times_files"] == 3
    # median of 1800, 9000, 2000 for test_ops; the rest is the same in all three
    assert plan["shards"][0]["expected_seconds"] == pytest.approx(2000.0 + 600.0 + 300.0 + 0.0 + 450.0)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--shards": 0}, "--shards must be at least 1"),
        ({"--shards": -2}, "--shards must be at least 1"),
        ({"--test-times": "missing.json"}, "cannot read --test-times"),
        ({"--tests": "missing.txt"}, "cannot read --tests"),
        ({"--test-times": "bad.json"}, "not valid JSON"),
        ({"--test-times": "wrong_shape.json"}, "should map files to seconds"),
        ({"--process-overhead": -1}, "--process-overhead must be >= 0"),
    ],
)
def test_cli_bad_input_exits_2_with_a_message(cli_files, capsys, change, message):
    times_path, tests_path = cli_files
    (times_path.parent / "bad.json").write_text("{not json")
    (times_path.parent / "wrong_shape.json").write_text(json.dumps({"env": {"cfg": [1, 2]}}))
    args = {"--test-times": times_path, "--build-env": "linux-env", "--test-config": "default",
            "--shards": 2, "--tests": tests_path}
    for key, value in change.items():
        args[key] = value if not str(value).endswith((".json", ".txt")) else times_path.parent / value
    argv = [str(x) for kv in args.items() for x in kv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err
    assert out == ""


def test_cli_missing_option_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        shard_plan_main(["--shards", "2"])
    assert exc.value.code == 2
    assert "required" in capsys.readouterr().err
