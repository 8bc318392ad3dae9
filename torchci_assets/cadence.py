"""How often today's outputs follow what lands: `TORCHCI_REFRESH_MINUTES`.

Read by the refresh sensor, which acts on it, and by what tells people when an output will next
change (the Dr. CI comment's last line), so both say the same interval. Every process that reads
it (the daemon's sensor, each run) must see the same value.
"""

from __future__ import annotations

import os

REFRESH_MINUTES_VAR = "TORCHCI_REFRESH_MINUTES"
# The longest interval that keeps landing -> disabled list, HUD and Dr. CI well within the targets
# of p50 90 s and p95 3 min on a busy day (`make bench-freshness`: p50 44 s, p95 87 s; at 2 minutes
# the median is 60 s of waiting plus the run, too close to its target on a loaded machine). Its
# price: a refresh costs what landed plus a fixed part, ~4-5 CPU-s on a PyTorch-sized day, of which
# ~1 is Dagster's (the events of 25 assets and 25 checks, each step's look-up of its inputs) and the
# rest what each step reads of the day. A minute and a half instead of one: a third fewer refreshes
# a day, and Dr. CI's comment writes at peak ~390 an hour instead of ~460, further under GitHub's
# 500.
DEFAULT_REFRESH_MINUTES = 1.5


def refresh_interval_s(environ=os.environ) -> float:
    """Seconds between two refreshes of a day, from TORCHCI_REFRESH_MINUTES (0: refresh off)."""
    text = (environ.get(REFRESH_MINUTES_VAR) or "").strip()
    if not text:
        return DEFAULT_REFRESH_MINUTES * 60
    try:
        minutes = float(text)
    except ValueError:
        minutes = -1.0
    if not minutes >= 0 or minutes == float("inf"):
        raise ValueError(f"{REFRESH_MINUTES_VAR}={text!r} is not a number of minutes (0 turns the refresh off)")
    return minutes * 60


def updates_every(interval_s: float) -> str:
    """How often an output refreshed at this interval changes, in words: "every 1.5 minutes",
    "every minute", "every 30 seconds"; with the refresh off, once a day (the daily run's)."""
    if interval_s <= 0:
        return "once a day"
    if interval_s < 60:
        return f"every {interval_s:g} seconds"
    minutes = interval_s / 60
    return "every minute" if minutes == 1 else f"every {minutes:g} minutes"
