"""How often Python's cyclic garbage collector runs in the processes that load the code location.

By default it runs after every 700 new container objects, and a full collection whenever the
objects that survived grew by a quarter. Loading Dagster and the code location makes ~220,000
objects that live as long as the process (modules, classes, functions), and a run makes many small
ones per event (the data itself lives in Arrow and DuckDB, outside the collector): a small day's
`torchci run` made ~400 collections, 3 of them full, ~0.35 CPU-s of its ~5.5, most of them while
loading; a run of the intra-day refresh ~500, 0.44 CPU-s of its ~7. Every 20,000 new objects, set
before the load, and with what loading made frozen, the small day's run makes ~45, ~0.14 CPU-s.
Nothing here relies on prompt collection of cycles.
"""

import gc

THRESHOLDS = (20_000, 20, 20)


def keep_loaded() -> None:
    """Once the code location is loaded: what loading made is never looked at by a collection again
    (`gc.freeze`). Without it, the thresholds set before the load make each of the few collections of
    the older generations go through those ~220,000 objects again."""
    gc.freeze()


def collect_less() -> None:
    """Set the collector's thresholds for this process; as early as possible, since the collections
    worth saving are the ones loading makes."""
    gc.set_threshold(*THRESHOLDS)
