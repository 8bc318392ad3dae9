"""Dagster assets for flaky tests, the DISABLED issues, the disabled and slow test lists and the
platform smoke sets.

Thin wrappers over `derived.flakiness.flaky`, `.issues`, `.lists` and `.smoke`. Each day's
partition is the window of `window_days` days ending that day, read from the daily aggregates
of `derived.results`.
"""

import datetime as dt

import dagster as dg

from resources.configured import LakeResource, OutputsResource
from resources.github import GitHubError, GitHubResource, refusal_fix, refused, unavailable
from torchci_assets.checks import check_spec, unique_key_check
from torchci_assets.config import load_config
from torchci_assets.derived.flakiness.flaky import VERDICTS, WINDOW_DAYS, build_flaky_tests
from torchci_assets.derived.flakiness.job_issues import (DISABLED_JOBS_PATH, UNSTABLE_JOBS_PATH, UNSTABLE_PREFIX,
                                                         publish_job_list)
from torchci_assets.derived.flakiness.issue_text import DISABLED_PREFIX
from torchci_assets.derived.flakiness.issues import (LEDGER_TABLE, close_times, keep_answers, loop_mode, read_back,
                                                     reenabled_here, run_disabled_issues, run_unstable_jobs,
                                                     trusted_test_issues)
from torchci_assets.derived.flakiness.lifecycle import run_lifecycle, waiting_for_github
from torchci_assets.derived.flakiness.lists import (DISABLED_TESTS_PATH, REENABLED_TESTS_PATH, SLOW_TESTS_PATH,
                                                    MassReenableRefused, keep_published, publish_disabled_from_issues,
                                                    publish_disabled_tests, publish_slow_tests)
from torchci_assets.derived.flakiness.reenable import WINDOW_DAYS as REENABLE_WINDOW_DAYS
from torchci_assets.derived.flakiness.retired import LOOKBACK_DAYS as RETIRED_LOOKBACK_DAYS, RETIRE_AFTER_DAYS
from torchci_assets.derived.flakiness.smoke import SMOKE_DIR, empty_sets, publish_smoke_tests
from torchci_assets.ingest.increments import is_refresh
from torchci_assets.lake_metadata import lake_metadata, table_metadata
from torchci_assets.partitions import daily_partitions, window_mapping
from torchci_assets.publishing import later_day_kept, nothing_new
from torchci_assets.shown import said

# Lists in metadata are cut at this many entries (the ledger has them all).
MAX_LISTED = 500
# Lineage: the window read is the run's `window_days`.
_WINDOW = window_mapping(WINDOW_DAYS - 1)
# and the pushes of the day before it too: commits pushed then ran in the window (`flaky.py`); of
# test_results, only the main jobs' skips (`flaky.MAIN_SKIPS`)
_FLAKY_READS = [*(dg.AssetDep(t, partition_mapping=_WINDOW) for t in ("test_daily_stats", "test_sha_outcomes",
                                                                     "test_jobs", "test_results")),
                dg.AssetDep("push", partition_mapping=window_mapping(WINDOW_DAYS))]
# disabled_issues also reads the rerun jobs' test rows (`reenable.py`) and which tests reported over
# the retirement window and the month before it (`retired.py`)
_RERUN_WINDOW = window_mapping(REENABLE_WINDOW_DAYS - 1)
_REPORTED_WINDOW = window_mapping(RETIRE_AFTER_DAYS + RETIRED_LOOKBACK_DAYS - 1)


class WindowConfig(dg.Config):
    window_days: int = WINDOW_DAYS


