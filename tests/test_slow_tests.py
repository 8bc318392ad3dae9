"""slow-tests.json: PyTorch's rule (one mean over configurations, ASAN left out) and its day."""

import json

import pyarrow as pa

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.flakiness.lists import SLOW_TESTS_PATH, dumps, publish_slow_tests

D = "2026-11-14"
ASAN = "linux-jammy-py3.10-clang18-asan"


def stats_row(name, env, seconds, passes, cls="TestX", config="default"):
    return {"classname": cls, "name": name, "build_env": env, "test_config": config, "branch_class": "main",
            "pass_time": seconds * passes, "clean_passes": passes}


def test_slow_tests_average_over_configurations_without_asan(tmp_path):
    """test-infra's slow_tests query: AVG over the jobs of every non-ASAN configuration, > 60 s."""
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    lake.write("test_daily_stats", D, pa.Table.from_pylist([
        stats_row("test_big", "linux-jammy-py3.10-gcc11", 40.0, 1), stats_row("test_big", "win", 40.0, 2),
        stats_row("test_big", ASAN, 70.0, 5),  # 70 s under ASAN only: not slow
        stats_row("test_slow", "linux-jammy-py3.10-gcc11", 50.0, 1), stats_row("test_slow", "win", 100.0, 1),
        stats_row("test_dotted", "win", 80.0, 1, cls="test_mod.TestY"), stats_row("test_dotted", "mac", 40.0, 1,
                                                                                  cls="TestY"),
    ]))
    assert publish_slow_tests(lake, out, D, 14) == (1, "", None)
    # test_slow: (50 + 100) / 2 = 75 s; test_dotted (one PyTorch id for both classnames): 60 s, not over
    assert json.loads(out.read_bytes(SLOW_TESTS_PATH)) == {"test_slow (__main__.TestX)": 75.0}
    [row] = pa.parquet.read_table(str(tmp_path / "lake" / "slow_tests" / f"day={D}" / "data.parquet")).to_pylist()
    assert (row["build_env"], row["clean_passes"]) == ("win", 2)  # where it is slowest, and every pass


def test_a_rerun_of_an_earlier_day_leaves_the_later_list(tmp_path):
    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    earlier = "2026-10-20"
    lake.write("test_daily_stats", earlier, pa.Table.from_pylist([stats_row("test_old", "linux", 90.0, 3)]))
    lake.write("test_daily_stats", D, pa.Table.from_pylist([stats_row("test_new", "linux", 90.0, 3)]))
    assert publish_slow_tests(lake, out, D, 14) == (1, "", None)
    published = out.read_bytes(SLOW_TESTS_PATH)

    assert publish_slow_tests(lake, out, earlier, 14) == (1, "", D)
    assert out.read_bytes(SLOW_TESTS_PATH) == published == dumps({"test_new (__main__.TestX)": 90.0})
    assert publish_slow_tests(lake, out, D, 14) == (1, "", None)  # the same day publishes again


def test_the_catalog_says_an_earlier_day_published_nothing(tmp_path):
    """docs/operations.md: a re-run of an old day shows `published: false` beside `not_published`."""
    from torchci_assets.derived.flakiness.assets import slow_tests_asset

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    earlier = "2026-10-20"
    for day, name in ((earlier, "test_old"), (D, "test_new")):
        lake.write("test_daily_stats", day, pa.Table.from_pylist([stats_row(name, "linux", 90.0, 3)]))
    assert _materialize(slow_tests_asset, tmp_path, D)["published"] is True
    meta = _materialize(slow_tests_asset, tmp_path, earlier)
    assert meta["published"] is False and f"shows {D}, later than {earlier}" in meta["not_published"]
    assert meta["output"] == out.display(SLOW_TESTS_PATH)


def _materialize(asset, tmp_path, day):
    """The asset's metadata for `day`, materialized as Dagster does (lake and outputs under tmp_path)."""
    import dagster as dg

    from resources.configured import LakeResource, OutputsResource

    result = dg.materialize([asset], partition_key=day, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out"))})
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


# Three tests of PyTorch's published slow-tests.json (tests/data/pytorch/slow-tests.2026-08-22.json.gz)
AVG_POOL = ("test_avg_pool3d_backward_cpu", "CpuTests")
UNFOLD = ("test_comprehensive_nn_functional_unfold_cuda_complex64", "TestDecompCUDA")
ALEXNET = ("test_alexnet_prefix_cpu", "CpuHalideTests")


def workflow_hooks(job: int, env: str, workflow: str, *, config: str = "default", job_knows: bool = True):
    """A main-branch job of `workflow` and its run (a scheduled one); without `job_knows`, the job's
    payload lacks workflow_name (older GitHub) and only the run's webhook names the workflow."""
    from test_test_stats import job_payload, run_payload

    run = 100 * job
    payload = job_payload(job, run, f"{job:040d}", env=env, config=config)
    if job_knows:
        payload["workflow_job"]["workflow_name"] = workflow
    else:
        del payload["workflow_job"]["workflow_name"]
    run_hook = run_payload(run, f"{job:040d}", "schedule")
    run_hook["workflow_run"]["name"] = workflow
    return [("workflow_job", payload), ("workflow_run", run_hook)]


def test_the_periodic_workflow_is_left_out_as_pytorchs_slow_test_query_does(tmp_path):
    """pytorch/pytorch's tools/testing/update_slow_tests.py reads the jobs of every workflow but the
    one named `periodic` (`w.name != 'periodic'`): a test slow only in periodic jobs (its debug
    build) is not slow, one slow in the `slow` workflow is. The workflow comes from the run's
    webhook when the job's own payload lacks it; a window partition written before the periodic
    counters existed is read beside the new ones, nothing subtracted from it."""
    from test_test_stats import D, day, run_row, webhooks, write_test_run

    from torchci_assets.derived.results.stats import build_test_daily_stats, build_test_results

    lake, out = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    debug = "linux-jammy-cuda13.0-py3.10-gcc11-debug"
    webhooks(tmp_path, D, [*workflow_hooks(1, "linux-jammy-py3.10-gcc11", "pull"),
                           *workflow_hooks(2, debug, "periodic"),
                           *workflow_hooks(3, debug, "periodic", job_knows=False),
                           *workflow_hooks(4, "linux-jammy-cuda13.0-py3.10-gcc11-sm86", "slow", config="slow")])

    def row(job, test, seconds):
        return run_row(job, 100 * job, test[0], time=seconds, file="inductor/test_torchinductor.py",
                       classname=test[1])

    write_test_run(tmp_path, D, [row(1, AVG_POOL, 30.0), row(2, AVG_POOL, 210.0), row(3, AVG_POOL, 150.0),
                                 row(2, ALEXNET, 300.0), row(4, UNFOLD, 90.0)])
    build_test_results(lake, D)
    build_test_daily_stats(lake, D)
    # the day before, as the code before the periodic counters wrote it
    lake.write("test_daily_stats", day(-1), pa.Table.from_pylist([stats_row("test_old", "linux", 80.0, 2)]))

    assert publish_slow_tests(lake, out, D, 14) == (2, "", None)
    # test_avg_pool3d_backward_cpu: 30 s outside periodic (with periodic's passes it would be 130 s);
    # test_alexnet_prefix_cpu ran in periodic only; test_old's day has no counters: counted as it was
    assert json.loads(out.read_bytes(SLOW_TESTS_PATH)) == {
        "test_comprehensive_nn_functional_unfold_cuda_complex64 (__main__.TestDecompCUDA)": 90.0,
        "test_old (__main__.TestX)": 80.0}
