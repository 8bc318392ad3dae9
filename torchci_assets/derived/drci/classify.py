"""Which failures of a pull request's head are its own: Dr. CI's classes, as plain functions.

A failing job of the head (its latest attempt failed) gets the first class that applies:
  (suppressed)  a job PyTorch lets a label silence (SUPPRESSED_JOB_BY_LABELS: `bc_linter` under
                `suppress-bc-linter` or `suppress-api-compatibility-check`) is FLAKY when the pull
                request carries one of them, as in PyTorch's Dr. CI (pytorch/pytorch only): the
                author said the break is intended, so it is not to be fixed;
  UNSTABLE      the job is marked unstable: "unstable" in its name, or an open `UNSTABLE <job>`
                issue, as published in `stats/unstable-jobs.json`, matches it: see `unstable_entry`;
  (lint)        a lint job (`EXCLUDED_FROM_BROKEN_TRUNK`) goes straight to CANCELLED or NEW, as in
                PyTorch's Dr. CI: lint fails because of the code it reads, so main's lint failing
                alike does not make the pull request's lint error main's, nor does a log that looks
                like infrastructure (upstream asks this before any of its infra checks); one
                abandoned is INFRA, as any abandoned job (below): it reported no lint error;
  INFRA         the job failed for an infrastructure reason (`pr_jobs`' infra class: the log
                classifier's infra rules, a job abandoned; a test job without any test result once
                its reports are overdue, an hour after its workflow run completed, whether its state
                came from the lake or the REST API: see `infra_reason`, `results_overdue`).
                A job never called flaky (a build, docs, backwards_compat: below) is INFRA only
                when abandoned, as upstream sets those jobs aside before its infra checks and asks
                them only whether main failed alike (BROKEN TRUNK) and whether the merge base ran
                them (UNCLASSIFIED): see `infra_failure`;
  FLAKY (re-enabled) every failing test of the job was disabled by a DISABLED issue closed after
                the merge base was pushed, and the pull request does not say it closes one of them
                (`reenabled_after_base`): main fixed the test since, the pull request lacks the fix
                and must rebase, as upstream's isRecentlyCloseDisabledTest;
  FLAKY (disabled) every failing test of the job is disabled on its platform by an open DISABLED
                issue of the published list, and the pull request does not say it closes one of
                them (`disabled_by`): as upstream's Dr. CI, a test disabled while the job ran, or
                after; a pull request fixing the test runs it on purpose, and its failure goes on
                to the rules below;
  FLAKY         every failing test of the job is flaky (`flaky_tests`) and failed elsewhere, on
                another commit, with the same message as here (a final failure, or a try that
                passed on rerun): see `known_flaky`;
  BROKEN TRUNK  the same failure is on main at the merge base or a main commit shortly around
                it (`NEAR_COMMITS` on each side): see `same_failure`. As in PyTorch's Dr. CI
                (isSameFailure), the same failure has the same conclusion: a cancelled job is
                BROKEN TRUNK only where main's job was cancelled too, and a job that failed is
                never BROKEN TRUNK by a main job that was cancelled;
  FLAKY (rule)  the job's name and its log classifier's line or captures match a rule of PyTorch's
                flaky-rules.json, when one is given (`flaky_rule`): a known infrastructure flake
                upstream lists by hand. After BROKEN TRUNK, as upstream; never for lint nor for the
                jobs never called flaky;
  FLAKY (main)  the same failure is on a main commit of upstream's span for similar failures (a day
                before the merge base up to the head's push, at most a week; beyond the NEAR_COMMITS):
                main met the outside change or the flake the pull request met, as the pull request
                lacks the commits after its merge base (`similar_on_main`);
  FLAKY (other) the same failure is on the last head of another author's pull request that landed
                (merged over that failure, which its reviewers took for unrelated), failed in the
                same span, before this head was pushed (`similar_on_other_pr`), as upstream's search
                finds it (isEligibleCommitForSimilarFailureCheck: trunk, or a merged pull request's
                last commit). Never the author's own (a ghstack stack shares its breakage: as
                upstream, isSameAuthor), nor a pull request whose author or this one's the lake does
                not know (upstream counts those; calling a breakage unrelated is the worse error);
  UNCLASSIFIED  the job did not run at the merge base at all (no job of that name, shard and runner
                dropped, whatever its conclusion): nothing says whether main fails it too, so
                PyTorch's Dr. CI says it cannot tell, rather than blaming the pull request. Only
                when the merge base's jobs are known (it is among main's commits the lake read,
                and has a job): otherwise NEW, as PyTorch's Dr. CI when its database has none;
                never for lint, nor, as upstream, for a job whose log's line is a generic exit
                code (GENERIC_LINES) unless it is one of the jobs never called flaky;
  CANCELLED     the job was cancelled (`pr_jobs`' `cancelled`, or GitHub's conclusion when read
                from the REST API), or its log's line is a step cancelled by its timeout
                (`CANCELLED_STEP_ERROR`: GitHub concludes such a job `failure`): PyTorch's Dr. CI
                splits these out of the new failures and asks for a retry, since a cancellation
                says nothing about the code;
  NEW           anything else: the pull request's own failure.

A workflow run of the head that waits for a maintainer's approval (conclusion `action_required`,
a first-time contributor's, or `startup_failure`, as PyTorch's Dr. CI counts them) and has no job
is AWAITING APPROVAL: nothing ran, so nothing can be said of the code yet.

The jobs PyTorch's Dr. CI never calls flaky (`EXCLUDED_FROM_FLAKINESS`: lint, docs, builds,
backwards_compat, ...) are never FLAKY here either, nor INFRA unless abandoned, and a known flake is
no evidence of BROKEN TRUNK for them; the lists are upstream's (drciUtils.ts), matched as there: any
case, anywhere in "workflow / job".

For the other jobs INFRA is tried before BROKEN TRUNK and the flaky rules, unlike upstream, which
asks its infra checks (a job with no failure line and no runner, or no log) after them and calls
such a job FLAKY: an infrastructure failure often leaves no line nor test to compare, and a job
with neither is the same failure as any failure of its group on main (`same_failure`), so BROKEN
TRUNK would cite a main failure it does not share; rebasing does not bring a lost runner back
either. All three say "not yours", so the order never turns a new failure into an unrelated one.

FLAKY is tried before BROKEN TRUNK (PyTorch's Dr. CI tries the merge base first) because a known
flake that happened to strike main near the merge base too does not make main broken: rebasing
would not help, and the evidence worth citing is the flake's. Both are "not yours", so the order
never turns a new failure into an unrelated one.

"Same failure" (BROKEN TRUNK) is precise on purpose, since calling a real breakage unrelated is
the error users resent most:
  - a job with failing tests: the same job group (workflow and job name without shard numbers)
    failed on the reference main commit, and every one of the job's failing tests failed there
    in the same build environment and test config, with the same message (its first line, with
    numbers masked: `message_key`), or is a known flake (as for FLAKY); at least one must have
    failed on main (a broken test and a flake striking in the same shard is still broken trunk);
  - a job without failing tests (a build, docs): the same job group failed there at all, and
    when both jobs' logs were classified, with the same line (`message_key` of the log
    classifier's line: a compile error in another file is another failure).
A test that is flaky somewhere but fails here with another message is a new failure: flakiness
is a property of a failure (test and message), not of a test name, so it is never FLAKY, and
unless main fails the same way, never BROKEN TRUNK either.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from functools import lru_cache

from torchci_assets.derived.hud.reports_due import reports_due_at, reports_overdue, run_running

NEW = "NEW"
BROKEN_TRUNK = "BROKEN TRUNK"
FLAKY = "FLAKY"
UNSTABLE = "UNSTABLE"
INFRA = "INFRA"
CANCELLED = "CANCELLED"
UNCLASSIFIED = "UNCLASSIFIED"
AWAITING_APPROVAL = "AWAITING APPROVAL"
# every class a verdict can have
CLASSES = (NEW, BROKEN_TRUNK, FLAKY, UNSTABLE, INFRA, CANCELLED, UNCLASSIFIED, AWAITING_APPROVAL)
# A workflow run's conclusions that PyTorch's Dr. CI lists as awaiting approval (its jobs never started).
AWAITING_CONCLUSIONS = ("action_required", "startup_failure")
# `pr_jobs`' infra reasons as a reader of the comment understands them.
INFRA_REASONS = {"log": "the log shows an infrastructure failure", "log-infra": "the log shows an infrastructure failure",
                 "no-test-results": "no test results", "abandoned": "no conclusion for 36 hours: abandoned",
                 "job-died": "the job died", "failed-outside-tests": "failed outside the tests",
                 "mass-failure": "most of its tests failed at once",
                 "shared-message": "many tests failed with one message"}
# `pr_jobs`' infra reason of a test job none of whose test reports landed
NO_TEST_RESULTS = "no-test-results"
# Main commits on each side of the merge base whose failures count as the trunk's.
NEAR_COMMITS = 2
# PyTorch's Dr. CI's span for a similar failure (hasSimilarFailures): from a day before the merge base to the
# head's push, and none when that spans more than a week (MAX_SEARCH_HOURS_FOR_QUERYING_SIMILAR_FAILURES)
SIMILAR_LOOKBACK = dt.timedelta(hours=24)
SIMILAR_SPAN = dt.timedelta(days=7)
# PyTorch's Dr. CI's lists (drciUtils.ts), substrings of "workflow / job" in any case: jobs never
# matched against main, and jobs never called flaky ("/ build": it cannot tell a flaky build yet).
EXCLUDED_FROM_BROKEN_TRUNK = ("lint",)
EXCLUDED_FROM_FLAKINESS = ("lint", "linux-docs", "ghstack-mergeability-check", "backwards_compat",
                           "pr-sanity-checks", "/ build", "check labels")
# PyTorch's Dr. CI's SUPPRESSED_JOB_BY_LABELS: a job (GitHub's job name, no workflow) -> the labels that
# silence its failure, and the repositories (by name, as upstream compares prInfo.repo) where they do.
SUPPRESSED_JOB_BY_LABELS = {"bc_linter": ("suppress-bc-linter", "suppress-api-compatibility-check")}
SUPPRESSING_REPOS = ("pytorch",)
# upstream's EXCLUDED_FROM_SIMILARITY_POST_PROCESSING: a line saying only that a step failed
GENERIC_LINES = (re.compile(r"Process completed with exit code \d+"),)
# the evidence of a NEW test job without test reports, while they may still land (`awaiting_results`)
AWAITING_RESULTS = "no test results yet"
# (the class of a job of the same head, the class a NEW failure like it gets), in upstream's order
SIMILAR_IN_PR = ((UNSTABLE, UNSTABLE), (FLAKY, FLAKY), (BROKEN_TRUNK, FLAKY))
# the reason an UNCLASSIFIED job is listed, in upstream's words
NOT_AT_MERGE_BASE = "this job did not run on the merge base, so DrCI cannot tell whether the failure is pre-existing"
# The line GitHub logs when it cancels a step that ran past its timeout (drciUtils.ts's CANCELLED_STEP_ERROR).
CANCELLED_STEP_ERROR = "##[error]The operation was canceled."
# how the log classifier read a job's log (`HeadJob.log_read`): whole, or cut short or unreadable in part
LOG_WHOLE, LOG_PART = "whole", "part"

_HEX = re.compile(r"0x[0-9a-fA-F]+")
# PyTorch's REMOVE_JOB_NAME_SUFFIX_REGEX: "... test (default, 1, 5, linux.4xlarge)" -> "... test (default)"
_BASE_NAME_SUFFIX = re.compile(r", [0-9]+, [0-9]+, .+\)")
_NUMBER = re.compile(r"\d+")


def first_line(message: str | None) -> str:
    """A failure message's first non-empty line, its spaces collapsed: what a reader is shown."""
    for line in (message or "").splitlines():
        line = " ".join(line.split())
        if line:
            return line
    return ""


