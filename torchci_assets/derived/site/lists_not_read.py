"""The HUD's banner while the disabled lists could not be read from GitHub.

When GitHub fails the DISABLED-issue loop (an outage, refused credentials), `disabled_tests` keeps
the lists published last and fails its check, not its step, so that the HUD is still built: the
run is green. Credentials GitHub refuses stay refused until someone changes them, and meanwhile
CI goes on skipping the tests of a list nobody updates. A failed check in the Dagster UI is easily
missed, so the pages people do look at say it, with GitHub's error and what to do, for as long
as the latest run of the day's partition could not read the issues.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from html import escape

BANNER_ID = "disabled-lists-not-read"
_STYLE = "border:2px solid #D55E00;background:#fbe3d6;padding:.6em 1em;margin:0 0 1em;border-radius:4px"


@dataclass(frozen=True)
class ListsNotRead:
    at: str                 # when the latest run of the partition tried to read them (UTC)
    error: str              # what GitHub answered
    fix: str                # what to do
    refused: bool           # GitHub refused the credentials: it does not pass by itself
    last_read: str | None   # when they were last read from GitHub, if known (UTC)


def lists_not_read(metadata: dict, timestamp: float) -> ListsNotRead | None:
    """What the banner says, from the latest `disabled_tests` materialization of the partition (its
    metadata as plain values, its time); None when that run read the lists, or was a dry run."""
    if not metadata.get("error"):
        return None
    last = metadata.get("read_from_github_at")
    return ListsNotRead(_utc(dt.datetime.fromtimestamp(timestamp, dt.timezone.utc)), str(metadata["error"]),
                        str(metadata.get("fix") or ""), bool(metadata.get("github_refused")),
                        _utc(dt.datetime.fromisoformat(last.replace("Z", "+00:00"))) if last else None)


def _utc(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def banner(state: ListsNotRead) -> str:
    since = (f"last read from GitHub at {state.last_read}" if state.last_read
             else "last read from GitHub before the runs on record")
    return (f'<div id="{BANNER_ID}" role="alert" style="{_STYLE}"><strong>The disabled tests are not up to date'
            + (": GitHub refused the credentials" if state.refused else "") + ".</strong> "
            f"At {escape(state.at)} the latest run could not read the DISABLED issues from GitHub "
            f"({escape(state.error)}). CI and these pages go on with the disabled tests and jobs published last, "
            f"{escape(since)}: tests disabled or re-enabled on GitHub since then are not in them."
            f"<br><strong>What to do:</strong> {escape(state.fix)}.</div>")


def with_banner(page: str, state: ListsNotRead | None) -> str:
    """`page` with the banner at the top of its content (unchanged when the lists were read)."""
    return page if state is None else page.replace("<main>", "<main>" + banner(state), 1)
