import json

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.sharding.plans import (
    build_shard_plans,
    default_shards,
    plan_path,
)
from torchci_assets.derived.sharding.times import FILE_TIMES_SCHEMA

DAY = "2026-11-05"


def _write_inputs(lake: Lake):
    times = [
        ("linux-jammy-py3.10-gcc11", "default", f"test_{i}", float(t)) for i, t in enumerate([3000, 900, 400, 120, 60, 5])
    ] + [
        ("unit-test / inductor-test", "inductor", "inductor/test_torchinductor", 5000.0),
        ("unit-test / inductor-test", "inductor", "inductor/test_compile", 200.0),
    ]
    lake.write("test_times", DAY, pa.Table.from_pylist(
        [dict(build_env=e, test_config=c, file=f, time=t, runs=3) for e, c, f, t in times], schema=FILE_TIMES_SCHEMA))
    jobs = pa.table({"build_env": ["linux-jammy-py3.10-gcc11", "linux-jammy-py3.10-gcc11", None],
                     "test_config": ["default", "default", None], "num_shards": pa.array([2, 3, None], pa.int32())})
    lake.write("workflow_job", "2026-11-03", jobs)


def test_every_config_gets_a_plan_with_every_file(tmp_path):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    _write_inputs(lake)
    report = build_shard_plans(lake, outputs, DAY)
    assert report.configs == 2 and report.files == 8

    linux = json.loads(outputs.read_bytes(plan_path("linux-jammy-py3.10-gcc11", "default")))
    assert [s["index"] for s in linux["shards"]] == [1, 2, 3]  # as many shards as CI ran lately
    entries = [(t["file"], t["part"], t["parts"]) for s in linux["shards"] for t in s["tests"]]
    for i in range(6):
        parts = sorted(p for f, p, _ in entries if f == f"test_{i}")
        assert parts == list(range(1, len(parts) + 1))  # each file once per part

    # a build_env with '/' stays one folder; a config never seen in workflow_job gets ~40 min shards
    inductor = json.loads((tmp_path / "out" / "shard-plans" / "unit-test%20%2F%20inductor-test" / "inductor.json").read_text())
    assert len(inductor["shards"]) == default_shards(5200.0) == 3
    assert {t["file"] for s in inductor["shards"] for t in s["tests"]} == {"inductor/test_torchinductor", "inductor/test_compile"}

    rows = lake.files("shard_plans", [DAY])
    assert sum(pq.read_metadata(f).num_rows for f in rows) == len(entries) + \
        sum(len(s["tests"]) for s in inductor["shards"])


def test_default_shards_bounds():
    assert default_shards(0) == 1 and default_shards(2400) == 1 and default_shards(2401) == 2
    assert default_shards(10 ** 6) == 16


def test_plans_are_rewritten_only_when_they_change_and_never_by_an_earlier_day(tmp_path):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    _write_inputs(lake)
    later = "2026-11-06"
    for file in lake.files("test_times", [DAY]):  # the same times the next day
        lake.write("test_times", later, pa.parquet.read_table(file))
    path = plan_path("linux-jammy-py3.10-gcc11", "default")
    assert build_shard_plans(lake, outputs, DAY).written == 2
    first = outputs.read_bytes(path)
    mtime = (tmp_path / "out" / path).stat().st_mtime_ns

    report = build_shard_plans(lake, outputs, later)
    assert report.written == 0 and report.later_day is None  # nothing new to say: no file touched
    assert outputs.read_bytes(path) == first and (tmp_path / "out" / path).stat().st_mtime_ns == mtime
    assert json.loads(outputs.read_bytes("shard-plans/day.json")) == {"day": later}

    lake.write("test_times", DAY, pa.Table.from_pylist(  # DAY re-run with other times
        [dict(build_env="linux-jammy-py3.10-gcc11", test_config="default", file="test_0", time=1.0, runs=1)],
        schema=FILE_TIMES_SCHEMA))
    report = build_shard_plans(lake, outputs, DAY)
    assert report.later_day == later and report.written == 0
    assert outputs.read_bytes(path) == first
    assert lake.files("shard_plans", [DAY])  # the lake still has the day's own plans


def test_the_catalog_says_an_earlier_day_published_nothing(tmp_path):
    """docs/operations.md: a re-run of an old day shows `published: false` beside `not_published`."""
    from torchci_assets.derived.sharding.assets import shard_plans_asset

    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    _write_inputs(lake)
    later = "2026-11-06"
    for file in lake.files("test_times", [DAY]):
        lake.write("test_times", later, pa.parquet.read_table(file))
    assert _materialize(shard_plans_asset, tmp_path, later)["published"] is True
    meta = _materialize(shard_plans_asset, tmp_path, DAY)
    assert meta["published"] is False and f"shows {later}, later than {DAY}" in meta["not_published"]
    assert meta["output"] == outputs.display("shard-plans/")


def _materialize(asset, tmp_path, day):
    """The asset's metadata for `day`, materialized as Dagster does (lake and outputs under tmp_path)."""
    import dagster as dg

    from resources.configured import LakeResource, OutputsResource

    result = dg.materialize([asset], partition_key=day, resources={
        "lake": LakeResource(uri=str(tmp_path / "lake")), "outputs": OutputsResource(uri=str(tmp_path / "out"))})
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}
