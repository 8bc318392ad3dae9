"""test-times.json / test-class-times.json: PyTorch's averages and shape, the keep-old merge, the guard."""

import json
import re

import dagster as dg
import pyarrow as pa
import pytest
from conftest import pytorch_bytes, pytorch_json
from test_test_stats import (
    LINUX,
    day,
    job_payload,
    lake,
    run_row,
    webhooks,
    write_test_run,
)

import torchci_assets.derived.sharding.assets as assets
from resources.configured import LakeResource, OutputsResource
from resources.lake import connect
from resources.storage import Store
from torchci_assets.derived.results.stats import (
    build_test_results,
    build_test_time_daily,
)
from torchci_assets.derived.sharding.times import (
    TEST_CLASS_TIMES_PATH,
    TEST_TIMES_PATH,
    WINDOW_DAYS,
    PublishRefused,
    check_publishable,
    count_entries,
    dumps,
    publish_test_times,
    window_times,
)

WIN = "win-vs2022-cpu-py3"
NN, OPS, C10D = "nn/test_nn.py", "test_ops.py", "distributed/test_c10d.py"


def nn(job, run, time, name="test_conv", **kw):
    return run_row(job, run, name, time=time, file=NN, classname="TestNN", **kw)


def two_days(tmp_path):
    """Main-branch runs on D-1 and D; what must not count: a PR run, a failed run, an infra job."""
    webhooks(tmp_path, day(-1), [
        ("workflow_job", job_payload(11, 100, "a" * 40, shard=1, shards=2)),
        ("workflow_job", job_payload(12, 100, "a" * 40, shard=2, shards=2)),
    ])
    write_test_run(tmp_path, day(-1), [
        nn(11, 100, 10.0), nn(12, 100, 20.0, name="test_pool"),  # one file split over two shards: 30 s
        run_row(11, 100, "test_add", time=5.0, file=OPS, classname="TestOps"),
    ])
    webhooks(tmp_path, day(0), [
        ("workflow_job", job_payload(21, 200, "b" * 40, shard=1, shards=2)),
        ("workflow_job", job_payload(22, 200, "b" * 40, shard=2, shards=2)),
        ("workflow_job", job_payload(23, 200, "b" * 40, env=WIN)),
        ("workflow_job", job_payload(24, 200, "b" * 40, config="distributed")),
        ("workflow_job", job_payload(31, 300, "p" * 40, branch="gh/x/1/head")),
        ("workflow_job", job_payload(41, 400, "c" * 40, conclusion="failure")),
        ("workflow_job", job_payload(51, 500, "d" * 40, conclusion="cancelled")),
    ])
    write_test_run(tmp_path, day(0), [
        nn(21, 200, 15.0), nn(22, 200, 25.0, name="test_pool"),  # 40 s
        run_row(21, 200, "test_add", time=7.0, file=OPS, classname="TestOps"),
        run_row(21, 200, "test_mul", time=0.0, file=OPS, classname="TestOpsMore", status="skipped"),
        nn(23, 200, 100.0),
        run_row(24, 200, "test_broadcast", time=50.0, file=C10D, classname="TestC10d"),
        nn(31, 300, 1000.0), nn(41, 400, 999.0, status="failed"), nn(51, 500, 500.0),
    ])
    for d in (day(-1), day(0)):
        build_test_results(lake(tmp_path), d)
        build_test_time_daily(lake(tmp_path), d)


def outputs(tmp_path) -> Store:
    return Store(str(tmp_path / "outputs"))


def leaves(doc: dict, depth: int = 1):
    """(depth, kind) of every leaf: the shape of a times document (PyTorch's has ints and floats)."""
    for value in doc.values():
        if isinstance(value, dict):
            yield from leaves(value, depth + 1)
        else:
            yield depth, "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else "other"


