"""Staging files a killed run leaves behind, removed by the next successful write of their partition.

Every lake write stages under a name carrying the run id (`Lake.owner`) and renames into place; a
`kill -9` leaves the staged file. An asset that writes a partition sweeps that partition's folders
once it has written: a staging file is removed when its run is neither this one nor one the
instance still has in progress.
"""

from collections.abc import Callable

import dagster as dg


_FINISHED = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def _is_live_run(context: dg.AssetExecutionContext) -> Callable[[str], bool]:
    """Whether a run id names this run or one the instance still has in progress. The instance is
    asked once, at the first question: after the staging folder was listed (see `sweep_staging`)."""
    live: set[str] = set()

    def is_live(run_id: str) -> bool:
        if not live:
            statuses = [s for s in dg.DagsterRunStatus if s not in _FINISHED]
            live.update(r.run_id for r in context.instance.get_runs(dg.RunsFilter(statuses=statuses)))
            live.add(context.run.run_id)
        return run_id in live
    return is_live


def sweep_staging(context: dg.AssetExecutionContext, lk, tables: list[str], day: str) -> int:
    """Remove the staging files of this partition's folders that no live run owns."""
    is_live = _is_live_run(context)
    removed = [path for table in tables for path in lk.sweep_staging(table, day, is_live)]
    if removed:
        context.log.info(f"removed {len(removed)} staging file(s) left by runs no longer alive: "
                         + ", ".join(removed[:10]) + (" ..." if len(removed) > 10 else ""))
    return len(removed)