@dg.multi_asset(
    specs=[
        dg.AssetSpec("flaky_tests", group_name="flakiness", kinds={"parquet"},
                     deps=_FLAKY_READS,
                     description="One row per test over the window ending on the day: runs, failures, rerun "
                                 "passes, same-commit pairs, main-branch flips, flake rate with its Wilson "
                                 "interval, the platforms where it flaked, broken range, and the verdict "
                                 "(flaky, broken, healthy, insufficient_data)."),
        dg.AssetSpec("flaky_test_platforms", group_name="flakiness", kinds={"parquet"},
                     deps=_FLAKY_READS,
                     description="The same evidence per test and platform, with failing and platform-exclusive "
                                 "failing commits (the smoke sets' input)."),
    ],
    check_specs=[check_spec("unique_file_classname_name", "flaky_tests")],
    partitions_def=daily_partitions,
    can_subset=False,
)
@lake_metadata
def flaky_tests_assets(context: dg.AssetExecutionContext, config: WindowConfig, lake: LakeResource):
    day = context.partition_key
    lk = lake.lake(keep_listings=True)
    report = build_flaky_tests(lk, day, config.window_days, skip_if_unchanged=is_refresh(context.run.tags),
                               main_branch=load_config().main_branch)
    if report.unchanged:
        context.log.info(f"flaky_tests {day}: no input partition changed since it was written; left as it is")
    if report.days_read < config.window_days:
        context.log.warning(f"the window has {report.days_read} of {config.window_days} days of test_daily_stats")
    yield dg.MaterializeResult(asset_key="flaky_tests", metadata={
        "tests": report.tests, "window_days": config.window_days, "days_read": report.days_read,
        "unchanged_inputs": report.unchanged,
        **{f"verdict_{v}": report.verdicts[v] for v in VERDICTS},
        "path": lk.store.display(lk.partition_path("flaky_tests", day)), **table_metadata(lk, "flaky_tests", day),
    })
    yield dg.MaterializeResult(asset_key="flaky_test_platforms", metadata={
        "path": lk.store.display(lk.partition_path("flaky_test_platforms", day)),
        **table_metadata(lk, "flaky_test_platforms", day)})
    yield unique_key_check(lk, "flaky_tests", day, ["file", "classname", "name"])


_FILING_CHECK = "every_disabled_test_has_an_issue"
_FILING_CHECK_TEXT = ("Every test the verdict disables was found or filed (a GitHub error leaves a test, or every test "
                      "when GitHub fails the whole loop, for the next run; a test whose name PyTorch's title parser "
                      "cannot read, or whose title GitHub refuses as too long, gets none, for a human to disable).")


@dg.asset(
    name=LEDGER_TABLE, group_name="flakiness", kinds={"parquet", "github"}, pool="github_issues",
    deps=["flaky_tests", "flaky_test_platforms", dg.AssetDep("test_sha_outcomes", partition_mapping=_WINDOW),
          dg.AssetDep("test_jobs", partition_mapping=_WINDOW),
          dg.AssetDep("workflow_job", partition_mapping=window_mapping(WINDOW_DAYS - 1, 1)),
          dg.AssetDep("test_results", partition_mapping=_RERUN_WINDOW),
          dg.AssetDep("test_daily_stats", partition_mapping=_REPORTED_WINDOW)],
    check_specs=[check_spec(_FILING_CHECK, LEDGER_TABLE)],
    partitions_def=daily_partitions,
    description="The tests the flaky verdict disables, as DISABLED issues in the upstream repo (found, created "
                "with their evidence, or updated with new platforms), one ledger row per action: test, "
                "issue_number, action (found/created/updated/closed/reenabled/narrowed/dropped/evidence/dry_run), "
                "at. Issues of tests deleted from the code (absent from every report for 7 days while their file "
                "kept reporting) are closed, those of tests clean in PyTorch's rerun_disabled_tests jobs closed or "
                "narrowed; an aggregate's tests are dropped from its list one by one. Dry run without credentials "
                "or with disabled_issues.enabled false. A GitHub error (an outage, refused credentials) fails its "
                "check, not its step, so the disabled list and the HUD after it are built all the same.",
)
@lake_metadata
def disabled_issues_asset(context: dg.AssetExecutionContext, lake: LakeResource, outputs: OutputsResource,
                          github: GitHubResource):
    """Filing issues acts on the world, so it is an asset of its own rather than a step inside
    `disabled_tests`: a failed publish (storage hiccup) is re-executed without walking GitHub
    again, and GitHub's failures show here, on the ledger, with their own check. It runs in
    the `github_issues` pool (one step at a time across all runs, dagster.yaml), so two runs,
    say a backfill next to the daily schedule, never search and create for the same test at
    once; `torchci_outputs` is not used because filing, paced for GitHub's rate limits, would
    hold up every other publish. Its partition is the verdict's day; the ledger is append-only
    (every run adds its rows; a re-run never removes what was done on GitHub).

    A GitHub error that stops the loop fails the check and is logged as an error, but not the
    step: a failed step skips everything downstream of it, here `disabled_tests`, the daily CI
    metrics and the HUD, which would then stay frozen for as long as GitHub fails. GitHub down
    (`unavailable`) stops the pass at the first request that met it, said once in the log and in
    `github_unavailable`; retiring and re-enabling wait with the filing."""
    lk = lake.lake()
    relay = load_config()
    try:
        report, mode = run_disabled_issues(github, lk, outputs.store(), context.partition_key, context.run.run_id,
                                           relay, log=context.log.info, warn=context.log.warning,
                                           refresh=is_refresh(context.run.tags))
        life = waiting_for_github(report.unavailable) if report.unavailable else run_lifecycle(
            github, lk, outputs.store(), context.partition_key, context.run.run_id, relay.upstream_repo,
            relay.disabled_issues, relay.source, report.open_list, log=context.log.info, warn=context.log.warning,
            allowed=report.allowed, refresh=is_refresh(context.run.tags))
    except GitHubError as exc:
        failure = {**read_failure(exc, relay.upstream_repo), **({"github_unavailable": (
            f"GitHub was unavailable ({exc}): nothing lost; the whole pass waits for the next run")}
            if unavailable(exc) else {})}
        context.log.error(f"the DISABLED-issue loop stopped on a GitHub error ({failure['error']}); what it did "
                          f"before is in the ledger. {failure['fix']}")
        yield dg.MaterializeResult(metadata={"repo": relay.upstream_repo, **failure})
        yield dg.AssetCheckResult(check_name=_FILING_CHECK, asset_key=LEDGER_TABLE, passed=False,
                                  description=_FILING_CHECK_TEXT, metadata=failure)
        return
    keep_answers(lk, context.partition_key, context.run.run_id, report.allowed)  # the run's later steps reuse them
    yield dg.MaterializeResult(metadata=filing_metadata(report, life, mode, relay.upstream_repo, lk))
    yield filing_check(report, mode, relay.upstream_repo)