def test_times_are_pytorch_averages_in_pytorchs_shape(tmp_path):
    two_days(tmp_path)
    report = publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))

    text = (tmp_path / "outputs" / TEST_TIMES_PATH).read_text()
    times = json.loads(text)
    assert times == {
        LINUX: {"default": {"nn/test_nn": 35.0, "test_ops": 6.0}, "distributed": {"distributed/test_c10d": 50.0}},
        WIN: {"default": {"nn/test_nn": 100.0}},
        "default": {"default": {"nn/test_nn": 67.5, "test_ops": 6.0, "distributed/test_c10d": 50.0},
                    "distributed": {"distributed/test_c10d": 50.0}},
    }
    classes = json.loads((tmp_path / "outputs" / TEST_CLASS_TIMES_PATH).read_text())
    assert classes[LINUX]["default"] == {"nn/test_nn": {"TestNN": 35.0},
                                         "test_ops": {"TestOps": 6.0, "TestOpsMore": 0.0}}
    assert classes["default"]["default"]["nn/test_nn"] == {"TestNN": 67.5}
    assert (report.window_files, report.entries, report.previous_entries) == (4, 8, None)

    # Structurally the same as the file PyTorch publishes.
    real = pytorch_json("test-times.2026-08-20.json")
    assert set(leaves(times)) == set(leaves(real)) == {(3, "number")}
    assert {d for d, _ in leaves(classes)} == {4}
    assert "default" in real and "default" in real["default"]
    file_key = re.compile(r"^[\w\-]+(/[\w\-]+)*$")  # invoking files: '/'-separated, no .py
    real_keys = {f for env in real.values() for cfg in env.values() for f in cfg}
    ours = {f for env in times.values() for cfg in env.values() for f in cfg}
    assert sum(map(bool, map(file_key.match, real_keys))) > 0.95 * len(real_keys)
    assert all(file_key.match(f) for f in ours)
    assert {"test_ops", "nn/test_convolution"} <= real_keys  # spelled as ours: no .py, '/' folders
    assert text == dumps(times).decode() and text.startswith('{\n  "default": {')  # sorted, 2-space indent


def test_pytorchs_real_files_come_back_byte_for_byte():
    """PyTorch writes both files with Python's `json.dumps(indent=2, sort_keys=True)`: its times
    under 1e-4 s read `4.761904988083101e-05`, not `0.00004761904988083101`, and a name beyond ASCII
    is escaped. Its real files, small times and integer zeros among them, come back unchanged."""
    for name in ("test-times.2026-08-19.json", "test-times.2026-08-20.json", "test-times.2026-04-20.json"):
        raw = pytorch_bytes(name)
        assert dumps(json.loads(raw)) == raw, name
    assert b'"distributed/test_token_switch": 4.761904988083101e-05,' in pytorch_bytes("test-times.2026-08-19.json")
    classes = {"linux": {"default": {"test_caf\u00e9": {"TestBig": 1e16, "TestTiny": 2.5000001187436283e-05}}}}
    assert dumps(classes) == (b'{\n  "linux": {\n    "default": {\n      "test_caf\\u00e9": {\n'
                              b'        "TestBig": 1e+16,\n        "TestTiny": 2.5000001187436283e-05\n'
                              b'      }\n    }\n  }\n}')


def test_published_small_times_are_spelled_as_pytorch_spells_them(tmp_path):
    """A window measuring a test file at a few microseconds a run (a test that returns at once) publishes its
    time in exponent form, as PyTorch would, beside the real file's entries it carries along."""
    store = outputs(tmp_path)
    store.write_bytes(TEST_TIMES_PATH, pytorch_bytes("test-times.2026-08-19.json"))
    webhooks(tmp_path, day(0), [("workflow_job", job_payload(21, 200, "b" * 40))])
    write_test_run(tmp_path, day(0), [
        run_row(21, 200, "test_skips", time=2.5e-05, file="test_tiny.py", classname="TestTiny"), nn(21, 200, 15.0)])
    build_test_results(lake(tmp_path), day(0))
    build_test_time_daily(lake(tmp_path), day(0))

    publish_test_times(lake(tmp_path), store, day(0), max_loss=1.0)  # the window is tiny beside PyTorch's

    for path in (TEST_TIMES_PATH, TEST_CLASS_TIMES_PATH):
        raw = store.read_bytes(path)
        assert raw == json.dumps(json.loads(raw), indent=2, sort_keys=True).encode(), path
    times = store.read_bytes(TEST_TIMES_PATH)
    assert b'"test_tiny": 2.5e-05' in times and json.loads(times)[LINUX]["default"]["test_tiny"] == 2.5e-05
    assert b"    \"default\": {\n      \"nn/test_nn\": 15.0,\n      \"test_tiny\": 2.5e-05\n    }" in times


