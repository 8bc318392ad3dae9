"""Listing a local folder tree again, reading only the folders that changed (`resources.listing_cache`):
the same entries as a full walk, whatever was added, removed, replaced or linked since."""

import os
import time

import pytest

from resources import listing_cache
from resources.listing_cache import KeptListings, ListingCache
from resources.storage import Store

SUFFIXES = (".xml",)
SETTLE_S = 0.2


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch):
    """Folders settle after 0.2 s here, not 2 s (the walk keeps only folders unchanged for that long)."""
    monkeypatch.setattr(listing_cache, "SETTLE_NS", int(SETTLE_S * 1e9))


def tree(root, jobs: range, files: int = 2) -> None:
    for job in jobs:
        folder = root / "day=D" / "run" / "1" / str(job) / "test" / "test-reports"
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(files):
            (folder / f"r{k}.xml").write_text(f"<testsuites>{job}-{k}</testsuites>")
        (folder / "ignored.txt").write_text("not a report")


def walk(store: Store, saved: bytes | None) -> tuple[list, ListingCache]:
    cache = ListingCache.from_bytes(saved, store.full(""), SUFFIXES)
    return store.list_files("day=D", SUFFIXES, cache), cache


def settled() -> None:
    time.sleep(SETTLE_S + 0.05)


def test_a_walk_from_the_cache_lists_what_a_full_walk_lists(tmp_path):
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 6))
    settled()
    first, cache = walk(store, None)
    assert first == store.list_files("day=D", SUFFIXES) and len(first) == 10
    assert cache.folders_read == 18 and cache.folders_reused == 0  # day=D, run, 1, and 3 per job
    again, cache = walk(store, cache.to_bytes())
    assert again == first and (cache.folders_read, cache.folders_reused) == (0, 18)

    # a report added to a job's folder, a new job, a report removed, one replaced by a rename
    deep = tmp_path / "day=D" / "run" / "1" / "2" / "test" / "test-reports"
    (deep / "late.xml").write_text("<testsuites/>")
    tree(tmp_path, range(6, 7))
    (tmp_path / "day=D" / "run" / "1" / "3" / "test" / "test-reports" / "r0.xml").unlink()
    other = tmp_path / "day=D" / "run" / "1" / "4" / "test" / "test-reports"
    (other / "new.tmp").write_text("<testsuites>replaced</testsuites>")
    os.replace(other / "new.tmp", other / "r1.xml")
    changed, cache = walk(store, cache.to_bytes())
    assert changed == store.list_files("day=D", SUFFIXES)
    paths = {e.path for e in changed}
    assert "day=D/run/1/2/test/test-reports/late.xml" in paths and "day=D/run/1/3/test/test-reports/r0.xml" not in paths
    assert len(paths) == 10 + 1 + 2 - 1
    # the three folders whose files changed, the one the new job was added to, the new job's three
    assert cache.folders_read == 3 + 1 + 3 and cache.folders_reused == 18 - 4


def test_a_link_swapped_in_for_a_folder_is_refused_not_followed(tmp_path):
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 3))
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.xml").write_text("<testsuites/>")
    settled()
    _, cache = walk(store, None)
    job = tmp_path / "day=D" / "run" / "1" / "2"
    for p in sorted(job.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    job.rmdir()
    job.symlink_to(tmp_path / "outside")
    listed, _ = walk(store, cache.to_bytes())
    assert listed == store.list_files("day=D", SUFFIXES)
    assert [e.path for e in listed if e.refused] == ["day=D/run/1/2"]
    assert not any("secret" in e.path for e in listed)


def test_a_folder_changed_just_before_the_walk_is_read_again_next_time(tmp_path):
    """Its times may not move for a change within the same clock tick: it is not kept."""
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 3))
    _, cache = walk(store, None)  # everything just written: nothing has settled
    assert cache.current == {}
    settled()
    _, cache = walk(store, cache.to_bytes())
    assert cache.folders_read == 9 and len(cache.current) == 9


def test_a_cache_for_another_root_or_other_suffixes_or_unreadable_starts_empty(tmp_path):
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 3))
    settled()
    _, cache = walk(store, None)
    saved = cache.to_bytes()
    assert ListingCache.from_bytes(saved, store.full(""), SUFFIXES).previous == cache.current
    assert ListingCache.from_bytes(saved, "/elsewhere", SUFFIXES).previous == {}
    assert ListingCache.from_bytes(saved, store.full(""), (".xml", ".zip")).previous == {}
    assert ListingCache.from_bytes(b"{not json", store.full(""), SUFFIXES).previous == {}
    with pytest.raises(ValueError, match="cannot list"):
        store.list_files("day=D", (".zip",), cache)