def filing_check(report, mode, repo: str) -> dg.AssetCheckResult:
    """A dry run files nothing, and nothing in it is for a human to fix: the check passes, but its
    result says no issue was filed and for how many tests, so a green check never reads as "every
    disabled test has its issue" while none has."""
    planned = report.count("dry_run")
    without = planned - len(report.listed) + len(report.deferred)
    description = _FILING_CHECK_TEXT if mode.live else (
        f"Dry run ({mode.reason}): no DISABLED issue was searched or filed; of the {planned + len(report.deferred)} "
        f"test(s) the verdict disables, {len(report.listed)} have an issue on the published list, which a live run "
        f"would find, {planned - len(report.listed)} none, which it would find or file, and {len(report.deferred)} "
        "would wait for a later run (max_new_per_run) (see dry_run_actions on the materialization).")
    return dg.AssetCheckResult(
        check_name=_FILING_CHECK, asset_key=LEDGER_TABLE, passed=not report.failed and not report.unreadable,
        description=description,
        metadata={"dry_run": not mode.live, "tests_without_issue": without,
                  "failed": dg.MetadataValue.json(dict(sorted(report.failed.items())[:50])),
                  "unreadable": dg.MetadataValue.json(dict(sorted(report.unreadable.items())[:50])),
                  **({"github_unavailable": report.unavailable} if report.unavailable else {}),
                  **_filing_refused(report.first_error, repo)})


def _filing_refused(exc: GitHubError | None, repo: str) -> dict:
    """A token that may read issues but not write them fails every filing, run after run, though
    the lists are read: its check says so and what to set (`read_failure`); a failure of one test's
    issue (a 422, an outage) is left to the `failed` list and the next run."""
    failure = read_failure(exc, repo) if exc is not None else {}
    return failure if failure.get("github_refused") else {}


def read_failure(exc: Exception, repo: str) -> dict:
    """The metadata of a check GitHub failed: the error, whether GitHub refused the credentials
    (`github_refused`) and what to do (`fix`). The lists stay as published while it lasts, and a
    refusal (a 401, or a 403 that is no rate limit) lasts until someone changes the credentials:
    `torchci run` exits non-zero on it and the HUD says what to set, where an outage or a rate
    limit passes by itself."""
    was_refused = refused(exc)
    if was_refused:
        fix = f"{refusal_fix(exc, repo, 'Issues: read and write')}; this does not pass by itself"
    elif isinstance(exc, MassReenableRefused):
        fix = ("the open issues read would re-enable most disabled tests at once (likely a search outage): the next "
               "run reads them again; if those issues really were closed, materialize disabled_tests with "
               "allow_mass_reenable: true")
    else:
        fix = ("GitHub failed (an outage, a rate limit, no answer): the next run reads the issues again; if it lasts, "
               "check GitHub's status and the network where Dagster runs")
    return {"error": f"{type(exc).__name__}: {exc}", "github_refused": was_refused, "fix": fix}