def test_entries_not_seen_in_the_window_are_kept_and_defaults_replaced(tmp_path):
    two_days(tmp_path)
    store = outputs(tmp_path)
    store.write_bytes(TEST_TIMES_PATH, dumps({
        "retired-env": {"default": {"test_old": 12.0}},
        LINUX: {"default": {"nn/test_nn": 999.0, "test_gone": 3.0}, "slow": {"test_slow": 900.0}},
        "default": {"default": {"stale": 1.0}, "slow": {"test_slow": 900.0}},
    }))
    report = publish_test_times(lake(tmp_path), store, day(0))
    times = json.loads(store.read_bytes(TEST_TIMES_PATH))
    assert times["retired-env"] == {"default": {"test_old": 12.0}}
    assert times[LINUX]["default"] == {"nn/test_nn": 35.0, "test_ops": 6.0, "test_gone": 3.0}
    assert times[LINUX]["slow"] == {"test_slow": 900.0}
    assert "stale" not in times["default"]["default"] and "slow" not in times["default"]
    assert report.previous_entries == 6 and report.entries == count_entries(times) == 11


def test_a_window_outside_the_data_keeps_only_what_it_saw(tmp_path):
    two_days(tmp_path)
    publish_test_times(lake(tmp_path), outputs(tmp_path), day(0), window_days=1)
    times = json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))
    assert times[LINUX]["default"] == {"nn/test_nn": 40.0, "test_ops": 7.0}  # day D only


def test_guard_counts_entries_and_refuses_big_losses():
    previous = {"e": {"c": {f"f{i}": 1.0 for i in range(10)}}}
    check_publishable("x", previous, {"e": {"c": {f"f{i}": 1.0 for i in range(5)}}})  # half: allowed
    with pytest.raises(PublishRefused, match="lose 60%"):
        check_publishable("x", previous, {"e": {"c": {f"f{i}": 1.0 for i in range(4)}}})
    with pytest.raises(PublishRefused, match="no entries"):
        check_publishable("x", None, {})


def materialize_times(tmp_path, **config):
    return dg.materialize(
        [assets.test_times_asset], partition_key=day(0), raise_on_error=False,
        run_config={"ops": {"test_times": {"config": config}}},
        resources={"lake": LakeResource(uri=str(tmp_path / "lake")),
                   "outputs": OutputsResource(uri=str(tmp_path / "outputs"))})


def test_asset_publishes_and_refuses_to_replace_a_file_with_much_less(tmp_path):
    two_days(tmp_path)
    store = outputs(tmp_path)
    result = materialize_times(tmp_path)
    assert result.success
    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["entries"].value == 8

    big = {"old-env": {"default": {f"test_{i}": float(i) for i in range(30)}}}
    store.write_bytes(TEST_TIMES_PATH, dumps(big))
    before = store.read_bytes(TEST_TIMES_PATH), store.read_bytes(TEST_CLASS_TIMES_PATH)
    refused = materialize_times(tmp_path, keep_old_entries=False)
    assert not refused.success
    [failure] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "would lose" in failure.event_specific_data.error.message
    assert (store.read_bytes(TEST_TIMES_PATH), store.read_bytes(TEST_CLASS_TIMES_PATH)) == before

    assert materialize_times(tmp_path).success  # keeping old entries, the same day publishes
    assert json.loads(store.read_bytes(TEST_TIMES_PATH))["old-env"] == big["old-env"]


DAILY_SCHEMA = pa.schema([("build_env", pa.string()), ("test_config", pa.string()), ("file", pa.string()),
                          ("classname", pa.string()), ("time", pa.float64()), ("runs", pa.int64())])


