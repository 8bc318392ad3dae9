"""The tests' Dagster instances start from a copy of one new instance's files (conftest.py's
`instance_template`): each must still be a new instance of its own, as `instance_for_test` makes."""

from pathlib import Path

import dagster as dg
from conftest import instance_template, ram_instance


@dg.op
def noop():
    return None


@dg.job
def one_op():
    noop()


def test_each_instance_starts_empty_and_keeps_its_runs_to_itself():
    with ram_instance() as first:
        assert first.get_runs() == []
        run = one_op.execute_in_process(instance=first)
        assert run.success and [r.run_id for r in first.get_runs()] == [run.run_id]
        assert first.get_latest_materialization_event(dg.AssetKey("x")) is None
        with ram_instance() as second:
            assert second.get_runs() == [] and second.all_logs(run.run_id) == []
            assert second.root_directory != first.root_directory
    with ram_instance() as third:
        assert third.get_runs() == []


def test_an_instance_writes_its_own_folder_never_the_template():
    before = {p.name: p.read_bytes() for p in _files(instance_template())}
    with ram_instance() as inst:
        one_op.execute_in_process(instance=inst)
        assert inst.root_directory != instance_template()
    assert {p.name: p.read_bytes() for p in _files(instance_template())} == before


def _files(folder: str) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.is_file())