def message_key(message: str | None) -> str:
    """A failure message as compared between runs: its first non-empty line, addresses and numbers
    masked (a port, a pid, an element count differ between two runs of the same failure)."""
    if message is not None and len(message) > _REMEMBERED_CHARS:
        return _message_key(message)
    return _remembered_key(message)


def _message_key(message: str | None) -> str:
    return _NUMBER.sub("N", _HEX.sub("0x", first_line(message)))[:300]


# A build asks the key of each failing job's line several times, and of main's: short messages' keys are
# remembered, at most this many of at most this size (a few tens of MB at worst).
_REMEMBERED, _REMEMBERED_CHARS = 16384, 2048
_remembered_key = lru_cache(maxsize=_REMEMBERED)(_message_key)


@dataclass(frozen=True)
class FailedTest:
    key: str      # "classname.name (file)", "name (file)" outside a class, as pr_jobs and commit_health list tests
    message: str  # message_key of its failure here, for comparisons
    text: str = field(default="", compare=False)  # its first line as it failed, for the reader


@dataclass
class HeadJob:
    """A job of the pull request's head, latest attempt (a `pr_jobs` row)."""

    name: str
    job_group: str
    state: str                      # failure, pending, success, skipped; awaiting (a run waiting for approval)
    failure_class: str | None = None
    job_id: int | None = None
    run_id: int | None = None
    workflow: str = ""
    build_env: str | None = None
    test_config: str | None = None
    infra_reason: str | None = None
    failure_line: str | None = None
    captures: tuple[str, ...] = ()  # the log classifier's captures of its line (flaky rules match them)
    tests: tuple[FailedTest, ...] = ()
    started_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    from_rest: bool = False         # its state was read from the REST API (a lost webhook)
    run_attempt: int | None = None
    run_status: str | None = None   # its run attempt's highest status heard; None: nothing heard of the run
    run_ended_at: dt.datetime | None = None  # when its run attempt completed (`settle_runs`: its jobs did)
    cancelled: bool = False         # it failed by cancellation only (a retry, not a fix, is due)
    log_read: str | None = None     # how the log classifier read its log (LOG_WHOLE, LOG_PART), a rule matched or
                                    # not; None: `job_failure` has no row of it (not read yet)