def filing_metadata(report, life, mode, repo: str, lk) -> dict:
    """What a run of the DISABLED-issue loop did, for its materialization."""
    retired, reenabled = life.retirement, life.reenabling
    created = [r for r in report.rows if r["action"] == "created"]
    return said({
        "dry_run": not mode.live, "dry_run_reason": mode.reason, "repo": repo,
        "skipped": report.skipped,
        "github_unavailable": report.unavailable or life.unavailable,  # the pass stopped there; what waits
        # a dry run reads no issue: 0 there would read as "no open DISABLED issue"
        **({"open_issues": report.open_issues} if mode.live else {}),
        "unchanged_since": report.unchanged_since,
        **{f"{a}_count": report.count(a) for a in ("found", "created", "updated", "dry_run")},
        "failed_count": len(report.failed), "deferred_count": len(report.deferred),
        "closed_as_deleted": dg.MetadataValue.json([r["test"] for r in retired.rows][:50]),
        "deleted_file_gone": dg.MetadataValue.json([a.test for a in retired.of("file_gone")][:50]),
        "retire_skipped": retired.skipped,
        "aggregate_lines": dg.MetadataValue.json([f"#{r['issue_number']} {r['action']} {r['test']}"
                                                  for r in life.aggregates.rows if r["action"] != "dry_run"][:50]),
        "aggregates_closed": dg.MetadataValue.json(life.aggregates.closed[:50]),
        **{f"{a}_on_evidence": dg.MetadataValue.json([d.test for d in reenabled.decisions if d.action == a][:50])
           for a in ("close", "narrow", "evidence")},
        "created": dg.MetadataValue.md("\n".join(f"- [#{r['issue_number']}]({r['issue_url']}) {r['test']}"
                                                  for r in created[:50]) or "none"),
        "updated_tests": dg.MetadataValue.json(report.tests("updated")[:50]),
        "aggregates": dg.MetadataValue.json({t: tests[:50] for t, tests in report.aggregates.items()}),
        "dry_run_actions": dg.MetadataValue.json(dry_run_actions(report, life)[:MAX_LISTED]),
        "deferred_tests": dg.MetadataValue.json(report.deferred[:50]),
        "unreadable_tests": dg.MetadataValue.json(dict(sorted(report.unreadable.items())[:50])),
        "ledger_parts": dg.MetadataValue.json([lk.store.display(p) for p in report.parts]),
    })


def dry_run_actions(report, life) -> list[str]:
    """Every write a dry run would make (filing, aggregates, closes, comments), as its log says it."""
    rows = [*report.rows, *life.retirement.rows, *life.reenabling.rows, *life.aggregates.rows]
    return [f"{r['test']}: {r['detail']}" for r in rows if r["action"] == "dry_run"]


class DisabledTestsConfig(dg.Config):
    """`allow_mass_reenable`: publish even when most disabled tests lost their open issue at once,
    which the asset otherwise refuses as a likely search outage."""

    allow_mass_reenable: bool = False


READ_BACK_CHECK = "read_from_the_open_issues"
_DISABLED_CHECK_SPEC = check_spec(
    READ_BACK_CHECK, "disabled_tests",
    description=f"{DISABLED_TESTS_PATH} and {DISABLED_JOBS_PATH} were read from GitHub's open DISABLED issues "
                "in this run (passes in a dry run, which reads no issue). When GitHub fails, or the issues read "
                "would re-enable most disabled tests at once (a likely search outage), the lists published last "
                "stay, CI and the HUD go on with them, and this check fails instead of the step, which would "
                "skip the HUD. Its metadata gives GitHub's error, what to do (fix) and whether GitHub refused the "
                "credentials (github_refused: they stay refused until someone changes them, and `torchci run` "
                "exits 3); the HUD's grid and tests pages open with a banner saying so.")


