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