@dataclass(frozen=True)
class MainFailure:
    """A job group that failed (every attempt) on a main commit near the merge base."""

    sha: str
    job_group: str
    job_id: int | None
    run_id: int | None
    merge_base: bool                # this commit is the merge base itself
    distance: int = 0               # commits away from the merge base
    line: str = ""                  # message_key of the log classifier's line, "" when none
    cancelled: bool = False         # every failing job of the group's latest attempt was cancelled
    after: bool = False             # the commit is after the merge base (the pull request's base lacks it)


@dataclass
class Trunk:
    """What main looked like around the merge base: failing groups, and failing (test, message
    key) pairs per (sha, build_env, test_config)."""

    failures: Mapping[str, list[MainFailure]] = field(default_factory=dict)  # job_group -> failures
    tests: dict[tuple[str, str, str], frozenset[tuple[str, str]]] = field(default_factory=dict)
    # the merge base's jobs (`base_name`), whatever their conclusion; None when not known
    base_jobs: frozenset[str] | None = None
    branch: str = "main"  # the main branch's name, as a verdict says where it failed the same way
    # main's failures in upstream's span for similar failures (`Main.window`), beyond the NEAR_COMMITS
    window: Mapping[str, list[MainFailure]] = field(default_factory=dict)  # job_group -> failures


@dataclass(frozen=True)
class OtherFailure:
    """A failing job of the last head of another author's landed pull request, in upstream's span
    for similar failures: the evidence of FLAKY (another pull request)."""

    pr: int
    sha: str
    job_group: str
    job_id: int | None
    run_id: int | None
    at: dt.datetime                 # when it failed (its completion, else its start)
    line: str = ""                  # message_key of the log classifier's line, "" when none
    cancelled: bool = False
    build_env: str = ""
    test_config: str = ""
    tests: frozenset[tuple[str, str]] = frozenset()  # its failing (test, message key) pairs


