"""The tiered merging of a day's parts (`ingest.compaction`): what a day of increments leaves,
and that a merge keeps every row in its place."""

from __future__ import annotations

from torchci_assets.ingest.compaction import FANOUT, in_age_order, part_level, plan_merges


def day_of_increments(n: int, fanout: int = FANOUT, first: tuple[str, ...] = ("part-0-000",)):
    """Apply the plan after each of `n` increments, as the ingest does; returns the parts after
    each increment, what each part holds (its increments, in order) and every merge made."""
    parts, holds, merges, history = list(first), {p: [p] for p in first}, [], []
    for seq in range(1, n + 1):
        new = f"inc-{seq}-000"
        holds[new] = [new]
        planned, order = plan_merges([*parts, new], seq, fanout=fanout, committed=set(parts))
        for m in planned:
            assert all(s in parts for s in m.sources), "a merge reads only parts committed before"
            assert m.name not in holds, "a name is never reused"
            holds[m.name] = [x for s in m.sources for x in holds[s]]
        merges += planned
        parts = order
        history.append(list(parts))
    return history, holds, merges


def test_a_day_of_one_minute_increments_leaves_few_parts_in_order():
    history, holds, merges = day_of_increments(1440)
    parts = history[-1]
    levels = [part_level(p) for p in parts]
    assert parts[0] == "part-0-000" and levels[0] is None  # a rebuild's part is never merged
    for level in set(levels) - {None}:
        assert levels.count(level) <= FANOUT
    assert max(len(h) for h in history) <= 1 + FANOUT * 3 + 1
    # a folder listed in name order is put back in age order from the names alone
    assert all(in_age_order(sorted(h)) == h for h in history)
    assert len(parts) < 40
    # the parts hold every increment exactly once, oldest first: a reader sees the same rows
    assert [x for p in parts for x in holds[p]] == ["part-0-000", *(f"inc-{s}-000" for s in range(1, 1441))]
    # each increment's rows are rewritten at most twice in a day (levels 1 and 2)
    assert max(part_level(m.name) for m in merges) == 2
    assert sum(len(m.sources) for m in merges if part_level(m.name) == 1) < 1440


def test_nothing_is_merged_until_a_level_has_more_than_fanout_parts():
    history, _, merges = day_of_increments(FANOUT)
    assert merges == [] and history[-1][-1] == f"inc-{FANOUT}-000"
    history, _, merges = day_of_increments(FANOUT + 1)
    assert [m.sources for m in merges] == [tuple(f"inc-{s}-000" for s in range(1, FANOUT + 1))]
    assert history[-1] == ["part-0-000", merges[0].name, f"inc-{FANOUT + 1}-000"]


def test_a_partition_with_many_small_parts_is_merged_down_from_what_was_committed():
    parts = ["data", *(f"inc-{s}" for s in range(1, 101))]
    merges, order = plan_merges([*parts, "inc-101"], 101, fanout=4, committed=set(parts))
    assert all(part_level(m.name) == 1 for m in merges)  # parts merged in this run wait for the next
    assert order[0] == "data" and order[-1] == "inc-101"
    assert sum(1 for p in order if part_level(p) == 0) <= 4 + 1
    merges2, order2 = plan_merges([*order, "inc-102"], 102, fanout=4, committed=set(order))
    assert any(part_level(m.name) == 2 for m in merges2)
    assert len(order2) < len(order)


def test_levels_come_from_the_names_with_a_prefix_for_hidden_files():
    assert part_level("inc-7") == 0 and part_level("inc-7-001") == 0 and part_level("m2-40-1") == 2
    assert part_level("data") is None and part_level("part-0-000") is None and part_level("m2") is None
    assert part_level("stage-inc-3", prefix="stage-") == 0 and part_level("stage-m1-9-0", prefix="stage-") == 1
    assert in_age_order(["stage-inc-10", "stage-inc-9", "stage-m1-8-0", "stage", "stage-m2-8-1"], "stage-") == \
        ["stage", "stage-m2-8-1", "stage-m1-8-0", "stage-inc-9", "stage-inc-10"]
    assert part_level("stage", prefix="stage-") is None and part_level("inc-3", prefix="stage-") is None
    merges, order = plan_merges(["stage", "stage-inc-1", "stage-inc-2", "stage-inc-3"], 3, prefix="stage-",
                                fanout=2)
    assert [m.name for m in merges] == ["stage-m1-3-0"] and order == ["stage", "stage-m1-3-0", "stage-inc-3"]


def test_a_merge_of_parts_written_before_and_after_a_column_was_added_keeps_the_column(tmp_path):
    """The day a deployment adds a column (the push table's `commits`), the morning's parts lack it
    and the afternoon's have it; merging them must keep the afternoon's values, the morning's rows
    reading NULL, as a day built at once by the new version would read the old rows' absence."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from resources.lake import Lake
    from torchci_assets.ingest.commit import PartitionCommit
    from torchci_assets.ingest.compaction import Merge, write_merge

    lake, day = Lake.at(str(tmp_path / "lake")), "2026-11-02"
    lake.write("push", day, pa.table({"after": ["a1", "a2"]}), part="inc-1-000")
    lake.write("push", day, pa.table({"after": ["a3"], "commits": pa.array([["c", "a3"]], pa.list_(pa.string()))}),
               part="inc-2-000")
    paths = {s: lake.store.full(lake.partition_path("push", day, s)) for s in ("inc-1-000", "inc-2-000")}
    out = PartitionCommit(lake)
    assert write_merge(out, lake, "push", day, Merge("m1-000", ("inc-1-000", "inc-2-000")), paths) == 3
    out.commit()
    (merged,) = lake.files("push", [day])
    assert merged.endswith("m1-000.parquet")
    assert pq.read_table(merged).to_pylist() == [
        {"after": "a1", "commits": None}, {"after": "a2", "commits": None}, {"after": "a3", "commits": ["c", "a3"]}]
