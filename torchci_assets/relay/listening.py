"""A relay sensor tick that keeps reading the archive for a few seconds instead of reading it once.

The daemon starts a sensor's tick at most every 5 s, and only once its previous tick ended; a
tick that read the archive once and stopped would leave a delivery that lands just after it to
wait for the next pass of the loop, and every delivery that lands while a busy tick is sending
to wait for the tick after that. So a tick reads, acts on what it found, reads again at once
while it keeps finding something, and otherwise looks every `poll_s` until `listen_s` passed
without anything new or `budget_s` since its start, or at once when something is left for runs
(a label, a re-run, what it could not send): their runs start when the tick ends. Each tick
also costs Dagster's daemon and code server ~0.05 CPU-s whatever it finds, so an idle relay
costs less the longer a tick listens. It then finishes what it read, starting
nothing after `act_s` (within Dagster's 60 s): what it could not act on is returned for runs,
with the cursor past everything read (the caller returns that cursor only when the tick ends,
so a tick that dies is read again by the next). Each read takes a few files at most, so a
backlog is read a little per tick instead of handed to runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from resources.listing_cache import KeptListings
from resources.storage import Store
from torchci_assets.config import TorchciConfig
from torchci_assets.relay.acting import Acted
from torchci_assets.relay.pushes import Picker, RelayCursor, scan_archive

# Files one read of the archive takes at most, and how long it may read: a few seconds of
# deliveries are a file or two; a backlog (the code location was down) is read tick after tick.
MAX_ITEMS_PER_READ = 10
READ_BUDGET_S = 8.0
# The day folders' walks kept between reads in this process (the code server, between ticks too):
# a read stats the files of changed folders only, and walks everything again every RELIST_S, so a
# file appended to in place in a folder nothing else changed in is seen within that.
RELIST_S = 5.0
LISTINGS = KeptListings(RELIST_S)


@dataclass
class Listening:
    """How long a tick listens: it reads the archive for at most `budget_s`, and `listen_s` after
    its last find, every `poll_s` meanwhile; it acts on what it read until `act_s` after its
    start (what is left then goes to runs: only a backlog leaves anything)."""

    budget_s: float = 20.0
    listen_s: float = 4.0
    poll_s: float = 0.5
    act_s: float = 30.0


@dataclass
class Heard:
    """What a tick did (its actions and, in `acted.left`, the items left for runs), the cursor past
    all it read, and how many times it read the archive."""

    acted: Acted = field(default_factory=Acted)
    cursor: str | None = None
    reads: int = 0


def listen(store: Store, cursor: str | None, config: TorchciConfig, pick: Picker, stream: str,
           act: Callable[[list, float], Acted], how: Listening,
           log: Callable[[str], None] = lambda s: None,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Heard:
    """Read `stream` from `cursor` and `act(items, seconds left)` on what turns up, until the tick
    has listened long enough (see the module's docstring). `act` returns what it did, with the
    items it leaves for a run in `left`."""
    heard, start = Heard(cursor=cursor), clock()
    last_found = start
    # The cursor between reads stays an object: a day's file list is tens of KB of JSON, written
    # once when the tick ends rather than parsed and written again at every read.
    previous = RelayCursor.from_json(cursor)
    while True:
        report, nxt = scan_archive(store, previous, config, budget_s=READ_BUDGET_S, pick=pick, stream=stream,
                                   max_items=MAX_ITEMS_PER_READ, listings=LISTINGS)
        heard.reads += 1
        if previous is None:
            log(f"first tick: {sum(len(f) for f in nxt.files.values())} {stream} archive files already "
                "present are taken as read")
            break
        previous = nxt
        if report.files_read or report.rejects:
            log(f"read {len(report.files_read)} {stream} file(s) ({report.files_deferred} deferred), "
                f"{report.push_events} relevant record(s), {len(report.rejects)} unreadable; "
                f"{len(report.commits)} new")
        if report.commits:
            heard.acted.merge(act(report.commits, how.act_s - (clock() - start)))
            last_found = clock()
        more = bool(report.commits or report.files_deferred)  # more may be there already
        if (clock() - start >= how.budget_s or heard.acted.left
                or (not more and clock() - last_found >= how.listen_s)):
            break
        if not more:
            sleep(how.poll_s)
    heard.cursor = nxt.to_json()
    return heard