@dg.asset(
    name="disabled_tests", group_name="flakiness", kinds={"parquet", "json"}, deps=["flaky_tests", LEDGER_TABLE],
    pool="torchci_outputs", partitions_def=daily_partitions, check_specs=[_DISABLED_CHECK_SPEC],
    description=f"{DISABLED_TESTS_PATH} in PyTorch's format. With the DISABLED-issue loop on: built from the open "
                "DISABLED issues of the upstream repo as PyTorch builds it (real issue numbers and URLs, "
                "platforms parsed from the issues). Otherwise (dry run): flaky tests with evidence in at least "
                "3 jobs, on the platforms where they flaked, merged with the previous day's list; tests clean for a "
                f"whole window are dropped. Dropped tests are listed in {REENABLED_TESTS_PATH}. With the loop on, "
                f"{DISABLED_JOBS_PATH} too, from the open DISABLED <job> issues. Lake table disabled_tests, which "
                "the HUD shows. A GitHub error leaves the published lists as they are (the day's table, when it "
                "has none yet, gets the list CI goes on reading) and fails the check, not the step. A re-run or "
                "backfill of an earlier day never gives its table today's list (past_day says what it holds).",
)
@lake_metadata
def disabled_tests_asset(context: dg.AssetExecutionContext, config: DisabledTestsConfig, lake: LakeResource,
                         outputs: OutputsResource, github: GitHubResource):
    """GitHub's errors fail the check, not the step, as in `disabled_issues`: the daily CI
    metrics and the HUD wait for this step, and a failed one would skip them."""
    store, relay, day = outputs.store(), load_config(), context.partition_key
    mode = loop_mode(github, relay.disabled_issues, relay.source)
    failure, job_lists = {}, {}
    if mode.live:
        source = f"open DISABLED issues of {relay.upstream_repo}"
        try:
            decision, job_lists = lists_from_open_issues(context, config, lake.lake(), store, github, relay)
        except (GitHubError, MassReenableRefused) as exc:
            failure = read_failure(exc, relay.upstream_repo)
            context.log.error(f"{DISABLED_TESTS_PATH} and {DISABLED_JOBS_PATH} left as published before "
                              f"({failure['error']}); CI and the HUD go on with them. {failure['fix']}")
            decision = keep_published(lake.lake(), store, day)
    else:
        context.log.warning(f"DRY RUN: {mode.reason}; {DISABLED_TESTS_PATH} is built from the flaky verdict "
                            f"with local ids, not from DISABLED issues; {DISABLED_JOBS_PATH} is not published "
                            "(it exists only as issues)")
        decision, source = publish_disabled_tests(lake.lake(), store, day), "flaky verdict (dry run)"
    yield dg.MaterializeResult(metadata=said({
        "dry_run": not mode.live, "dry_run_reason": mode.reason, "source": decision.source or source,
        **({"past_day": decision.past_day} if decision.past_day else {}),
        "disabled": len(decision.disabled), "newly_disabled": len(decision.new),
        "reenabled": len(decision.reenabled),
        "newly_disabled_tests": dg.MetadataValue.json(decision.new[:50]),
        "reenabled_tests": dg.MetadataValue.json(sorted(decision.reenabled)[:50]),
        "published": not (decision.later_day or decision.nothing_new or failure),
        "output": store.display(DISABLED_TESTS_PATH), **job_lists, **failure,
        **read_from_github_at(context.instance, mode.live, not (failure or decision.later_day)),
        **(nothing_new(context, decision.nothing_new) if decision.nothing_new else {}),
        **(later_day_kept(context, day, decision.later_day,
                          f"{DISABLED_TESTS_PATH} and {REENABLED_TESTS_PATH}") if decision.later_day else {}),
    }))
    yield dg.AssetCheckResult(check_name=READ_BACK_CHECK, asset_key="disabled_tests", passed=not failure,
                              metadata={"error": "none", "dry_run": not mode.live, **failure})


# Metadata of `disabled_tests`: when its lists were last read from GitHub (ISO, UTC), carried over the
# runs that could not read them, so that the HUD can say how old the list CI goes on with is.
READ_AT = "read_from_github_at"