def daily(rows) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=DAILY_SCHEMA)


def test_a_quiet_window_keeps_the_published_files_and_succeeds(tmp_path):
    store = outputs(tmp_path)
    published = {TEST_TIMES_PATH: dumps({LINUX: {"default": {"test_ops": 6.0}}}),
                 TEST_CLASS_TIMES_PATH: dumps({LINUX: {"default": {"test_ops": {"TestOps": 6.0}}}})}
    for path, data in published.items():
        store.write_bytes(path, data)
    lake(tmp_path).write("test_time_daily", day(0), daily([]))  # the day was processed: no test ran on main
    result = materialize_times(tmp_path)
    assert result.success
    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["nothing_new"].value == (
        f"no test times from successful main-branch runs in the 14 days ending {day(0)}: kept "
        f"{store.display(TEST_TIMES_PATH)}, {store.display(TEST_CLASS_TIMES_PATH)} as published")
    assert {path: store.read_bytes(path) for path in published} == published


def test_a_first_quiet_day_publishes_nothing(tmp_path):
    lake(tmp_path).write("test_time_daily", day(0), daily([]))
    report = publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert report.nothing_new.endswith(": nothing was published before either") and report.published == []
    assert not (tmp_path / "outputs" / TEST_TIMES_PATH).exists()


def test_file_times_without_class_times_publish_test_times_only(tmp_path):
    store = outputs(tmp_path)
    classes = dumps({LINUX: {"default": {"test_ops": {"TestOps": 6.0}}}})
    store.write_bytes(TEST_CLASS_TIMES_PATH, classes)
    lake(tmp_path).write("test_time_daily", day(0), daily([
        {"build_env": LINUX, "test_config": "default", "file": "test_ops", "classname": None, "time": 8.0, "runs": 1}]))
    report = publish_test_times(lake(tmp_path), store, day(0))
    assert report.published == [TEST_TIMES_PATH] and report.nothing_new.startswith("no class times")
    assert json.loads(store.read_bytes(TEST_TIMES_PATH))[LINUX] == {"default": {"test_ops": 8.0}}
    assert store.read_bytes(TEST_CLASS_TIMES_PATH) == classes


def test_times_need_their_day_of_daily_times(tmp_path):
    result = materialize_times(tmp_path)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"test_time_daily has no partition for {day(0)}" in failure.event_specific_data.error.cause.message
    assert not (tmp_path / "outputs" / TEST_TIMES_PATH).exists()


def test_a_rerun_of_an_earlier_day_leaves_the_later_days_files(tmp_path):
    """Backfilling or re-running an old day must not send CI back to that day's times."""
    store = outputs(tmp_path)
    for d, seconds in ((day(-20), 100.0), (day(0), 500.0)):
        lake(tmp_path).write("test_time_daily", d, daily([
            {"build_env": LINUX, "test_config": "default", "file": "test_ops", "classname": None,
             "time": seconds, "runs": 1}]))
    assert publish_test_times(lake(tmp_path), store, day(0)).published == [TEST_TIMES_PATH]
    published = store.read_bytes(TEST_TIMES_PATH)

    result = dg.materialize(
        [assets.test_times_asset], partition_key=day(-20),
        resources={"lake": LakeResource(uri=str(tmp_path / "lake")),
                   "outputs": OutputsResource(uri=str(tmp_path / "outputs"))})
    [event] = result.get_asset_materialization_events()
    assert store.read_bytes(TEST_TIMES_PATH) == published
    assert event.materialization.metadata["published"].value is False  # as the docs say, not an empty list
    assert event.materialization.metadata["files_published"].value == []
    assert f"shows {day(0)}, later than {day(-20)}" in event.materialization.metadata["not_published"].value
    assert lake(tmp_path).files("test_times", [day(-20)])  # the lake still has the day's own times

    assert event.materialization.metadata["output"].value == store.display(TEST_TIMES_PATH)
    lake(tmp_path).write("test_time_daily", day(1), daily([
        {"build_env": LINUX, "test_config": "default", "file": "test_ops", "classname": None, "time": 900.0,
         "runs": 1}]))
    later = dg.materialize(
        [assets.test_times_asset], partition_key=day(1),
        resources={"lake": LakeResource(uri=str(tmp_path / "lake")),
                   "outputs": OutputsResource(uri=str(tmp_path / "outputs"))})
    [event] = later.get_asset_materialization_events()
    assert event.materialization.metadata["published"].value is True  # paths as the other publishers show them
    assert store.display(TEST_TIMES_PATH) in event.materialization.metadata["files_published"].value

    assert publish_test_times(lake(tmp_path), store, day(1)).published == [TEST_TIMES_PATH]  # same day: refreshed


