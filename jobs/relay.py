"""The relay in Dagster: `upstream_commit_sensor` finds new upstream heads, `dispatch_job`
sends each to the allowlisted downstreams.

One sensor does both discovery paths (webhook archive and branch polling) because Dagster
deduplicates run keys per sensor: with one sensor, a head found by both paths has one run key,
`<repo>@<sha>`, and one run. The sensor's cursor and the job's ledger are the other two nets
(see `torchci_assets.relay.pushes` and `.dispatch`).

Runs carry the `torchci/dispatch` tag, which dagster.yaml limits to one run at a time, so two
runs never read and write the ledger for a commit concurrently.

No `from __future__ import annotations` here: Dagster reads the op's config annotation at
definition time and cannot resolve it from a string.
"""

import datetime as dt
import json
import time
from collections import Counter

import dagster as dg
import requests

from resources.configured import ArchiveResource, LakeResource
from resources.github import GitHubError, GitHubResource
from torchci_assets.config import load_config
from torchci_assets.lake_metadata import ledger_metadata
from torchci_assets.relay.dispatch import (CLAIM_SETTLE_S, LEDGER_TABLE, Outage, dispatch_event, outcome_table,
                                          push_dispatch, refusal_line)
from torchci_assets.relay.pushes import (
    SHA_RE,
    RelayCursor,
    UpstreamCommit,
    poll_commit,
    scan_archive,
)

OP_NAME = "dispatch_to_downstreams"
OUTCOMES = ("ok", "refused", "dry_run", "already_acknowledged", "in_doubt", "claimed_elsewhere", "deferred")
# Sent again by the run's retry: nothing reached GitHub, GitHub gave no clear answer, or a claim withdrawn.
RETRIED = ("failed", "unanswered", "deferred")
# Polling is the safety net for lost webhooks: every 5 minutes keeps within the API's rate
# limit (one request per branch) and bounds how late a head can be relayed.
POLL_INTERVAL_S = 300.0
# A sensor tick has 60 s; polling must fail fast rather than sit in the client's long retries.
POLL_CLIENT_LIMITS = {"max_retries": 1, "max_total_wait_s": 10.0, "connect_timeout_s": 5.0, "read_timeout_s": 10.0}
# The longest one branch's poll can take with those limits: two attempts of a connect and a read
# timeout each, and the wait between them. A branch is polled only while that still fits in the
# tick (with a margin for the rest of it); the others wait for the next tick.
POLL_BRANCH_WORST_S = 2 * (5.0 + 10.0) + 10.0
TICK_BUDGET_S = 55.0


class DispatchConfig(dg.Config):
    """One upstream commit to relay: what the sensor found, as the run's config (so a re-executed
    run relays exactly the same thing)."""

    upstream_repo: str
    sha: str
    ref: str
    before: str = ""
    forced: bool = False
    delivery_id: str = ""
    received_at: str = ""
    source: str = "webhook"
    payload_json: str = "{}"
    max_retries: int = 3
    retry_wait_s: float = 60.0
    claim_settle_s: float = CLAIM_SETTLE_S


def run_config_for(commit: UpstreamCommit) -> dict:
    """The dispatch_job run config for `commit`."""
    return {"ops": {OP_NAME: {"config": {
        "upstream_repo": commit.upstream_repo, "sha": commit.sha, "ref": commit.ref,
        "before": commit.before, "forced": commit.forced, "delivery_id": commit.delivery_id,
        "received_at": commit.received_at, "source": commit.source,
        "payload_json": json.dumps(commit.payload, separators=(",", ":")),
    }}}}


def _commit(config: DispatchConfig) -> UpstreamCommit:
    sha = config.sha.lower()
    if not SHA_RE.match(sha):
        raise dg.Failure(f"sha {config.sha!r} is not a 40-character commit id")
    return UpstreamCommit(config.upstream_repo, sha, config.ref, config.before, config.forced,
                          config.delivery_id, config.received_at, config.source,
                          json.loads(config.payload_json))


@dg.op(name=OP_NAME, pool="relay_dispatch", description="repository_dispatch of one upstream commit to every allowlisted "
       "downstream not yet acknowledged, each attempt recorded in the `dispatches` ledger.")
def dispatch_to_downstreams(context: dg.OpExecutionContext, config: DispatchConfig,
                            github: GitHubResource, lake: LakeResource):
    commit = _commit(config)
    relay = load_config()
    if github.dry_run:
        context.log.warning("DRY RUN: no GitHub credentials; dispatches are logged and recorded "
                            "as dry_run, not sent (set GITHUB_TOKEN to send)")
    outage = Outage()
    outcomes = dispatch_event(github, lake.lake(), push_dispatch(commit), relay.allowlist, context.run_id,
                              log=context.log.info, settle_s=config.claim_settle_s, outage=outage)
    yield from report_outcomes(context, github, lake, outcomes, commit.sha, config,
                               {"sha": commit.sha, "ref": commit.ref, "source": commit.source}, outage)