def test_kept_listings_show_each_change_at_once_and_a_file_appended_in_place_by_the_next_full_walk(tmp_path):
    """The relay's sensors list the archive's day folders several times a second: a kept walk
    answers while no folder changed, and a walk in full every `relist_s` catches a file grown in
    place (a collector appending), which changes no folder."""
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 4))
    settled()
    now = [1000.0]
    kept = KeptListings(relist_s=5.0, clock=lambda: now[0])
    first = kept.list_files(store, "day=D", SUFFIXES)
    assert first == store.list_files("day=D", SUFFIXES) and len(first) == 6

    folder = tmp_path / "day=D" / "run" / "1" / "2" / "test" / "test-reports"
    (folder / "late.xml").write_text("<testsuites/>")  # a new file: its folder changes
    (tmp_path / "day=D" / "run" / "1" / "3" / "test" / "test-reports" / "r0.xml").unlink()
    now[0] += 1
    listed = kept.list_files(store, "day=D", SUFFIXES)
    assert listed == store.list_files("day=D", SUFFIXES) and len(listed) == 6

    settled()
    now[0] += 1
    assert kept.list_files(store, "day=D", SUFFIXES) == listed  # every folder kept again
    grown = folder / "r0.xml"
    with open(grown, "a") as f:
        f.write("<!-- more -->")
    size = {e.path: e.size for e in store.list_files("day=D", SUFFIXES)}
    path = "day=D/run/1/2/test/test-reports/r0.xml"
    now[0] += 1  # within relist_s of the last full walk: the kept walk, with the old size
    assert {e.path: e.size for e in kept.list_files(store, "day=D", SUFFIXES)}[path] == size[path] - len("<!-- more -->")
    now[0] += 5  # past it: walked in full
    assert {e.path: e.size for e in kept.list_files(store, "day=D", SUFFIXES)} == size


def test_kept_listings_keep_a_bounded_number_of_prefixes(tmp_path):
    store = Store(str(tmp_path))
    for day in ("A", "B", "C"):
        (tmp_path / f"day={day}").mkdir()
        (tmp_path / f"day={day}" / "r.xml").write_text("<testsuites/>")
    settled()
    kept = KeptListings(relist_s=5.0, limit=2)
    for day in ("A", "B", "C", "C"):
        assert [e.path for e in kept.list_files(store, f"day={day}", SUFFIXES)] == [f"day={day}/r.xml"]
    assert [k[1] for k in kept._kept] == ["day=B", "day=C"]


def sealing_walk(store: Store, saved: bytes | None, at: float) -> tuple[list, ListingCache]:
    """A walk as the refresh lists reports: quiet subtrees sealed; the clock at `at` seconds."""
    cache = ListingCache.from_bytes(saved, store.full(""), SUFFIXES, seal=True, clock=lambda: at)
    return store.list_files("day=D", SUFFIXES, cache), cache


def test_quiet_subtrees_are_sealed_and_only_their_top_levels_stated(tmp_path):
    """Every job's subtree has been quiet for SEAL_S: a run's record stands for its attempt, its jobs
    and their files, after a stat of the run folder and the folders CHECK_DEPTH levels below it."""
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 6))
    later = time.time() + listing_cache.SEAL_S + 1
    first, cache = sealing_walk(store, None, later)
    assert first == store.list_files("day=D", SUFFIXES) and cache.folders_read == 18
    assert list(cache.now_sealed) == ["day=D/run"] and list(cache.current) == ["day=D"]
    again, cache = sealing_walk(store, cache.to_bytes(), later + 10)
    assert again == first
    # day=D by itself; run, 1, the five jobs and their `test` folders stat-ed; their `test-reports` not
    assert (cache.folders_read, cache.folders_reused, cache.folders_unseen) == (0, 1 + 1 + 1 + 5 + 5, 5)