def _jobs(tmp_path, d, envs):
    names = [f"{e} / build" if e else "lint" for e in envs]
    lake(tmp_path).write("workflow_job", d, pa.table({"build_env": pa.array(envs, pa.string()),
                                                      "name": pa.array(names, pa.string())}))


def test_build_envs_without_a_job_for_a_month_are_dropped(tmp_path):
    """PyTorch's clean_up_test_times: a retired build_env leaves test-times.json after a month."""
    store = outputs(tmp_path)
    store.write_bytes(TEST_TIMES_PATH, dumps({"retired-env": {"default": {"test_ops": 1234.0}},
                                              WIN: {"default": {"test_ops": 9.0}},
                                              LINUX: {"default": {"test_ops": 5.0}}}))
    store.write_bytes(TEST_CLASS_TIMES_PATH, dumps({"retired-env": {"default": {"test_ops": {"TestOps": 1.0}}}}))
    _jobs(tmp_path, day(-40), ["retired-env", LINUX])
    _jobs(tmp_path, day(-29), [WIN, None])  # the month's first day: WIN ran (a build job, say)
    _jobs(tmp_path, day(0), [LINUX])
    lake(tmp_path).write("test_time_daily", day(0), daily([
        {"build_env": LINUX, "test_config": "default", "file": "test_ops", "classname": c, "time": 6.0, "runs": 1}
        for c in (None, "TestOps")]))
    publish_test_times(lake(tmp_path), store, day(0))
    assert sorted(json.loads(store.read_bytes(TEST_TIMES_PATH))) == ["default", LINUX, WIN]
    assert sorted(json.loads(store.read_bytes(TEST_CLASS_TIMES_PATH))) == ["default", LINUX]


def test_a_lake_younger_than_a_month_drops_no_build_env(tmp_path):
    store = outputs(tmp_path)
    store.write_bytes(TEST_TIMES_PATH, dumps({"not-run-yet": {"default": {"test_ops": 1.0}}}))
    _jobs(tmp_path, day(-28), [LINUX])
    lake(tmp_path).write("test_time_daily", day(0), daily([
        {"build_env": LINUX, "test_config": "default", "file": "test_ops", "classname": None, "time": 6.0, "runs": 1}]))
    publish_test_times(lake(tmp_path), store, day(0))
    assert "not-run-yet" in json.loads(store.read_bytes(TEST_TIMES_PATH))


def test_guard_compares_what_the_window_computed_when_old_entries_are_kept(tmp_path):
    """Old entries are carried along, so only the "default" section shows a window that lost most
    of its files (report parsing broken for all but one)."""
    store = outputs(tmp_path)
    published = {LINUX: {"default": {f"test_{i}": 1.0 for i in range(10)}},
                 "default": {"default": {f"test_{i}": 1.0 for i in range(10)}}}
    store.write_bytes(TEST_TIMES_PATH, dumps(published))
    lake(tmp_path).write("test_time_daily", day(0), daily([
        {"build_env": LINUX, "test_config": "default", "file": "test_0", "classname": None, "time": 6.0, "runs": 1}]))
    with pytest.raises(PublishRefused, match='"default" section has 1 entries, the published one 10'):
        publish_test_times(lake(tmp_path), store, day(0), keep_old=True)
    assert json.loads(store.read_bytes(TEST_TIMES_PATH)) == published