@dataclass(frozen=True)
class FlakySighting:
    """A flaky test's failure on another commit: the evidence a FLAKY verdict cites."""

    sha: str
    job_id: int | None
    run_id: int | None


@dataclass(frozen=True)
class DisabledIssue:
    """An open DISABLED issue of the published disabled list: the evidence of FLAKY (disabled)."""

    number: int
    url: str
    platforms: tuple[str, ...] = ()  # where it disables the test; empty: everywhere


@dataclass
class Flaky:
    """Tests `flaky_tests` calls flaky, with the messages they failed with elsewhere; and, as a pull
    request sees them, the tests DISABLED issues disable and the issues its body says it closes."""

    sightings: Mapping[tuple[str, str], FlakySighting] = field(default_factory=dict)  # (test key, message key)
    tests: Set[str] = field(default_factory=frozenset)
    # (method, class) -> its issues (`inputs.load_disabled`); class "" for a test outside a class
    disabled: Mapping[tuple[str, str], tuple[DisabledIssue, ...]] = field(default_factory=dict)
    closes: frozenset[int] | None = None  # None: the pull request's body is not known
    # (method, class) -> the issue of a test re-enabled lately, and the start of the day it was
    # (`inputs.load_disabled`); and when the pull request's merge base was pushed (None: unknown)
    reenabled: Mapping[tuple[str, str], tuple[DisabledIssue, dt.datetime]] = field(default_factory=dict)
    base_pushed: dt.datetime | None = None


@dataclass(frozen=True)
class FlakyRule:
    """A rule of PyTorch's flaky-rules.json: a failed job whose name matches `name` and whose
    failure matches every one of `captures` (regular expressions, searched) is a known flake."""

    name: str
    captures: tuple[str, ...]
    name_re: re.Pattern = field(compare=False, repr=False)
    capture_res: tuple[re.Pattern, ...] = field(compare=False, repr=False)
    source: str = "flaky-rules.json"  # the file's name, cited in the verdict


@dataclass(frozen=True)
class Verdict:
    job: HeadJob
    cls: str
    evidence: str = ""
    main: MainFailure | None = None
    sighting: FlakySighting | None = None
    issue: str | None = None        # the UNSTABLE issue's URL that marks the job
    related: HeadJob | None = None  # the job of the same head whose unrelated failure this one repeats
    other: OtherFailure | None = None  # another author's pull request that failed the same way first
    disabled: tuple[DisabledIssue, ...] = ()  # the DISABLED issues of its failing tests
    rebase: bool = False  # those issues closed after the merge base: a rebase runs the fixed tests


def _flake(t: FailedTest, flaky: Flaky) -> FlakySighting | None:
    """A sighting on another commit of this test failing with this message, when it is flaky."""
    return flaky.sightings.get((t.key, t.message)) if t.key in flaky.tests else None


def same_failure(job: HeadJob, failure: MainFailure, trunk: Trunk, flaky: Flaky | None = None) -> bool:
    """True when `failure` on main is the job's own failure (see the module docstring)."""
    if failure.job_group != job.job_group or failure.cancelled != job.cancelled:
        return False
    if not job.tests:
        mine = message_key(job.failure_line)
        return not (mine and failure.line) or mine == failure.line
    failed_there = trunk.tests.get((failure.sha, job.build_env or "", job.test_config or ""), frozenset())
    on_main = [(t.key, t.message) in failed_there for t in job.tests]
    return any(on_main) and all(there or (flaky is not None and _flake(t, flaky) is not None)
                                for t, there in zip(job.tests, on_main))


def trunk_failure(job: HeadJob, trunk: Trunk, flaky: Flaky | None = None) -> MainFailure | None:
    """The main failure that is the same as the job's, the merge base's first, else the nearest."""
    candidates = sorted(trunk.failures.get(job.job_group, ()), key=lambda f: (not f.merge_base, f.distance, f.sha))
    return next((f for f in candidates if same_failure(job, f, trunk, flaky)), None)


def similar_on_main(job: HeadJob, trunk: Trunk, flaky: Flaky | None = None) -> MainFailure | None:
    """The same failure on a main commit of upstream's span for similar failures (`Trunk.window`), the
    nearest the merge base, or None. Only with something to compare: failing tests, or a line that says
    more than a step's exit code or its cancellation (upstream compares the last command run too, which
    the lake does not have). The pull request lacks the commits after its merge base, so neither their
    code nor its own broke it: main met an outside change or a flake as the pull request did."""
    if not (job.tests or message_key(job.failure_line)) or generic_line(job) or cancelled_step(job):
        return None
    candidates = sorted(trunk.window.get(job.job_group, ()), key=lambda f: (f.distance, f.sha))
    return next((f for f in candidates if (job.tests or f.line) and same_failure(job, f, trunk, flaky)), None)


