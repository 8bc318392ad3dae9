"""The wrong-author stop holds however long Dr. CI does not run.

A `wrong_author` row in the `drci_posts` ledger says these credentials post as another account
than `drci.author`: every run since creates nothing. The ledger is read over its 14-day lookback,
so a deployment paused for longer (a holiday, a broken schedule) must still find the stop, or its
first run back creates a comment on a pull request and deletes it again. Against the fake comments
API on 127.0.0.1 (fake_github_pulls.py), which answers creates as `torchci-bot[bot]`.
"""

import datetime as dt

import pyarrow as pa
import pytest
from fake_github_pulls import FakePullRequests
from test_drci import HEAD, REPO, TODAY, body, gh
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.derived.drci.publish import (AUTHOR_STOPS, AUTHOR_STOPS_SCANNED, LEDGER, LEDGER_LOOKBACK_DAYS, LEDGER_SCHEMA,
                                                 author_stop, credentials_key, publish)


def publish_on(httpserver, tmp_path, day: dt.date, author: str = "my-app[bot]", prs=(5,)):
    lake, outputs = Lake.at(str(tmp_path / "lake")), Store(str(tmp_path / "out"))
    rows = [{"pr": n, "head_sha": HEAD, "pr_state": "open", "body": body()} for n in prs]
    return publish(lake, outputs, gh(httpserver), day.isoformat(), REPO, rows, enabled=True, today=day, author=author)


@pytest.mark.parametrize("gap", [LEDGER_LOOKBACK_DAYS + 1, 60])
def test_the_stop_holds_after_a_gap_longer_than_the_ledgers_lookback(httpserver, tmp_path, gap):
    fake = FakePullRequests(httpserver, REPO)
    first = publish_on(httpserver, tmp_path, TODAY, prs=(5, 6))
    assert "set drci.author to 'torchci-bot[bot]'" in first.stopped
    assert (fake.count("POST"), fake.count("DELETE")) == (1, 1)
    later = publish_on(httpserver, tmp_path, TODAY + dt.timedelta(days=gap), prs=(5, 6))
    assert "set drci.author to 'torchci-bot[bot]'" in later.stopped and f"found on {TODAY}" in later.stopped
    assert (fake.count("POST"), fake.count("DELETE")) == (1, 1) and fake.comments.get(5, []) == []
    # set as told, posting resumes
    resumed = publish_on(httpserver, tmp_path, TODAY + dt.timedelta(days=gap + 1), author="torchci-bot[bot]")
    assert resumed.actions["created"] == 1 and not resumed.stopped


def ledger_rows(lake: Lake, day: dt.date, rows: list[dict]) -> None:
    at = dt.datetime.combine(day, dt.time(12), dt.timezone.utc)
    lake.write(LEDGER, day.isoformat(), pa.Table.from_pylist([{**r, "at": at} for r in rows], schema=LEDGER_SCHEMA),
               part=f"part-{day.isoformat()}")


def test_a_stop_written_before_the_record_existed_is_found_once_then_read_from_the_record(tmp_path, monkeypatch):
    """A ledger written by an earlier version has no record: the first look reads the whole ledger
    once for `wrong_author` rows and keeps what it found; later looks read the record only."""
    from torchci_assets.derived.drci import publish as p

    lake, creds = Lake.at(str(tmp_path / "lake")), "c0ffee"
    ledger_rows(lake, TODAY - dt.timedelta(days=40), [
        {"pr": 9, "head_sha": HEAD, "action": "wrong_author", "error": "wrong", "author": "My-App[bot]",
         "answered_as": "torchci-bot[bot]", "credentials": creds}])
    for back in range(39, -1, -1):
        ledger_rows(lake, TODAY - dt.timedelta(days=back), [
            {"pr": 5, "head_sha": HEAD, "action": "created", "comment_id": back, "body_sha256": "x"}])
    scans = []
    real = p._scan_author_stops
    monkeypatch.setattr(p, "_scan_author_stops", lambda lk: scans.append(1) or real(lk))
    for _ in range(3):
        stop = author_stop(lake, TODAY.isoformat(), "my-app[bot]", creds)
        assert stop is not None and (stop.answered_as, stop.pr) == ("torchci-bot[bot]", 9)
        assert author_stop(lake, TODAY.isoformat(), "my-app[bot]", "other-creds") is None
        assert author_stop(lake, TODAY.isoformat(), "someone-else[bot]", creds) is None
    assert len(scans) == 1 and lake.store.exists(AUTHOR_STOPS_SCANNED)
    # the stop's file damaged: the ledger is read again, once
    lake.store.write_bytes(p.stop_path(p._stop_key("my-app[bot]", creds)), b"{not json")
    assert author_stop(lake, TODAY.isoformat(), "my-app[bot]", creds).pr == 9 and len(scans) == 2
    assert author_stop(lake, TODAY.isoformat(), "my-app[bot]", creds).pr == 9 and len(scans) == 2


def test_the_credentials_digest_is_what_the_record_keeps(httpserver, tmp_path):
    """The record, like the ledger, never holds the secret."""
    FakePullRequests(httpserver, REPO)
    publish_on(httpserver, tmp_path, TODAY)
    (path,) = [f for f in (tmp_path / "lake" / AUTHOR_STOPS).glob("*.json") if f.name != "_scanned.json"]
    text = path.read_text()
    assert credentials_key(gh(httpserver)) in text and gh(httpserver).token not in text


def test_a_run_looking_for_stops_in_the_ledger_never_loses_one_another_run_just_kept(httpserver, tmp_path,
                                                                                    monkeypatch):
    """The first run after an upgrade reads the whole ledger for stops; a refresh posting meanwhile
    learns the author is wrong and keeps that stop. The first run must not write its own, older
    view over it: the next run would create and delete a comment again."""
    from torchci_assets.derived.drci import publish as p

    fake = FakePullRequests(httpserver, REPO)
    lake = Lake.at(str(tmp_path / "lake"))
    ledger_rows(lake, TODAY - dt.timedelta(days=1),
                [{"pr": 5, "head_sha": HEAD, "action": "created", "comment_id": 1, "body_sha256": "x"}])
    real_scan, raced = p._scan_author_stops, []

    def a_refresh_posts_meanwhile(lk):
        found = real_scan(lk)  # the ledger read: no stop yet
        if not raced:
            raced.append(None)
            raced[0] = publish_on(httpserver, tmp_path, TODAY)  # learns the wrong author, keeps the stop
        return found
    monkeypatch.setattr(p, "_scan_author_stops", a_refresh_posts_meanwhile)
    p.author_stop(lake, TODAY.isoformat(), "my-app[bot]", "any")
    assert raced[0].stopped and (fake.count("POST"), fake.count("DELETE")) == (1, 1)
    assert publish_on(httpserver, tmp_path, TODAY).stopped
    assert (fake.count("POST"), fake.count("DELETE")) == (1, 1)  # held: nothing created again