def read_from_github_at(instance: dg.DagsterInstance, live: bool, published: bool) -> dict:
    """`READ_AT` of this materialization: now when the lists CI reads were read and published, else
    the last one's (a run that failed to read them, or an earlier day's, which publishes nothing)."""
    if not live:
        return {}
    if published:
        return {READ_AT: dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    records = instance.fetch_materializations(dg.AssetKey("disabled_tests"), limit=1).records
    last = last_read(records[0].asset_materialization.metadata, records[0].timestamp) if records else None
    return {READ_AT: last} if last else {}


def last_read(metadata: dict, timestamp: float) -> str | None:
    """When the lists were last read from GitHub, as the materialization before this one (its
    `metadata`, its `timestamp`) says: its `READ_AT`, or its own time when it read them (written
    before `READ_AT` was kept: no error, no dry run and published); None when unknown."""
    if READ_AT in metadata:
        return metadata[READ_AT].value
    if "error" in metadata or "not_published" in metadata or ("dry_run" in metadata and metadata["dry_run"].value):
        return None
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def lists_from_open_issues(context: dg.AssetExecutionContext, config: DisabledTestsConfig, lk, store, github,
                           relay) -> tuple:
    """Publish the disabled tests and jobs from the open issues (live); the decision and the job
    lists' metadata. Raises GitHub's errors and a mass re-enable's refusal."""
    day = context.partition_key
    read = read_back(github, relay.upstream_repo, lk, day, is_refresh(context.run.tags))
    open_issues = read.open_any()
    trusted = trusted_test_issues(github, lk, day, relay.upstream_repo, open_issues, context.run.run_id)
    if trusted.refused:
        context.log.warning(f"{len(trusted.refused)} DISABLED test issue(s) by authors without write access "
                            "left out: " + ", ".join(f"#{i['number']}" for i in trusted.refused[:20]))
    decision = publish_disabled_from_issues(lk, store, day, trusted.tests, config.allow_mass_reenable,
                                            reenabled_here(lk, day), lambda numbers: close_times(read, numbers))
    jobs = publish_job_list(github, relay.upstream_repo, store, DISABLED_PREFIX, open_issues, trusted.allowed)
    keep_answers(lk, day, context.run.run_id, trusted.allowed)
    return decision, {"disabled_jobs": jobs, "refused_test_issues": dg.MetadataValue.json(
        [i["html_url"] for i in trusted.refused][:MAX_LISTED])}


# What to do when the unstable list could not be read (its error may be GitHub's or not: a refusal
# of the credentials fails `disabled_tests`' check as well, which tells it apart).
_UNSTABLE_FIX = (f"{UNSTABLE_JOBS_PATH} stays as published and the next run reads it again; see the error, and "
                 "disabled_tests' check for credentials GitHub refused")


_UNSTABLE_CHECK_SPEC = check_spec(
    READ_BACK_CHECK, "unstable_jobs",
    description=f"{UNSTABLE_JOBS_PATH} was read from GitHub's open UNSTABLE issues in this run (passes in a dry "
                "run, which reads no issue and publishes no list). When GitHub (or "
                "anything else) fails, the list published last stays and the HUD and Dr. CI go on with it: "
                "this check fails instead of the step, which would skip them.")


@dg.asset(
    name="unstable_jobs", group_name="flakiness", kinds={"json", "github"}, partitions_def=daily_partitions,
    check_specs=[_UNSTABLE_CHECK_SPEC],
    description=f"{UNSTABLE_JOBS_PATH} in PyTorch's format, with the DISABLED-issue loop on: the open "
                f"{UNSTABLE_PREFIX} <job> issues of the upstream repo by PyTorch's flaky bot or an author with write "
                "access (the job runs, its failure blocks nothing). commit_health, pr_jobs and Dr. CI read it in the "
                "same run. A GitHub error leaves the published list as it is and fails the check, not the step. "
                "Not published in a dry run.",
)
def unstable_jobs_asset(context: dg.AssetExecutionContext, lake: LakeResource, outputs: OutputsResource,
                        github: GitHubResource):
    """An asset of its own, not a part of `disabled_tests`: the HUD waits for it, so an UNSTABLE
    issue reaches the grid in the run that reads it, while the disabled lists, which fail on
    GitHub errors, stay off the HUD's path. It never fails (`run_unstable_jobs`)."""
    store = outputs.store()
    report = run_unstable_jobs(github, lake.lake(), store, context.partition_key, context.run.run_id, load_config(),
                               log_error=context.log.error)
    if not report.mode.live:
        context.log.warning(f"DRY RUN: {report.mode.reason}; {UNSTABLE_JOBS_PATH} is not published (it exists "
                            "only as issues)")
    elif report.error:
        context.log.error(f"{UNSTABLE_JOBS_PATH} left as published before ({report.error}); the HUD reads that one")
    jobs = sorted(report.jobs or {})
    yield dg.MaterializeResult(metadata=said({
        "dry_run": not report.mode.live, "dry_run_reason": report.mode.reason,
        "published": report.jobs is not None, "changed": report.changed,
        "output": written_or_kept(store, UNSTABLE_JOBS_PATH, report.jobs is not None),
        **({"unstable_jobs": len(jobs), "jobs": dg.MetadataValue.json(jobs[:MAX_LISTED])}
           if report.jobs is not None else {}),
        "permissions_asked": report.asked, "permissions_reused": report.reused,
        **({"error": report.error} if report.error else {}),
    }))
    yield dg.AssetCheckResult(check_name=READ_BACK_CHECK, asset_key="unstable_jobs", passed=not report.error,
                              metadata={"error": report.error or "none", "dry_run": not report.mode.live,
                                        **_unstable_failure(report, load_config().upstream_repo)})


def written_or_kept(store, path: str, written: bool) -> str:
    """The output a run's metadata names: a path beside `published: false` read as a file written,
    where a dry run writes none and a failed read keeps the one published before, if any."""
    if written:
        return store.display(path)
    if store.exists(path):
        return f"{store.display(path)} (as published before: not written in this run)"
    return "none: not written in this run"


def _unstable_failure(report, repo: str) -> dict:
    """The failed check's `fix` (and, for GitHub's own errors, whether it refused the credentials,
    as `read_failure` says for the disabled lists); nothing when the list was read."""
    if not report.error:
        return {}
    if isinstance(report.exception, GitHubError):
        return {k: v for k, v in read_failure(report.exception, repo).items() if k != "error"}
    return {"fix": _UNSTABLE_FIX}



@dg.asset(
    name="slow_tests", group_name="flakiness", kinds={"parquet", "json"}, pool="torchci_outputs",
    deps=[dg.AssetDep("test_daily_stats", partition_mapping=_WINDOW)], partitions_def=daily_partitions,
    description=f"{SLOW_TESTS_PATH} in PyTorch's format: tests averaging over 60 s on clean passes of the main "
                "branch in the window (the mean over configurations, ASAN and the periodic workflow left out). "
                "Lake table slow_tests.",
)
@lake_metadata
def slow_tests_asset(context: dg.AssetExecutionContext, config: WindowConfig, lake: LakeResource,
                     outputs: OutputsResource) -> dg.MaterializeResult:
    store, day = outputs.store(), context.partition_key
    n, quiet, later = publish_slow_tests(lake.lake(), store, day, config.window_days, load_config().main_branch_name)
    return dg.MaterializeResult(metadata={"slow_tests": n, "window_days": config.window_days,
                                          "published": not (quiet or later), "output": store.display(SLOW_TESTS_PATH),
                                          **(nothing_new(context, quiet) if quiet else {}),
                                          **(later_day_kept(context, day, later, SLOW_TESTS_PATH) if later else {})})


@dg.asset(
    name="smoke_tests", group_name="flakiness", kinds={"parquet", "json"}, deps=["flaky_tests", "flaky_test_platforms"],
    pool="torchci_outputs",
    partitions_def=daily_partitions,
    description=f"{SMOKE_DIR}/<platform>.json: per platform, the tests failing there significantly more than "
                "elsewhere on distinct commits (not flaky elsewhere), ranked, with their evidence. "
                "Lake table smoke_tests.",
)
@lake_metadata
def smoke_tests_asset(context: dg.AssetExecutionContext, lake: LakeResource,
                      outputs: OutputsResource) -> dg.MaterializeResult:
    store = outputs.store()
    report = publish_smoke_tests(lake.lake(), store, context.partition_key)
    return dg.MaterializeResult(metadata={
        "tests_per_platform": dg.MetadataValue.json(report.platforms),
        **({"empty_sets": why} if (why := empty_sets(report.platforms)) else {}),
        "published": bool(report.paths), "output": store.display(SMOKE_DIR + "/"),
        "files_published": dg.MetadataValue.json([store.display(p) for p in report.paths]),
        **(nothing_new(context, report.nothing_new) if report.nothing_new else {}),
        **(later_day_kept(context, report.day, report.later_day, SMOKE_DIR + "/") if report.later_day else {}),
    })


FLAKINESS_ASSETS = [flaky_tests_assets, disabled_issues_asset, disabled_tests_asset, unstable_jobs_asset,
                    slow_tests_asset, smoke_tests_asset]
