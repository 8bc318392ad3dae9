"""The one rule by which the HUD judges a downstream job whose `completed` callback has not come.

The relay's sweeper reports such a job as timed out once the config's `zombie_timeout_seconds`
passed; the backend pages, the pull requests' grid (`pr_jobs`), the daily metrics and the backends'
health windows all judge it so, at the instant they judge, by the ingest's `downstream_timed_out`
(`ingest/sql/callback_macros.sql`). A rule copied into each query would let one page call a job lost
that another still shows running.
"""

from __future__ import annotations

import datetime as dt

from resources.sql import SqlFiles, run_steps
from torchci_assets.config import load_config
from torchci_assets.ingest.ci_results import define_callback_macros

SQL = SqlFiles(__file__)


def define_downstream_macros(con) -> None:
    """`downstream_timed_out` (the ingest's, which backend_health uses as well) and `downstream_kind` in `con`."""
    define_callback_macros(con)
    run_steps(con, SQL.steps("downstream_macros"))


def zombie_timeout(seconds: int | None) -> int:
    """`seconds`, else the config's `zombie_timeout_seconds`: what the relay's sweeps follow."""
    return int(load_config().zombie_timeout_seconds if seconds is None else seconds)


def epoch_ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)
