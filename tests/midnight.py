"""Today's UTC date for a test whose history is days before today, while the product it runs reads the
real clock itself: Dr. CI writes only today's and yesterday's partitions, `torchci backfill` reads up
to today, the refresh sensor watches today and yesterday.

A module that took its days at import failed when CI's run (`make test` starts at any hour) crossed
midnight between collection and its fixture: the product's today was no longer the one the days
were counted from. Its fixture takes the days from `utc_today` when it starts instead, and, as the
fixture itself takes a while, starts only once midnight is at least `MARGIN` away."""

from __future__ import annotations

import datetime as dt
import time

MARGIN = dt.timedelta(minutes=3)  # longer than a team history's fixture takes on a loaded CI machine


def utc_today(margin: dt.timedelta = MARGIN) -> dt.date:
    """Today (UTC), after waiting out a midnight nearer than `margin` (at most `margin`, at most once
    a day), so that a fixture shorter than `margin` sees the same today as the product throughout."""
    now = dt.datetime.now(dt.timezone.utc)
    midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.timezone.utc)
    if midnight - now < margin:
        time.sleep((midnight - now).total_seconds() + 1)
        now = dt.datetime.now(dt.timezone.utc)
    return now.date()


def days_before_today(n: int) -> list[dt.date]:
    """The `n` days before today (UTC, `utc_today`), oldest first."""
    today = utc_today()
    return [today - dt.timedelta(days=back) for back in range(n, 0, -1)]