def same_as_other(job: HeadJob, other: OtherFailure, flaky: Flaky | None = None) -> bool:
    """True when another pull request's job failed as this one did: the same job group and
    cancellation; with failing tests, in the same build environment and test config, every failing
    test failed there with the same message (or is a known flake) and at least one did; without,
    the same line, which both must have."""
    if other.job_group != job.job_group or other.cancelled != job.cancelled:
        return False
    if not job.tests:
        mine = message_key(job.failure_line)
        return bool(mine) and mine == other.line
    if (other.build_env, other.test_config) != (job.build_env or "", job.test_config or ""):
        return False
    there = [(t.key, t.message) in other.tests for t in job.tests]
    return any(there) and all(seen or (flaky is not None and _flake(t, flaky) is not None)
                              for t, seen in zip(job.tests, there))


def similar_on_other_pr(job: HeadJob, others: Mapping[str, Sequence[OtherFailure]],
                        flaky: Flaky | None = None) -> OtherFailure | None:
    """The first failure, oldest first, of another author's pull request that is this job's own
    (`same_as_other`), among `others` (job group -> failures, already limited to upstream's span
    and to other authors: `inputs.other_failures`); only with something to compare, as
    `similar_on_main`. Two authors meeting the same failure met it from outside their code."""
    if not (job.tests or message_key(job.failure_line)) or generic_line(job) or cancelled_step(job):
        return None
    candidates = sorted(others.get(job.job_group, ()), key=lambda o: (o.at, o.pr))
    return next((o for o in candidates if same_as_other(job, o, flaky)), None)


def trunk_place(failure: MainFailure, branch: str = "main") -> str:
    """Where on main a BROKEN TRUNK failure was seen, in words that do not claim the merge base for a
    neighbour of it (a commit after the merge base is not in the pull request's base)."""
    if failure.merge_base:
        return "the merge base"
    side = "after" if failure.after else "before"
    return f"{branch}, {failure.distance} {'commit' if failure.distance == 1 else 'commits'} {side} the merge base"


def full_name(job: HeadJob) -> str:
    """The job's name as PyTorch's Dr. CI reads it: `workflow / job`."""
    return f"{job.workflow} / {job.name}" if job.workflow else job.name


def excluded(job: HeadJob, kinds: tuple[str, ...]) -> bool:
    """True when the job is of one of `kinds` (EXCLUDED_FROM_*), as PyTorch's isExcluded matches."""
    return _excluded_name(full_name(job), kinds)


@lru_cache(maxsize=4096)
def _excluded_name(name: str, kinds: tuple[str, ...]) -> bool:
    """Remembered: every failing job is asked two or three times, and job names repeat across heads."""
    name = name.lower()
    return bool(name) and any(kind.lower() in name for kind in kinds)


def cancelled_step(job: HeadJob) -> bool:
    """True when the log classifier's line is a step cancelled by its timeout: the job ended
    `failure`, yet nothing says the code failed (PyTorch's Dr. CI lists it as cancelled)."""
    return (job.failure_line or "").strip() == CANCELLED_STEP_ERROR


def known_flaky(job: HeadJob, flaky: Flaky) -> FlakySighting | None:
    """A sighting elsewhere of each failing test with the same message, or None. Jobs without
    failing tests (builds, lint) are never flaky: PyTorch's Dr. CI excludes them too."""
    if not job.tests:
        return None
    seen = [_flake(t, flaky) for t in job.tests]
    return seen[0] if all(seen) else None


def test_words(key: str) -> tuple[str, str]:
    """(method, class) of a failing test's key ("TestY.test_x (file)", "test_x (file)" outside a
    class): the words PyTorch's runner and Dr. CI match a DISABLED issue by (the class's last part)."""
    qualified = key.rsplit(" (", 1)[0]
    cls, _, name = qualified.rpartition(".")
    return name, cls.rsplit(".", 1)[-1]


def disabled_by(job: HeadJob, flaky: Flaky) -> tuple[DisabledIssue, ...]:
    """The open DISABLED issues that disable every failing test of the job on its platform (an
    issue's platforms matched in `workflow / job` as upstream's getDisabledTestIssues matches them),
    or () when one of its tests has none, or when the pull request says it closes one of them
    (PyTorch's CI then runs the test on purpose, and no issue excuses its failure: upstream's
    isDisabledTestMentionedInPR), or when its body is not known (it may)."""
    if not job.tests or flaky.closes is None:
        return ()
    name, found = full_name(job), []
    for t in job.tests:
        issues = [i for i in flaky.disabled.get(test_words(t.key), ())
                  if not i.platforms or any(p in name for p in i.platforms)]
        if not issues or any(i.number in flaky.closes for i in issues):
            return ()
        found += [i for i in issues if i not in found]
    return tuple(found)


def reenabled_after_base(job: HeadJob, flaky: Flaky) -> tuple[DisabledIssue, ...]:
    """The DISABLED issues, closed lately, of every failing test of the job, when each closed after
    the pull request's merge base was pushed (by GitHub's closed_at, else re-enabled on a later day
    than its push: see `inputs.load_disabled`): main had the test disabled at the merge base, and fixed it
    since, or found it passing; the pull request lacks that, and its CI now runs the test, as
    upstream's isRecentlyCloseDisabledTest finds it. () when one of its tests is not such, when the
    pull request says it closes one of the issues, or when its body or merge base is not known."""
    if not job.tests or flaky.closes is None or flaky.base_pushed is None:
        return ()
    found: list[DisabledIssue] = []
    for t in job.tests:
        known = flaky.reenabled.get(test_words(t.key))
        if known is None or not flaky.base_pushed < known[1] or known[0].number in flaky.closes:
            return ()
        found += [known[0]] if known[0] not in found else []
    return tuple(found)


