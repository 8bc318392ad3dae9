"""What the assets that publish files CI reads share: a quiet day is not a failure.

A day with nothing new to publish (the first day of a deployment, a holiday, an archive with
webhooks but no test reports or downstream results) leaves every published file as it is:
replacing a list with an empty one would tell CI that nothing is disabled, slow or eligible,
when in truth nothing was measured. The asset succeeds, logs a warning and says so in its
materialization metadata (`nothing_new`), so the UI shows the day as done and why nothing
changed. A refusal to publish because the new file would be much smaller than the published
one stays a failure (see `derived.sharding.times`): that is new data gone wrong, not a quiet day.
"""

from __future__ import annotations

import dagster as dg
import orjson

from resources.storage import Store


def kept_note(outputs: Store, paths: list[str]) -> str:
    """How a quiet day leaves the published files: which stay as they are, or that none exists yet."""
    kept = [outputs.display(p) for p in paths if outputs.exists(p)]
    return f"kept {', '.join(kept)} as published" if kept else "nothing was published before either"


def nothing_new(context: dg.AssetExecutionContext, reason: str) -> dict:
    """Warn that the asset had nothing new to publish; the metadata that says so."""
    context.log.warning(f"nothing new to publish: {reason}")
    return {"nothing_new": reason}


def later_day_kept(context: dg.AssetExecutionContext, day: str, shown: str | None, what: str) -> dict:
    """Warn that re-running `day` left the outputs at the later day `shown`; the metadata that says so.

    Dagster shows the latest materialization of an asset, whatever its partition: after a re-run
    of an old day that is the old day, with `published: false`. This key says, beside it, that
    the outputs still show the later day and how to publish the old one anyway.
    """
    where = f"{what} shows {shown}, later than {day}" if shown else f"{what} is for a later day than {day}"
    why = f"{where}: left as it is, as a re-run of an earlier day never replaces the current outputs"
    context.log.warning(f"not published: {why}")
    return {"not_published": why}


def write_if_changed(outputs: Store, path: str, data: bytes) -> bool:
    """Write `data` at `path` unless the file already holds exactly that; returns whether it wrote.

    The intra-day refresh republishes every few minutes: rewriting a file that did not change
    would bump its modification time and ETag, so HUD readers and caches fetch it again and a
    watcher sees a change that is not one. Reading it back is cheaper than either."""
    try:
        if outputs.read_bytes_if_exists(path) == data:
            return False
    except OSError:
        pass  # unreadable: write it anew
    outputs.write_bytes(path, data)
    return True


# ---- the day a file in PyTorch's format is for ---------------------------------------
# Test times, shard plans and slow tests are in formats with no room for the day they were
# computed for: each asset keeps it in a small file of its own beside them, `{"day": "YYYY-MM-DD"}`.
# A re-run or backfill of an earlier day reads it and leaves the published files as they are (CI
# must keep planning with the latest window, not be sent back to an older one). Without that file
# (before the first publication, or published by an older version) any day publishes.


def recorded_day(outputs: Store, day_file: str) -> str | None:
    """The day recorded in `day_file`; None when there is none or it cannot be read (then the
    next publication replaces it: a broken record must not block publishing for good)."""
    try:
        if not outputs.exists(day_file):
            return None
        shown = orjson.loads(outputs.read_bytes(day_file)).get("day")
    except (OSError, ValueError, AttributeError):
        return None
    return shown if isinstance(shown, str) else None


def later_day(outputs: Store, day_file: str, day: str) -> str | None:
    """The recorded day when it is later than `day` (so `day` must not replace it), else None."""
    shown = recorded_day(outputs, day_file)
    return shown if shown is not None and shown > day else None


def record_day(outputs: Store, day_file: str, day: str) -> None:
    """Record `day` as published (written once per day: an intra-day refresh leaves it as is)."""
    write_if_changed(outputs, day_file, orjson.dumps({"day": day}))
