"""Which failed relay runs to run again, and when: a GitHub outage must not cost a dispatch or a check run.

A relay run retries what GitHub did not answer (three times, a minute apart), then fails. Before
this, its deliveries waited for someone to re-execute the run from the UI: after an outage longer
than the run's retries, every pull request that moved meanwhile reached no downstream until then.
Now `relay_catch_up_sensor` runs such a run again by itself with the same config, later and later
(CATCH_UP_WAITS after the chain's last end), until one succeeds or MAX_CATCH_UPS have failed. The
ledgers make that safe: a run acts on what is not acknowledged yet, exactly as a re-execution from
the UI does, so a catch-up that meets a run re-executed by hand, or two catch-ups of one delivery,
write each dispatch and check run once.

A run and the runs that repeat it form a chain, named by its first run (the root): the runs this
sensor started carry `CATCH_UP_OF` = the root; a re-execution from the UI carries Dagster's
`dagster/root_run_id`, whose own root is followed. A chain is settled when any of its runs
succeeded, waits while one is queued or running, and is left alone when its root was canceled (a
person stopped it). These are plain functions over plain records, so the tests call them with the
clock they choose.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CATCH_UP_OF = "torchci/catch_up_of"
CATCH_UP = "torchci/catch_up"  # the number of the catch-up in its chain, 1 for the first
ROOT_RUN_ID = "dagster/root_run_id"  # a re-execution's (Dagster's own tag)
# The waits before catch-up 1, 2, ...: from the end of the chain's last run. Their sum, ~4.6 hours,
# outlasts most of GitHub's incidents; a chain still failing after that is left to a person.
CATCH_UP_WAITS = tuple(dt.timedelta(minutes=m) for m in (5, 10, 20, 40, 80, 120))
MAX_CATCH_UPS = len(CATCH_UP_WAITS)
# Failed runs older than this are not looked at: their chains ended (the waits add up to less).
LOOKBACK = dt.timedelta(hours=24)
FINISHED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})


@dataclass(frozen=True)
class RunState:
    """What the decision reads of a Dagster run."""

    run_id: str
    job_name: str
    status: str  # DagsterRunStatus's name
    tags: Mapping[str, str]
    ended_at: dt.datetime | None  # None while it has not ended
    run_config: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class CatchUp:
    """A run to request: the root's job and config, its number in the chain and its run key."""

    root: RunState
    number: int

    @property
    def run_key(self) -> str:
        return f"catch-up:{self.root.run_id}:{self.number}"

    def tags(self) -> dict[str, str]:
        """The root's own tags (Dagster's and the sensor's left out: they describe the root's
        launch), and the chain's."""
        chain = (CATCH_UP_OF, CATCH_UP)
        own = {k: v for k, v in self.root.tags.items() if not k.startswith("dagster/") and k not in chain}
        return {**own, CATCH_UP_OF: self.root.run_id, CATCH_UP: str(self.number)}


@dataclass
class Plan:
    """What one look found: catch-ups due now, chains waiting (for their time or a run in flight),
    and chains given up (each named with its root and what to do)."""

    due: list[CatchUp] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)


def root_of(run: RunState, runs: Mapping[str, RunState]) -> str:
    """The first run of `run`'s chain: its catch-up tag's, else its re-execution root's (whose own
    chain is followed: a person may re-execute a catch-up), else itself."""
    seen = set()
    while run.run_id not in seen:
        seen.add(run.run_id)
        if CATCH_UP_OF in run.tags:
            return run.tags[CATCH_UP_OF]
        parent = run.tags.get(ROOT_RUN_ID)
        if not parent or parent == run.run_id or parent not in runs:
            return parent or run.run_id
        run = runs[parent]
    return run.run_id


def plan(runs: Iterable[RunState], now: dt.datetime, jobs: frozenset[str]) -> Plan:
    """The catch-ups due at `now` among `runs` (the relay jobs' runs of the last LOOKBACK and the
    chains they belong to), oldest root first."""
    by_id = {r.run_id: r for r in runs}
    chains: dict[str, list[RunState]] = {}
    for run in by_id.values():
        chains.setdefault(root_of(run, by_id), []).append(run)
    out = Plan()
    for root_id, chain in sorted(chains.items(), key=lambda c: min(_ended(r) for r in c[1])):
        root = by_id.get(root_id)
        if root is None or root.job_name not in jobs or root.status != "FAILURE":
            continue  # a chain whose root succeeded, runs, was canceled or is older than the look
        if any(r.status == "SUCCESS" for r in chain):
            continue
        if any(r.status not in FINISHED for r in chain):
            out.waiting.append(f"{root_id} ({root.job_name}): a run of it is queued or running")
            continue
        done = max((_number(r) for r in chain if r.tags.get(CATCH_UP_OF) == root_id), default=0)
        if done >= MAX_CATCH_UPS:
            out.given_up.append(f"{root_id} ({root.job_name}): {done} catch-ups failed; find why in its runs' "
                                "logs and re-execute it from the UI (its ledger sends only what is not acknowledged)")
            continue
        at = max(_ended(r) for r in chain) + CATCH_UP_WAITS[done]
        if now >= at:
            out.due.append(CatchUp(root, done + 1))
        else:
            out.waiting.append(f"{root_id} ({root.job_name}): catch-up {done + 1} at {at:%H:%M:%S}Z")
    return out


def _number(run: RunState) -> int:
    """A catch-up's number in its chain; 0 for a tag someone edited into something else (a tick that
    raised on it would catch nothing up)."""
    value = run.tags.get(CATCH_UP, "")
    return int(value) if value.isdigit() else 0


def _ended(run: RunState) -> dt.datetime:
    return run.ended_at or dt.datetime.max.replace(tzinfo=dt.timezone.utc)