def flaky_rule(job: HeadJob, rules: tuple[FlakyRule, ...]) -> FlakyRule | None:
    """The first rule this job's failure matches (upstream's isFlaky): its name in `workflow / job`,
    and every pattern of the rule found in the log classifier's line or in one of its captures. Both,
    as upstream: a capture is not just a part of the line to a pattern (`^`, `$` meet its ends)."""
    texts = [t for t in (job.failure_line, *job.captures) if t]
    if not texts:
        return None
    name = full_name(job)
    return next((r for r in rules if r.name_re.search(name)
                 and all(any(p.search(t) for t in texts) for p in r.capture_res)), None)


# PyTorch's transformJobName: "pull / env / test (default, 1, 5, runner)" -> "pull / env / test (default)"
_SHARD_SUFFIX = re.compile(r"^(.*) \(([^,]*),.*\)")


def unstable_name(job: HeadJob) -> str:
    """The job's name as an UNSTABLE issue names it: workflow / job, shard and runner dropped."""
    full = full_name(job)
    m = _SHARD_SUFFIX.match(full)
    return f"{m[1]} ({m[2]})" if m else full


def unstable_entry(job: HeadJob, unstable: dict[str, list]) -> tuple[str, list] | None:
    """The unstable-jobs.json entry (job, [author, number, url, ...]) that marks this job, or None.
    As PyTorch's Dr. CI matches (getOpenUnstableIssues): the issue's title is contained in
    "UNSTABLE <the job's name>", so an entry naming a workflow and build environment marks every
    job of that environment, its build included; the longest, most specific entry is cited."""
    title = f"UNSTABLE {unstable_name(job)}"
    found = [(name, entry) for name, entry in unstable.items() if name.strip() and f"UNSTABLE {name}" in title]
    return max(found, key=lambda f: (len(f[0]), f[0])) if found else None


def _unstable(job: HeadJob, unstable: dict[str, list]) -> Verdict | None:
    # PyTorch's isMatchingJobByName: `unstable`, as written, anywhere in `workflow / job` (a job of
    # the `unstable` workflow is unstable too), the same rule as the HUD's
    if "unstable" in full_name(job):
        return Verdict(job, UNSTABLE, "marked unstable in its name")
    hit = unstable_entry(job, unstable)
    if hit is None:
        return None
    url = hit[1][2] if len(hit[1]) > 2 else ""
    return Verdict(job, UNSTABLE, f"UNSTABLE {hit[0]}", issue=url or None)


def suppressing_labels(repo: str, labels) -> tuple[str, ...]:
    """The pull request's labels that may suppress a job's failure: all of them in the repositories
    where PyTorch's Dr. CI honours SUPPRESSED_JOB_BY_LABELS, none elsewhere."""
    return tuple(labels or ()) if repo.rsplit("/", 1)[-1] in SUPPRESSING_REPOS else ()


def suppressed_by(job: HeadJob, labels) -> list[str]:
    """The labels among `labels` that suppress this job's failure (upstream's getSuppressedLabels:
    the job's own name, exactly, in SUPPRESSED_JOB_BY_LABELS), in that list's order."""
    silencers = SUPPRESSED_JOB_BY_LABELS.get(job.name) if job.name else None
    return [label for label in silencers if label in labels] if silencers else []


def base_name(name: str) -> str:
    """A job's `workflow / job` name as PyTorch's Dr. CI compares it with the merge base's jobs
    (removeJobNameSuffix): shard numbers and runner dropped, so every shard and runner is one job."""
    return _BASE_NAME_SUFFIX.sub(")", name, count=1) if name else name


def not_at_merge_base(job: HeadJob, trunk: Trunk) -> bool:
    """True when the merge base's jobs are known and none of them is this job (see UNCLASSIFIED)."""
    return trunk.base_jobs is not None and base_name(full_name(job)) not in trunk.base_jobs


def results_overdue(job: HeadJob, now: dt.datetime | None) -> bool:
    """True when a test job's reports would have landed by `now` had it produced any (`reports_due`, the
    rule main's HUD grid shares): `REPORTS_DUE` after its workflow run's end, never while the run is still
    running, from the job's own end (its start when the end is unknown) when nothing was heard of the run.
    Without `now`, or any time, they are taken as overdue, as `pr_jobs` takes them."""
    return reports_overdue(now, job.run_status, job.run_ended_at, job.completed_at or job.started_at)


def results_due_at(job: HeadJob) -> dt.datetime | None:
    """When the job's reports are due, as `results_overdue` counts; None while its run runs (they are
    due an hour after it ends) or when no time is known (they are taken as due)."""
    if run_running(job.run_status, job.run_ended_at):
        return None
    return reports_due_at(job.run_ended_at, job.completed_at or job.started_at)


