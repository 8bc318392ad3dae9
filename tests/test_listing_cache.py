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
