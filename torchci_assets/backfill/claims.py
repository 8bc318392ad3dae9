"""The run attempts gap-repair passes are asking GitHub about, so that a pass beside them does not.

Passes overlap when one is slow (GitHub's retries and rate-limit waits, a backlog after an outage):
the next pass starts 5 minutes later, reads a lake that holds none of the slow pass's answers yet,
and would ask about the same run attempts again, spending the token's hourly budget twice. Skipping
a pass while another runs (a concurrency limit) would cost the hour's first pass its look at pull
request closes. So a pass claims the run attempts it is about to ask about in
`gap-repair/claims.json` and leaves out those another pass's claim holds. A claim lapses
CLAIM_FOR after its pass started: a pass killed or hung never releases it, and its run attempts are
asked about again after that. When a pass ends, the run attempts GitHub answered for stay claimed
AFTER_ANSWER longer, until the intra-day refresh has taken the answers into the lake; the others (a
lookup that failed) are released, for the next pass to ask again.
The file is written as `gone.json` is: merged into the file as it is when written, so only two
writes within the same instant can lose one's claim, which costs the lookups again, nothing more.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable

from resources.storage import Store

PATH = "gap-repair/claims.json"
# Longer than a pass takes at PyTorch's size (a few hundred requests), short beside the two days a
# gap is looked for: what a killed pass claimed is repaired this much later.
CLAIM_FOR = dt.timedelta(minutes=15)
# The intra-day refresh takes what lands within TORCHCI_REFRESH_MINUTES (1.5) and ingests it.
AFTER_ANSWER = dt.timedelta(minutes=3)

Claims = dict[str, tuple[dt.datetime, set[str]]]  # pass -> (until when, the run attempts it holds)


def key(attempt: tuple[str, int, int]) -> str:
    repo, run_id, run_attempt = attempt
    return f"{repo}#{run_id}/{run_attempt}"


def load(store: Store) -> Claims:
    """The claims on file; none when the file is missing or unreadable (a torn write, a hand edit):
    they only save requests, so a bad file costs the lookups again, never a pass."""
    data = store.read_bytes_if_exists(PATH)
    if data is None:
        return {}
    try:
        return {str(owner): (dt.datetime.fromisoformat(claim["until"]), {str(k) for k in claim["attempts"]})
                for owner, claim in json.loads(data).items()}
    except (ValueError, TypeError, AttributeError, KeyError):
        return {}


def held_elsewhere(store: Store, owner: str, now: dt.datetime) -> set[str]:
    """The run attempts other passes' claims hold at `now`."""
    return {k for other, (until, keys) in load(store).items() if other != owner and until > now for k in keys}


def claim(store: Store, owner: str, attempts: Iterable[tuple[str, int, int]], until: dt.datetime,
          now: dt.datetime) -> None:
    """Hold `attempts` for pass `owner` until `until` (none: release its claim), and drop the claims
    that have lapsed by `now`."""
    on_file = load(store)
    claims = {other: c for other, c in on_file.items() if other != owner and c[0] > now}
    keys = {key(a) for a in attempts}
    if keys:
        claims[owner] = (until, keys)
    if claims == on_file:  # nothing claimed, nothing lapsed: no write (most passes of a quiet day)
        return
    saved = {other: {"until": at.isoformat(), "attempts": sorted(held)} for other, (at, held) in claims.items()}
    store.write_bytes(PATH, json.dumps(saved, indent=1, sort_keys=True).encode())
