"""The sensor's fingerprint of a day on a local archive, through the cache of quiet subtrees: it
equals a full walk's, sees every file landing where a folder changes, and a file landing deep in a
quiet subtree at the latest when the day is walked in full again, under any clock."""

import os
import time

from resources.storage import Store
from torchci_assets.ingest import landed
from torchci_assets.ingest.landed import LandedCache, day_fingerprint

DAY = "2026-11-20"
HOUR = 3600.0


class Clock:
    """The cache's clock, moved by hand: `ahead` seconds after the real one."""

    def __init__(self, ahead: float):
        self.ahead = ahead

    def __call__(self) -> float:
        return time.time() + self.ahead


def exact(store: Store):
    """A full walk: a cache whose clock is before every change never trusts a folder."""
    return day_fingerprint(store, DAY, cache=LandedCache(os.path.join(store.root, "..", "never"), clock=lambda: 0.0))


def report(store: Store, run: int, job: int, name: str, body: bytes = b"<testsuites/>") -> str:
    rel = f"test-reports/day={DAY}/{run}/1/{job}/test/test-reports/python-pytest/m/{name}.xml"
    store.write_bytes(rel, body)
    return rel


def day_archive(tmp_path) -> Store:
    store = Store(str(tmp_path / "archive"))
    for run in range(3):
        for job in range(3):
            report(store, 100 + run, 1000 * run + job, "a")
    store.write_bytes(f"webhooks/day={DAY}/hooks-00.jsonl.gz", b"x" * 10)
    store.write_bytes(f"logs/day={DAY}/1000.log", b"log")
    return store


def test_a_quiet_day_is_fingerprinted_from_its_summaries_and_equals_a_full_walk(tmp_path, monkeypatch):
    store = day_archive(tmp_path)
    clock = Clock(2 * landed.SEAL_S)  # everything written so far is quiet
    cache = LandedCache(str(tmp_path / "cache"), clock=clock)
    first = day_fingerprint(store, DAY, cache=cache)
    assert first == exact(store) and (first.files, first.bytes) == (11, 9 * 13 + 10 + 3)
    walked = []
    real_scandir = os.scandir
    monkeypatch.setattr(landed.os, "scandir", lambda p: walked.append(p) or real_scandir(p))
    assert day_fingerprint(store, DAY, cache=cache) == first
    assert walked == []  # one stat per source folder, nothing read


def test_files_landing_where_a_folder_changes_are_seen_at_once(tmp_path):
    store = day_archive(tmp_path)
    cache = LandedCache(str(tmp_path / "cache"), clock=Clock(2 * landed.SEAL_S))
    day_fingerprint(store, DAY, cache=cache)
    steps = [lambda: report(store, 200, 9000, "a"),  # a new run folder in the quiet day folder
             lambda: report(store, 100, 7, "a"),  # a new job in a quiet run's attempt folder: the attempt changes
             lambda: store.write_bytes(f"webhooks/day={DAY}/hooks-00.jsonl.gz", b"y" * 10),  # replaced, same size
             lambda: store.write_bytes(f"logs/day={DAY}/1000.log", b"log+more"),  # replaced, grown
             lambda: store.delete(f"logs/day={DAY}/1000.log"),
             lambda: os.symlink("elsewhere", store.full(f"logs/day={DAY}/link"))]  # a link: refused, still counted
    seen = {day_fingerprint(store, DAY, cache=cache).digest}
    for step in steps:
        step()
        now = day_fingerprint(store, DAY, cache=cache)
        assert now == exact(store)
        assert now.digest not in seen
        seen.add(now.digest)


def test_a_file_rolled_deep_into_a_quiet_subtree_is_seen_when_the_day_is_walked_in_full_again(tmp_path):
    """Written in place below a quiet folder whose own entries do not change (a second report in a
    job's module folder): the quick check may miss it; the walk every VERIFY_S does not."""
    store = day_archive(tmp_path)
    clock = Clock(2 * landed.SEAL_S)
    cache = LandedCache(str(tmp_path / "cache"), clock=clock)
    before = day_fingerprint(store, DAY, cache=cache)
    report(store, 100, 0, "b")  # same job, same module folder: only that deep folder changes
    truth = exact(store)
    assert truth.digest != before.digest
    assert day_fingerprint(store, DAY, cache=cache).digest in (before.digest, truth.digest)
    clock.ahead += landed.VERIFY_S
    assert day_fingerprint(store, DAY, cache=cache) == truth


def test_folders_changed_in_the_clocks_future_are_never_trusted(tmp_path):
    """A cache clock behind the filesystem's (skew): nothing is quiet, every walk is a full one."""
    store = day_archive(tmp_path)
    cache = LandedCache(str(tmp_path / "cache"), clock=Clock(-HOUR))
    day_fingerprint(store, DAY, cache=cache)
    report(store, 100, 0, "b")  # deep, where only a full walk sees it
    assert day_fingerprint(store, DAY, cache=cache) == exact(store)


def test_a_cache_file_that_cannot_be_read_is_a_full_walk(tmp_path):
    store = day_archive(tmp_path)
    cache = LandedCache(str(tmp_path / "cache"), clock=Clock(2 * landed.SEAL_S))
    day_fingerprint(store, DAY, cache=cache)
    for name in os.listdir(tmp_path / "cache"):
        (tmp_path / "cache" / name).write_bytes(b'{"version": 1, "root": [')
    report(store, 100, 0, "b")
    assert day_fingerprint(store, DAY, cache=cache) == exact(store)
    unwritable = LandedCache(str(tmp_path / "archive" / f"webhooks/day={DAY}/hooks-00.jsonl.gz"), clock=Clock(0))
    assert day_fingerprint(store, DAY, cache=unwritable) == exact(store)  # a file where the folder would be


def test_a_name_that_is_not_utf8_counts_as_the_listing_shows_it(tmp_path):
    """The sensor hashes every path: a name that is not UTF-8 must not fail every tick."""
    store = day_archive(tmp_path)
    folder = os.fsencode(store.full(f"test-reports/day={DAY}/100/1/0"))
    with open(os.path.join(folder, b"caf\xe9.xml"), "wb") as f:
        f.write(b"<testsuites/>")
    os.makedirs(os.path.join(folder, b"sub\xff", b"deeper"))
    cache = LandedCache(str(tmp_path / "cache"), clock=Clock(2 * landed.SEAL_S))
    fingerprint = day_fingerprint(store, DAY, cache=cache)
    assert fingerprint == exact(store) and fingerprint.files == 13  # the 11 files, and the two refused entries
    listed = store.list_files(f"test-reports/day={DAY}", ("",))
    assert [e.path.rsplit("/", 1)[-1] for e in listed if e.refused] == ["caf\ufffd.xml", "sub\ufffd"]
    assert day_fingerprint(store, DAY, cache=cache) == fingerprint  # from the cache's summaries