def test_a_run_whose_shards_land_on_two_days_counts_once_whole(tmp_path):
    """Shard 1's report on D-1, shard 2's on D: one run of 10 + 20 s, not two of 10 and 20, counted
    in every window holding D, also one starting on D (its shard of D-1 read from the day before)."""
    webhooks(tmp_path, day(-1), [("workflow_job", job_payload(11, 100, "a" * 40, shard=1, shards=2))])
    webhooks(tmp_path, day(0), [("workflow_job", job_payload(12, 100, "a" * 40, shard=2, shards=2))])
    write_test_run(tmp_path, day(-1), [nn(11, 100, 10.0)])
    write_test_run(tmp_path, day(0), [nn(12, 100, 20.0, name="test_pool")])
    for d in (day(-1), day(0)):
        build_test_results(lake(tmp_path), d)
        build_test_time_daily(lake(tmp_path), d)
    publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"nn/test_nn": 30.0}
    # a window starting on D holds the run's last day: it counts the run whole, its shard of D-1 included
    other = Store(str(tmp_path / "other"))
    report = publish_test_times(lake(tmp_path), other, day(0), window_days=1)
    assert report.window_files == 1
    assert json.loads(other.read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"nn/test_nn": 30.0}
    # a window ending on D-1 does not: the run counts in the windows holding its last day
    assert publish_test_times(lake(tmp_path), Store(str(tmp_path / "third")), day(-1), window_days=1).window_files == 0
    # nor one starting on D+1: the look-back days are read for runs ending in the window only
    webhooks(tmp_path, day(1), [("workflow_job", job_payload(13, 300, "b" * 40))])
    write_test_run(tmp_path, day(1), [nn(13, 300, 5.0)])
    build_test_results(lake(tmp_path), day(1))
    build_test_time_daily(lake(tmp_path), day(1))
    fourth = Store(str(tmp_path / "fourth"))
    publish_test_times(lake(tmp_path), fourth, day(1), window_days=1)
    assert json.loads(fourth.read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"nn/test_nn": 5.0}


def test_a_rerun_of_failed_jobs_counts_each_shard_at_its_latest_clean_attempt(tmp_path):
    """Attempt 2 re-runs only the failed shard 2: the run is shard 1 of attempt 1 + shard 2 of attempt 2."""
    webhooks(tmp_path, day(0), [
        ("workflow_job", job_payload(11, 100, "a" * 40, shard=1, shards=2, attempt=1)),
        ("workflow_job", job_payload(12, 100, "a" * 40, shard=2, shards=2, attempt=1, conclusion="failure")),
        ("workflow_job", job_payload(13, 100, "a" * 40, shard=2, shards=2, attempt=2)),
    ])
    write_test_run(tmp_path, day(0), [
        nn(11, 100, 10.0, attempt=1), nn(12, 100, 20.0, name="test_pool", attempt=1, status="failed"),
        nn(13, 100, 22.0, name="test_pool", attempt=2)])
    build_test_results(lake(tmp_path), day(0))
    build_test_time_daily(lake(tmp_path), day(0))
    report = publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"nn/test_nn": 32.0}
    assert report.window_files == 1


def test_a_failed_shard_re_run_the_next_day_completes_its_run(tmp_path):
    """Both shards report on D-1, shard 2 failed; its re-run (attempt 2) lands on D: one run of 10 + 22 s."""
    webhooks(tmp_path, day(-1), [
        ("workflow_job", job_payload(11, 100, "a" * 40, shard=1, shards=2, attempt=1)),
        ("workflow_job", job_payload(12, 100, "a" * 40, shard=2, shards=2, attempt=1, conclusion="failure"))])
    webhooks(tmp_path, day(0), [("workflow_job", job_payload(13, 100, "a" * 40, shard=2, shards=2, attempt=2))])
    write_test_run(tmp_path, day(-1), [nn(11, 100, 10.0, attempt=1),
                                       nn(12, 100, 20.0, name="test_pool", attempt=1, status="failed")])
    write_test_run(tmp_path, day(0), [nn(13, 100, 22.0, name="test_pool", attempt=2)])
    for d in (day(-1), day(0)):
        build_test_results(lake(tmp_path), d)
        build_test_time_daily(lake(tmp_path), d)
    publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"nn/test_nn": 32.0}