def report_outcomes(context: dg.OpExecutionContext, github: GitHubResource, lake: LakeResource, outcomes: list,
                    sha: str, config: DispatchConfig, metadata: dict, outage: Outage | None = None):
    """Log, retry what failed, and yield the ledger's materialization and the op's output. When GitHub
    was down (`outage`), the pass stopped at its first unanswered dispatch, and says so once."""
    counts = Counter(o.outcome for o in outcomes)
    table = outcome_table(outcomes)
    for o in outcomes:
        if o.outcome == "refused":
            context.log.warning(refusal_line(o, sha))
        elif o.outcome == "in_doubt":
            context.log.warning(f"{o.repo}: an earlier attempt for {sha} was claimed and its "
                                "answer never recorded; not sent again (see the dispatches ledger)")
    failed = [o.repo for o in outcomes if o.outcome in RETRIED]
    if failed:
        context.log.error(outage.line(len(failed)) + f"\n{table}" if outage and outage.down else
                          f"dispatch of {sha} failed for {', '.join(failed)}; the retry "
                          f"sends only those not acknowledged\n{table}")
        raise dg.RetryRequested(max_retries=config.max_retries,
                                seconds_to_wait=config.retry_wait_s) from dg.Failure(
            f"{len(failed)} downstream(s) did not acknowledge {sha}: {', '.join(failed)}")
    written = sum(counts[k] for k in ("ok", "refused", "dry_run"))
    metadata = {
        **metadata, "dry_run": github.dry_run, "targets": len(outcomes),
        **{f"{k}_count": counts.get(k, 0) for k in OUTCOMES},
        "outcomes": dg.MetadataValue.md(table),
    }
    if written:
        yield dg.AssetMaterialization(asset_key=LEDGER_TABLE, metadata={
            "rows": written, "sha": sha, "path": lake.lake().store.display(LEDGER_TABLE),
            **ledger_metadata(lake.lake(), LEDGER_TABLE)})
    yield dg.Output(dict(counts), metadata=metadata)


@dg.job(tags={"torchci/dispatch": "relay"},
        description="Relay one upstream commit to the allowlisted downstream repositories.")
def dispatch_job():
    dispatch_to_downstreams()


def _poll(context, github: GitHubResource, relay, cursor: RelayCursor, known: set[str],
          now: float, tick_started: float, clock=time.monotonic) -> list[UpstreamCommit]:
    """New branch heads from the API; the first poll of a branch only records its head. Branches
    whose worst-case poll no longer fits in the tick are left to the next (the poll time is then
    not recorded, so it comes at once)."""
    client = github.model_copy(update=POLL_CLIENT_LIMITS)
    found = []
    for ref in relay.branches:
        if clock() - tick_started + POLL_BRANCH_WORST_S > TICK_BUDGET_S:
            context.log.info(f"polling {relay.upstream_repo}: {ref} and the branches after it are left to "
                             "the next tick (this one could run past Dagster's 60 s)")
            return found
        previous = cursor.heads.get(ref)
        try:
            commit = poll_commit(client, relay, ref, previous,
                                 dt.datetime.fromtimestamp(now, dt.timezone.utc))
        except (GitHubError, requests.RequestException, ValueError) as exc:
            context.log.warning(f"polling {relay.upstream_repo} {ref} failed: {exc}")
            continue
        if commit is None:
            continue
        cursor.heads[ref] = commit.sha
        if previous is None:
            context.log.info(f"polling {relay.upstream_repo} {ref}: head {commit.sha} recorded")
        elif commit.run_key not in known:
            found.append(commit)
            known.add(commit.run_key)
    cursor.polled_at = now
    return found


@dg.sensor(job=dispatch_job, minimum_interval_seconds=15,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="New heads of the upstream branches, from push webhooks in the archive "
                       "and, with credentials and poll_commits, from polling the branches: a dispatch_job run "
                       "per head sends repository_dispatch to the allowlisted downstream repositories. Without "
                       "GitHub credentials every dispatch is a dry run, recorded as dry_run in the dispatches "
                       "ledger (a run with credentials still sends it).")
def upstream_commit_sensor(context: dg.SensorEvaluationContext, archive: ArchiveResource,
                           github: GitHubResource):
    tick_started = time.monotonic()
    relay = load_config()
    cursor = RelayCursor.from_json(context.cursor)
    report, nxt = scan_archive(archive.store(), cursor, relay)
    if cursor is None:
        context.log.info(f"first tick: {sum(len(f) for f in nxt.files.values())} archive files "
                         "already present are taken as read; pushes from now on are relayed")
    for why in report.skipped:
        context.log.info(why)
    commits = list(report.commits)
    now = time.time()
    if (relay.poll_commits and not github.dry_run
            and (nxt.polled_at is None or now - nxt.polled_at >= POLL_INTERVAL_S)):
        known = set(nxt.recent)
        polled = _poll(context, github, relay, nxt, known, now, tick_started)
        nxt.remember([c.run_key for c in polled])
        commits += polled
    context.log.info(f"read {len(report.files_read)} file(s) ({report.files_deferred} deferred), "
                     f"{report.push_events} push event(s), {len(report.rejects)} unreadable "
                     f"line(s); {len(commits)} new head(s)")
    requests_ = [dg.RunRequest(run_key=c.run_key, run_config=run_config_for(c),
                               tags={"torchci/sha": c.sha, "torchci/source": c.source})
                 for c in commits]
    if not requests_:
        return dg.SensorResult(skip_reason="no new upstream heads", cursor=nxt.to_json())
    return dg.SensorResult(run_requests=requests_, cursor=nxt.to_json())
