"""The receiver keeps what it loaded at start out of the garbage collector's full passes (a frozen
heap), and gives the process back the collector it found: a receiver in its own process unfreezes
at stop what it froze; one started in a process that froze its heap itself (pytest's workers do,
tests/conftest.py) leaves that freeze alone (it undid it, and every full pass after walked the
whole heap again)."""

import gc

import requests

from receiving import served


def test_a_receiver_in_a_process_with_nothing_frozen_freezes_its_heap_until_it_stops(tmp_path):
    gc.unfreeze()  # as a process of its own starts: the next file's end freezes this worker again
    with served(tmp_path) as srv:
        assert requests.get(f"{srv.url}/healthz", timeout=10).status_code == 200
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_receiver_in_a_process_that_froze_its_heap_leaves_it_frozen(tmp_path):
    gc.freeze()
    with served(tmp_path) as srv:
        assert requests.get(f"{srv.url}/healthz", timeout=10).status_code == 200
    assert gc.get_freeze_count() > 0  # less what was freed since: frozen objects still die of their last reference