def test_older_daily_partitions_are_read_beside_new_ones(tmp_path):
    lake(tmp_path).write("test_time_daily", day(-1), daily([
        {"build_env": LINUX, "test_config": "default", "file": "test_ops", "classname": None, "time": 8.0, "runs": 2}]))
    webhooks(tmp_path, day(0), [("workflow_job", job_payload(21, 200, "b" * 40))])
    write_test_run(tmp_path, day(0), [run_row(21, 200, "test_add", time=7.0, file=OPS, classname="TestOps")])
    build_test_results(lake(tmp_path), day(0))
    build_test_time_daily(lake(tmp_path), day(0))
    publish_test_times(lake(tmp_path), outputs(tmp_path), day(0))
    assert json.loads(outputs(tmp_path).read_bytes(TEST_TIMES_PATH))[LINUX]["default"] == {"test_ops": 5.0}


def rerun_all(tmp_path, first: int, second: int, *, second_fails: bool = False):
    """Run 100, two shards: attempt 1 on day(first), then "re-run all jobs" (attempt 2, both shards)
    on day(second). NN is split over the shards (10 + 20 s, then 12 + 22 s); OPS runs in shard 1 only
    (5 s, then 7 s). With `second_fails`, attempt 2's shard 2 fails."""
    webhooks(tmp_path, day(first), [
        ("workflow_job", job_payload(11, 100, "a" * 40, shard=1, shards=2, attempt=1)),
        ("workflow_job", job_payload(12, 100, "a" * 40, shard=2, shards=2, attempt=1))])
    webhooks(tmp_path, day(second), [
        ("workflow_job", job_payload(21, 100, "a" * 40, shard=1, shards=2, attempt=2)),
        ("workflow_job", job_payload(22, 100, "a" * 40, shard=2, shards=2, attempt=2,
                                     conclusion="failure" if second_fails else "success"))])
    write_test_run(tmp_path, day(first), [
        nn(11, 100, 10.0, attempt=1), nn(12, 100, 20.0, name="test_pool", attempt=1),
        run_row(11, 100, "test_add", time=5.0, file=OPS, classname="TestOps", attempt=1)])
    write_test_run(tmp_path, day(second), [
        nn(21, 100, 12.0, attempt=2),
        nn(22, 100, 22.0, name="test_pool", attempt=2, status="failed" if second_fails else "passed"),
        run_row(21, 100, "test_add", time=7.0, file=OPS, classname="TestOps", attempt=2)])


def build_times(tmp_path, *days):
    for d in days:
        build_test_results(lake(tmp_path), d)
        build_test_time_daily(lake(tmp_path), d)


def daily_rows(tmp_path, on_day: str) -> list[dict]:
    con = connect()
    try:
        lake(tmp_path).register(con, "test_time_daily", [on_day], name="t")
        cur = con.execute("SELECT * FROM t ORDER BY ALL")
        return [dict(zip([d[0] for d in cur.description], row)) for row in cur.fetchall()]
    finally:
        con.close()


def file_runs(tmp_path, on_day: str, window_days: int = WINDOW_DAYS) -> dict:
    """{file: (seconds, runs)} of the window ending on `on_day`."""
    files, _ = window_times(lake(tmp_path), on_day, window_days)
    return {r["file"]: (r["time"], r["runs"]) for r in files}


