"""The journal of a commit of several files (`Store.commit_files`, `PartitionCommit.commit`): written
before the commit's first change and removed after its last, finished by whoever finds it left by a
killed run, and never taken for another ingest's commit still at work. The kills themselves, real
ones, are in `test_commit_kill`."""

from __future__ import annotations

import pyarrow as pa
import pytest

from resources.lake import Lake
from resources.storage import Store, staging_name
from torchci_assets.ingest.commit import PartitionCommit

DAY = "2026-11-20"


class Killed(Exception):
    pass


def killed_after_journal(monkeypatch, commit: PartitionCommit) -> None:
    """Run `commit` up to its first change: what a SIGKILL there leaves (see `test_commit_kill`)."""
    def die(self, deletes, moves):
        raise Killed()
    with monkeypatch.context() as m:
        m.setattr(Store, "_apply", die)
        with pytest.raises(Killed):
            commit.commit()


def names(lake: Lake, table: str) -> list[str]:
    return sorted(e.path.rsplit("/", 1)[-1] for e in lake.store.list_folder(f"{table}/day={DAY}"))


def rows(lake: Lake, table: str) -> list[int]:
    """The table's rows in the Parquet files its folder lists (what is on disk, journals aside)."""
    files = [lake.store.full(e.path) for e in lake.store.list_files(f"{table}/day={DAY}", (".parquet",))]
    return sorted(lake.read_files(files).column("n").to_pylist())


def part(n: list[int]) -> pa.Table:
    return pa.table({"n": pa.array(n, pa.int64())})


def test_a_commit_journals_its_changes_while_it_makes_them_and_leaves_no_journal(tmp_path, monkeypatch):
    lake = Lake.at(str(tmp_path), owner="run-1")
    lake.write("t", DAY, part([1]), part="inc-1")
    seen = []
    real = Store._apply

    def apply(self, deletes, moves):
        seen.append([(j.deletes, [final for _, final in j.moves]) for j in self.journals(f"t/day={DAY}")])
        return real(self, deletes, moves)

    monkeypatch.setattr(Store, "_apply", apply)
    with PartitionCommit(lake) as out:
        out.write("t", DAY, part([1, 2]))
        out.write("rejects", DAY, part([9]), part="t")
        out.replace_parts("t", DAY, "inc-")
    assert seen == [[((f"t/day={DAY}/inc-1.parquet",), [f"t/day={DAY}/data.parquet", f"rejects/day={DAY}/t.parquet"])]]
    assert names(lake, "t") == ["data.parquet"] and names(lake, "rejects") == ["t.parquet"]
    seen.clear()
    with PartitionCommit(lake) as out:  # one change: a rename is atomic, no journal
        out.write("t", DAY, part([1, 2, 3]))
    assert seen == [[]] and rows(lake, "t") == [1, 2, 3]


def test_the_next_commit_finishes_a_killed_one_it_overlaps_and_leaves_another_ingests_alone(tmp_path, monkeypatch):
    lake = Lake.at(str(tmp_path))
    lake.write("t", DAY, part([1]))
    lake.write("t", DAY, part([2]), part="inc-1")
    lake.write("rejects", DAY, part([8]), part="other")
    # another ingest's commit at work in the shared folder: its journal names only its own parts
    other = PartitionCommit(Lake.at(str(tmp_path), owner="other-run"))
    other.write("rejects", DAY, part([8, 80]), part="other")
    other.write("u", DAY, part([5]))
    killed_after_journal(monkeypatch, other)
    # this ingest's daily rebuild, killed after its journal: nothing changed yet
    killed = PartitionCommit(Lake.at(str(tmp_path), owner="dead-run"))
    killed.write("t", DAY, part([1, 2, 3]))
    killed.write("rejects", DAY, part([7]), part="t")
    killed.replace_matching("t", DAY, lambda name: name != "data.parquet")
    killed_after_journal(monkeypatch, killed)
    assert rows(lake, "t") == [1, 2] and len(lake.store.journals(f"rejects/day={DAY}")) == 2
    # its next run, a refresh adding a part: the killed rebuild is finished first, then the part added
    with PartitionCommit(Lake.at(str(tmp_path), owner="next-run")) as out:
        out.write("t", DAY, part([4]), part="inc-1")
    assert rows(lake, "t") == [1, 2, 3, 4] and rows(lake, "rejects") == [7, 8]
    assert names(lake, "t") == ["data.parquet", "inc-1.parquet"]
    left = lake.store.journals(f"rejects/day={DAY}")
    assert [j.owner for j in left] == ["other-run"] == [j.owner for j in lake.store.journals(f"u/day={DAY}")]
    assert all(lake.store.exists(staged) for staged, _ in left[0].moves)  # its staged files untouched


def test_a_sweep_may_finish_the_commits_of_dead_runs_only(tmp_path, monkeypatch):
    lake = Lake.at(str(tmp_path))
    for owner, n in (("dead-run", 1), ("live-run", 2)):
        c = PartitionCommit(Lake.at(str(tmp_path), owner=owner))
        c.write("t", DAY, part([n]), part=f"from-{owner}")
        c.write("t", DAY, part([n * 10]), part=f"more-from-{owner}")
        killed_after_journal(monkeypatch, c)
    done = lake.store.finish_commits(f"t/day={DAY}", is_live=lambda owner: owner == "live-run")
    assert len(done) == 1 and "dead-run" in done[0]
    assert rows(lake, "t") == [1, 10]
    assert [j.owner for j in lake.store.journals(f"t/day={DAY}")] == ["live-run"]


def test_finishing_a_rename_done_by_half_or_a_commit_finished_already_changes_nothing_more(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    folder = f"t/day={DAY}"
    staged = f"{folder}/{staging_name('data.parquet', 'pending', 'dead')}"
    store.write_bytes(staged, b"new")
    store.write_bytes(f"{folder}/data.parquet", b"new")  # S3's move: copied, then killed before the delete
    store.write_bytes(f"{folder}/inc-1.parquet", b"old")
    c = PartitionCommit(Lake(store, owner="dead"))
    c.pending = [(staged, f"{folder}/data.parquet")]
    c.replace_parts("t", DAY, "inc-")
    killed_after_journal(monkeypatch, c)
    [journal] = store.journals(folder)
    store.finish_commit(journal)
    store.finish_commit(journal)  # twice: two runs finishing it at once
    assert store.read_bytes(f"{folder}/data.parquet") == b"new" and not store.exists(staged)
    assert sorted(e.path for e in store.list_folder(folder)) == [f"{folder}/data.parquet"]


def test_a_file_named_like_a_journal_that_is_none_is_an_error_naming_it(tmp_path):
    store = Store(str(tmp_path))
    store.write_bytes(f"t/day={DAY}/_commit-{'ab' * 16}.json", b"{}")
    with pytest.raises(ValueError, match="_commit-abab.*is not a commit journal"):
        store.journals(f"t/day={DAY}")