def test_a_new_job_in_a_sealed_run_is_listed_at_once_and_only_that_run_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(listing_cache, "SEAL_S", 1.0)  # quiet after a second, to see one job that is not
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 4))
    (tmp_path / "day=D" / "other" / "1" / "9").mkdir(parents=True)
    (tmp_path / "day=D" / "other" / "1" / "9" / "r.xml").write_text("<testsuites/>")
    time.sleep(1.1)
    _, cache = sealing_walk(store, None, time.time())
    assert sorted(cache.now_sealed) == ["day=D/other", "day=D/run"]
    tree(tmp_path, range(4, 5))  # its attempt folder changes: the run's record no longer stands
    settled()
    listed, cache = sealing_walk(store, cache.to_bytes(), time.time())
    assert listed == store.list_files("day=D", SUFFIXES) and len(listed) == 2 * 4 + 1
    assert cache.folders_read == 3 * 4 + 2  # the run's folders, the new job's among them
    # the new job is not quiet yet: the run is kept folder by folder, the old jobs sealed
    assert sorted(cache.now_sealed) == ["day=D/other", *(f"day=D/run/1/{j}" for j in range(1, 4))]
    assert sorted(cache.current) == ["day=D", "day=D/run", "day=D/run/1", "day=D/run/1/4",
                                     "day=D/run/1/4/test", "day=D/run/1/4/test/test-reports"]
    time.sleep(1.1)
    listed_again, cache = sealing_walk(store, cache.to_bytes(), time.time())
    assert listed_again == listed and sorted(cache.now_sealed) == ["day=D/other", "day=D/run"]


def test_a_file_added_deep_in_a_sealed_subtree_is_listed_by_the_walk_that_verifies(tmp_path):
    """The trade sealing makes: a report written into a finished job's module folder (no writer
    does) is not seen by a quick walk; the walk every VERIFY_S stats every folder and lists it."""
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 4))
    later = time.time() + listing_cache.SEAL_S + 1
    first, cache = sealing_walk(store, None, later)
    assert cache.verifies
    deep = tmp_path / "day=D" / "run" / "1" / "2" / "test" / "test-reports"
    (deep / "late.xml").write_text("<testsuites/>")
    settled()
    quick, cache = sealing_walk(store, cache.to_bytes(), later + listing_cache.VERIFY_S - 1)
    assert not cache.verifies and quick == first
    verified, cache = sealing_walk(store, cache.to_bytes(), later + listing_cache.VERIFY_S)
    assert cache.verifies and verified == store.list_files("day=D", SUFFIXES) and len(verified) == len(first) + 1
    assert cache.folders_unseen == 0


def test_a_removed_or_replaced_folder_in_a_sealed_subtree_is_read_again(tmp_path):
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 4))
    later = time.time() + listing_cache.SEAL_S + 1
    _, cache = sealing_walk(store, None, later)
    saved = cache.to_bytes()
    job = tmp_path / "day=D" / "run" / "1" / "3"
    for p in sorted(job.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    job.rmdir()
    job.write_text("a file where a job folder was")
    settled()
    listed, _ = sealing_walk(store, saved, later + 10)
    assert listed == store.list_files("day=D", SUFFIXES) and len(listed) == 4
    assert not any("/3/" in e.path for e in listed)


def test_a_cache_read_without_sealing_ignores_sealed_records(tmp_path):
    """The relay's kept walks stat every folder: a record sealed by a refresh is not theirs."""
    store = Store(str(tmp_path))
    tree(tmp_path, range(1, 3))
    _, cache = sealing_walk(store, None, time.time() + listing_cache.SEAL_S + 1)
    plain = ListingCache.from_bytes(cache.to_bytes(), store.full(""), SUFFIXES)
    assert plain.sealed == {} and plain.previous == cache.current
    listed = store.list_files("day=D", SUFFIXES, plain)
    assert listed == store.list_files("day=D", SUFFIXES) and plain.folders_read == 9 - 1


def test_a_tree_deeper_than_the_cached_walk_recurses_is_listed_whole(tmp_path):
    """A hostile archive nests folders deeper than Python's recursion limit: below 32 levels they
    are walked without the cache, never into a recursion error."""
    store = Store(str(tmp_path))
    deepest = os.path.join(str(tmp_path), "day=D")
    os.mkdir(deepest)
    for _ in range(1200):  # one at a time: os.makedirs recurses too
        deepest = os.path.join(deepest, "d")
        os.mkdir(deepest)
    try:
        with open(os.path.join(deepest, "deep.xml"), "w") as f:
            f.write("<testsuites/>")
        listed, _ = sealing_walk(store, None, time.time() + listing_cache.SEAL_S + 1)
        assert [e.path for e in listed] == ["day=D/" + "d/" * 1200 + "deep.xml"]
        assert listed == store.list_files("day=D", SUFFIXES)
    finally:  # from the bottom up: a recursive removal would meet the same limit
        os.unlink(os.path.join(deepest, "deep.xml"))
        folder = deepest
        while folder != str(tmp_path):
            os.rmdir(folder)
            folder = os.path.dirname(folder)