def test_a_run_re_run_whole_the_next_day_counts_once(tmp_path):
    """Attempt 1 clean on D-1, "re-run all jobs" clean on D: one run in the window, not two. D-1
    summed the run whole (its first attempt is there); D, whose earliest attempt of it is 2, keeps
    its shards apart, and the window leaves them out: the run counted on D-1."""
    rerun_all(tmp_path, -1, 0)
    build_times(tmp_path, day(-1), day(0))
    assert {(r["file"], r["workflow_id"], r["runs"]) for r in daily_rows(tmp_path, day(-1))} == {
        ("nn/test_nn", None, 1), ("test_ops", None, 1), (None, 100, 0)}  # the run summed, and its marker
    assert {(r["workflow_id"], r["runs"], r["attempt"]) for r in daily_rows(tmp_path, day(0))} == {(100, 0, 2)}
    assert file_runs(tmp_path, day(0)) == {"nn/test_nn": (30.0, 1), "test_ops": (5.0, 1)}
    _, classes = window_times(lake(tmp_path), day(0))
    assert {(r["file"], r["classname"]): (r["time"], r["runs"]) for r in classes} == {
        ("nn/test_nn", "TestNN"): (30.0, 1), ("test_ops", "TestOps"): (5.0, 1)}
    # a window starting on D sees D-1 among its look-back days: the run counted there, not here
    assert file_runs(tmp_path, day(0), window_days=1) == {}


def test_a_failing_re_run_of_a_counted_run_adds_nothing(tmp_path):
    """The re-run of D-1's clean run fails a shard on D: its clean shard does not count the run again."""
    rerun_all(tmp_path, -1, 0, second_fails=True)
    build_times(tmp_path, day(-1), day(0))
    assert file_runs(tmp_path, day(0)) == {"nn/test_nn": (30.0, 1), "test_ops": (5.0, 1)}


def test_a_failed_run_re_run_whole_the_next_day_counts_its_latest_attempt_once(tmp_path):
    """Attempt 1 on D-1 fails shard 2 (kept apart), "re-run all jobs" passes on D: the shards join
    across the days, each at its latest clean attempt, as a "re-run failed jobs" would."""
    webhooks(tmp_path, day(-1), [
        ("workflow_job", job_payload(11, 100, "a" * 40, shard=1, shards=2, attempt=1)),
        ("workflow_job", job_payload(12, 100, "a" * 40, shard=2, shards=2, attempt=1, conclusion="failure"))])
    webhooks(tmp_path, day(0), [
        ("workflow_job", job_payload(21, 100, "a" * 40, shard=1, shards=2, attempt=2)),
        ("workflow_job", job_payload(22, 100, "a" * 40, shard=2, shards=2, attempt=2))])
    write_test_run(tmp_path, day(-1), [
        nn(11, 100, 10.0, attempt=1), nn(12, 100, 20.0, name="test_pool", attempt=1, status="failed"),
        run_row(11, 100, "test_add", time=5.0, file=OPS, classname="TestOps", attempt=1)])
    write_test_run(tmp_path, day(0), [
        nn(21, 100, 12.0, attempt=2), nn(22, 100, 22.0, name="test_pool", attempt=2),
        run_row(21, 100, "test_add", time=7.0, file=OPS, classname="TestOps", attempt=2)])
    build_times(tmp_path, day(-1), day(0))
    assert file_runs(tmp_path, day(0)) == {"nn/test_nn": (34.0, 1), "test_ops": (7.0, 1)}


def test_a_re_run_counts_once_whichever_day_is_materialized_first(tmp_path):
    """Each day's partition reads its own reports only: D alone counts the re-run (attempt 2) once;
    once D-1 is there, the run counts once from D-1, and rebuilding either day changes nothing."""
    rerun_all(tmp_path, -1, 0)
    build_times(tmp_path, day(0))
    assert file_runs(tmp_path, day(0)) == {"nn/test_nn": (34.0, 1), "test_ops": (7.0, 1)}
    alone = daily_rows(tmp_path, day(0))
    build_times(tmp_path, day(-1))
    assert file_runs(tmp_path, day(0)) == {"nn/test_nn": (30.0, 1), "test_ops": (5.0, 1)}
    before = daily_rows(tmp_path, day(-1))
    build_times(tmp_path, day(0), day(-1))
    assert daily_rows(tmp_path, day(0)) == alone and daily_rows(tmp_path, day(-1)) == before
    assert file_runs(tmp_path, day(0)) == {"nn/test_nn": (30.0, 1), "test_ops": (5.0, 1)}
