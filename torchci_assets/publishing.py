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
        if outputs.exists(path) and outputs.read_bytes(path) == data:
            return False
    except OSError:
        pass  # unreadable: write it anew
    outputs.write_bytes(path, data)
    return True