def settle_runs(jobs: list[HeadJob], done_runs: dict[int, dt.datetime] | None = None) -> None:
    """Give the jobs of a run heard running, none of whose jobs on the head is pending any more, the
    latest end of those jobs as their run's end: the run's own `completed` delivery is late or lost (gap
    repair asks GitHub about unfinished jobs, not runs), and without it their reports would never be due.
    A job queued after the others ended (one that needs them) shows up within seconds, inside REPORTS_DUE.
    `done_runs`: the latest end per run of the head's finished jobs not in `jobs`."""
    pending = {j.run_id for j in jobs if j.state == "pending"}
    ends: dict[int, dt.datetime] = dict(done_runs or {})
    for j in jobs:
        if j.run_id is not None and j.completed_at is not None:
            ends[j.run_id] = max(ends.get(j.run_id, j.completed_at), j.completed_at)
    for j in jobs:
        if j.run_status not in (None, "completed") and j.run_ended_at is None and j.run_id not in pending:
            j.run_ended_at = ends.get(j.run_id)


def no_results(job: HeadJob) -> bool:
    """A test job none of whose test reports landed (so far): `pr_jobs`' infra reason, which
    `inputs.attach_results` gives a job read from the REST API too."""
    return job.failure_class == "infra" and job.infra_reason == NO_TEST_RESULTS


def awaiting_results(job: HeadJob, now: dt.datetime | None) -> bool:
    """True when the job has no test report yet, but may still get one (`results_overdue`)."""
    return no_results(job) and not results_overdue(job, now)


def infra_reason(job: HeadJob, now: dt.datetime | None = None) -> str | None:
    """The job's infrastructure reason (`INFRA_REASONS`' keys), or None. The one place a job's lack of
    test results is judged, for a job the lake knows and one read from the REST API alike: it counts
    once overdue, as a test job with no result died before its tests or outside them; before then
    the reports may still land, and `pr_jobs`' "no-test-results", given at once, is not taken."""
    if job.failure_class != "infra" or awaiting_results(job, now):
        return None
    return job.infra_reason or "infrastructure"


def infra_failure(job: HeadJob, never_flaky: bool, now: dt.datetime | None = None) -> bool:
    """True when the job is INFRA: it has an `infra_reason`, and, for a job never called flaky (a build,
    docs, backwards_compat), only when it was abandoned. PyTorch's Dr. CI sets those jobs aside before
    its infra checks: their log looking like infrastructure may be the code's (a build pulling an
    image the workflow names wrongly, a docs build running out of disk), and it cannot tell, so it
    asks main and the merge base only. An abandoned job never concluded, which upstream counts as
    pending, never as the pull request's, and it has no line to match main's failure with."""
    return infra_reason(job, now) is not None and (not never_flaky or abandoned(job))


def abandoned(job: HeadJob) -> bool:
    """No conclusion for 36 hours (`pr_jobs`' infra reason): nothing the job reported is the code's."""
    return job.failure_class == "infra" and job.infra_reason == "abandoned"


def _infra(job: HeadJob, now: dt.datetime | None = None) -> Verdict:
    reason = infra_reason(job, now) or "infrastructure"
    return Verdict(job, INFRA, INFRA_REASONS.get(reason, reason))


def generic_line(job: HeadJob) -> bool:
    return any(p.search(job.failure_line or "") for p in GENERIC_LINES)


def classify(job: HeadJob, trunk: Trunk, flaky: Flaky, unstable: dict[str, list] | None = None,
             labels=(), rules: tuple[FlakyRule, ...] = (), now: dt.datetime | None = None,
             others: Mapping[str, Sequence[OtherFailure]] | None = None) -> Verdict:
    """The class of one failing job (see the module docstring for the order). `labels`: the pull
    request's labels that may suppress a failure (`suppressing_labels`); `rules`: flaky-rules.json's
    (`flaky_rules.load_rules`); `now`: the instant judged at, whether a test job's missing reports are
    overdue (`infra_reason`; none: they are); `others`: other authors' pull requests' failures
    (`similar_on_other_pr`; none: not asked)."""
    suppressed = suppressed_by(job, labels)
    if suppressed:
        return Verdict(job, FLAKY, f"suppressed by {', '.join(suppressed)}")
    marked = _unstable(job, unstable or {})
    if marked is not None:
        return marked
    if excluded(job, EXCLUDED_FROM_BROKEN_TRUNK):
        return _infra(job) if abandoned(job) else _own(job, now)
    flakes = None if excluded(job, EXCLUDED_FROM_FLAKINESS) else flaky
    if infra_failure(job, flakes is None, now):
        return _infra(job, now)
    closed = reenabled_after_base(job, flakes) if flakes is not None else ()
    if closed:
        return Verdict(job, FLAKY, "disabled by " + ", ".join(f"#{i.number}" for i in closed)
                       + " until after the merge base: rebase", disabled=closed, rebase=True)
    disabled = disabled_by(job, flakes) if flakes is not None else ()
    if disabled:
        return Verdict(job, FLAKY, "disabled by " + ", ".join(f"#{i.number}" for i in disabled), disabled=disabled)
    seen = known_flaky(job, flakes) if flakes is not None else None
    if seen is not None:
        return Verdict(job, FLAKY, "the same failure on another commit", sighting=seen)
    main = trunk_failure(job, trunk, flakes)
    if main is not None:
        return Verdict(job, BROKEN_TRUNK, f"failed the same way on {trunk_place(main, trunk.branch)}", main=main)
    rule = flaky_rule(job, rules) if flakes is not None else None
    if rule is not None:
        return Verdict(job, FLAKY, f"matched **{rule.name}** rule in {rule.source}")
    similar = similar_on_main(job, trunk, flakes) if flakes is not None else None
    if similar is not None:
        return Verdict(job, FLAKY, f"failed the same way on {trunk_place(similar, trunk.branch)}", main=similar)
    # `others` is asked group by group: its truth would build every group's (`inputs.other_failures`)
    elsewhere = similar_on_other_pr(job, {} if others is None else others, flakes) if flakes is not None else None
    if elsewhere is not None:
        return Verdict(job, FLAKY, f"failed the same way on #{elsewhere.pr}", other=elsewhere)
    # upstream asks the jobs never called flaky at once, the others after its generic-line exception
    if not_at_merge_base(job, trunk) and (flakes is None or not generic_line(job)):
        return Verdict(job, UNCLASSIFIED, NOT_AT_MERGE_BASE)
    return _own(job, now)


def _own(job: HeadJob, now: dt.datetime | None = None) -> Verdict:
    # PyTorch's Dr. CI splits the pull request's own failures into cancelled ones and new ones; a new
    # one whose test reports may still land says so (`AWAITING_RESULTS`)
    if job.cancelled or cancelled_step(job):
        return Verdict(job, CANCELLED)
    return Verdict(job, NEW, AWAITING_RESULTS if awaiting_results(job, now) else "")


def same_failure_in_pr(job: HeadJob, other: HeadJob) -> bool:
    """True when two jobs of one head failed alike (upstream's isSameFailure without the name check):
    both cancelled or neither, and the same log line (its `message_key`), or, when neither has a
    line, the same failing tests with the same messages. Nothing is the same as nothing."""
    if job.cancelled != other.cancelled:
        return False
    mine, theirs = message_key(job.failure_line), message_key(other.failure_line)
    if mine or theirs:
        return mine == theirs
    pairs = {(t.key, t.message) for t in job.tests}
    return bool(pairs) and pairs == {(t.key, t.message) for t in other.tests}


def similar_in_pr(verdicts: list[Verdict], vouched: frozenset[int] = frozenset()) -> list[Verdict]:
    """Upstream's hasSimilarFailuresInSamePR: a NEW, CANCELLED or UNCLASSIFIED job failing as an UNSTABLE,
    FLAKY or BROKEN TRUNK job of the same head does (an unstable CUDA version's twin, a periodic job broken
    like its trunk job; a cancelled one only like a cancelled one: `same_failure_in_pr`) is UNSTABLE or
    FLAKY alike, citing that job; tried in that order, each
    verdict so given counting for the jobs after it. Never for a generic line (GENERIC_LINES), nor
    for the jobs never matched against main or never called flaky, which upstream leaves out.
    Unlike upstream, an UNSTABLE job is a source only when `vouched` holds its job id (`id(job)`):
    its failure, read without its mark, is unrelated too. A mark says the job may fail, not that this
    failure is not the pull request's: a test the pull request broke in an unstable job and in its
    twins would otherwise make every twin UNSTABLE."""
    out = list(verdicts)
    for i, v in enumerate(out):
        if v.cls not in (NEW, CANCELLED, UNCLASSIFIED) or generic_line(v.job) or excluded(v.job, EXCLUDED_FROM_BROKEN_TRUNK) \
                or excluded(v.job, EXCLUDED_FROM_FLAKINESS):
            continue
        for source, cls in SIMILAR_IN_PR:
            other = next((o for o in out if o.cls == source and o.job.state == "failure" and o.job is not v.job
                          and (source != UNSTABLE or o.related is not None or id(o.job) in vouched)
                          and same_failure_in_pr(v.job, o.job)), None)
            if other is not None:
                out[i] = Verdict(v.job, cls, f"the same failure as {full_name(other.job)}", related=other.job)
                break
    return out


def classify_head(jobs: list[HeadJob], trunk: Trunk, flaky: Flaky, unstable: dict[str, list] | None = None,
                  labels=(), rules: tuple[FlakyRule, ...] = (), now: dt.datetime | None = None,
                  others: Mapping[str, Sequence[OtherFailure]] | None = None) -> tuple[list[Verdict], int]:
    """(a verdict per failing job and per workflow run awaiting approval, the number of pending jobs)."""
    verdicts = [Verdict(j, AWAITING_APPROVAL) if j.state == "awaiting"
                else classify(j, trunk, flaky, unstable, labels, rules, now, others)
                for j in jobs if j.state in ("failure", "awaiting")]
    # the UNSTABLE jobs whose failure is unrelated without their mark too (`similar_in_pr`)
    vouched = frozenset(id(v.job) for v in verdicts if v.cls == UNSTABLE and v.related is None
                        and classify(v.job, trunk, flaky, None, labels, rules, now, others).cls
                        in (FLAKY, BROKEN_TRUNK, INFRA))
    pending = [j for j in jobs if j.state == "pending"]
    # a pending job an UNSTABLE mark covers is listed with them, as upstream does, and counted as pending only
    marked = [v for v in (_unstable(j, unstable or {}) for j in pending) if v is not None]
    return similar_in_pr(verdicts, vouched) + marked, len(pending)


def failing(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts of failures and awaiting runs: not those of pending jobs listed as UNSTABLE."""
    return [v for v in verdicts if v.job.state != "pending"]


def counts(verdicts: list[Verdict]) -> dict[str, int]:
    out = {c: 0 for c in CLASSES}
    for v in failing(verdicts):
        out[v.cls] += 1
    return out
