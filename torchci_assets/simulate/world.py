"""A day of PyTorch CI activity: main pushes, pull requests, scheduled runs, and every
run's jobs with their timelines, outcomes and webhook deliveries.

Each activity (a main commit, a PR, a cron firing) draws from its own seeded generator,
so a day is reproducible on its own. Activities run into the next day (a run queued at
23:50 completes after midnight), so day D is produced from the activities of D-1 and D
and keeps the deliveries received on D; an activity's events stop two days after its
day starts, which is the bound that makes that sufficient.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import random
from dataclasses import dataclass, field
from functools import lru_cache

from .catalog import (BUILD_MINUTES, DOCS_JOB, LABEL_JOB, LINT_JOBS, PR_WORKFLOWS,
                      PUSH_WORKFLOWS, QUEUE_MINUTES, SCHEDULED_WORKFLOWS, WORKFLOW_FILES, TestConfig,
                      build_job_name, build_suite, config_files, plan_shards, queue_family,
                      select_configs, skip_reason, test_job_name)
from .disabled import RERUN_HOUR, LifeRule, plant_lifecycle, rerun_job_name, rerun_reds
from .model import DAY_MS, EPOCH_DAY, Commit, Job, Outcome, RunAttempt, day_of, day_start_ms, iso_ms
from .payloads import (MERGEBOT, ZERO_SHA, commit_object, label_object, pull_request_payload,
                       push_payload)
from .planted import (BROKEN_MESSAGE, TIME_REGRESSION_MAX_DAYS, Breakage, Rule, TimeRegression, UnstableJob,
                      breakages_for_day, day_number, identity, overlaps, plant_rules, plant_unstable,
                      time_regressions_for_day)

PR_BREAKS_FLAKY_MESSAGE = "RuntimeError: expected the fused kernel's output to be contiguous, got strides (1, 64)"
JOB_BASE = 30_000_000_000
RUN_BASE = 15_000_000_000
MAX_RUNS_PER_DAY = 12_500
TEST_TIMEOUT_MS = 240 * 60_000
CONTRIBUTORS = (
    "ada-tensor", "bolt-kernels", "cora-grad", "dmitri-fx", "elin-compile", "fumi-dist",
    "gus-sparse", "hana-mps", "ivo-quant", "jun-inductor", "kai-export", "lena-nn",
    "milo-cuda", "nora-rocm", "otto-xpu", "pia-autograd", "quinn-onnx", "rui-jit",
    "sana-linalg", "tomas-profiler", "uma-dynamo", "vik-aten", "wen-fsdp", "xia-triton",
)
AREAS = ("inductor", "dynamo", "nn", "distributed", "export", "mps", "cuda", "aten", "fx", "quant")
VERBS = ("Fix", "Add", "Remove", "Support", "Refactor", "Speed up", "Skip", "Enable", "Revert")
THINGS = ("fused rms_norm decomposition", "symbolic shapes in cat", "NCCL timeout handling",
          "max-autotune cache key", "mps fallback for index_put", "bf16 accumulation in addmm",
          "guard on tensor subclass", "channels_last conv backward", "FSDP2 prefetch",
          "triton kernel naming", "flex attention block mask", "deterministic scatter_reduce")


@dataclass(frozen=True)
class Options:
    seed: int = 0
    commits_per_day: int = 24
    prs_per_day: int = 30
    configs: int = 12
    test_files: int = 40
    tests_per_file: int = 30
    test_reports: bool = True
    backends: int = 4
    duplicate_rate: float = 0.004
    out_of_order_rate: float = 0.01
    old_payload_rate: float = 0.015
    torn_lines_per_day: int = 1  # a collector crash mid-write: a cut line, then the delivery again
    time_regression_rate: float = 0.25  # chance that a day's commits make one test file slower
    platform_failures: int | None = None  # tests failing on one platform; None: 0.6% of the tests, at least 2
    pr_breaks_flaky_rate: float = 0.04  # chance that a PR breaks a test flaky elsewhere (another message)
    unstable_jobs: int = 2  # open UNSTABLE issues on PR jobs: a test config, then a whole build environment
    # the first day of the disabled tests' planted life and of the daily rerun_disabled_tests
    # jobs (disabled.py); "" for neither
    lifecycle_from: str = ""


@dataclass(slots=True)
class Delivery:
    received: int
    seq: int
    event: str
    delivery_id: str
    obj: object  # Job, RunAttempt or a ready payload dict
    action: str
    old: str = ""
    original: int = 0  # for a redelivery: when the first copy was received


@dataclass
class Activity:
    """Everything one trigger produced; `deliveries` are not yet filtered by day."""

    day: dt.date
    deliveries: list[Delivery] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    runs: list[RunAttempt] = field(default_factory=list)
    pushes: list[tuple[Commit, str, int]] = field(default_factory=list)  # (commit, delivery id, received)
    truth: list[tuple[str, int, dict]] = field(default_factory=list)  # (kind, time ms, record)
    out_of_order_jobs: list[tuple[int, int]] = field(default_factory=list)  # (job id, completed recv)


def commit_sha(seed: int, index: int) -> str:
    return hashlib.sha1(f"{seed}|commit|{index}".encode()).hexdigest()


def _uuid(rng: random.Random) -> str:
    return (f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-11f0-"
            f"{rng.getrandbits(16) | 0x8000:04x}-{rng.getrandbits(48):012x}")


def _lognormal_ms(rng: random.Random, median_min: float, sigma: float) -> int:
    return int(median_min * 60_000 * math.exp(rng.gauss(0.0, sigma)))


def check_counts(opts: Options) -> None:
    """A count the simulator cannot plant is refused by its option's name, before anything is
    written (a negative one wrote an archive, or failed in `random.sample`)."""
    if opts.commits_per_day < 1 or opts.prs_per_day < 0:
        raise ValueError("--commits-per-day must be >= 1 and --prs-per-day >= 0")
    for option, value, least in (("--test-files", opts.test_files, 1), ("--tests-per-file", opts.tests_per_file, 1),
                                 ("--torn-lines-per-day", opts.torn_lines_per_day, 0),
                                 ("--platform-failures", opts.platform_failures, 0)):
        if value is not None and value < least:
            raise ValueError(f"{option} must be at least {least}, got {value}")


class World:
    def __init__(self, opts: Options):
        check_counts(opts)
        self.opts = opts
        self.seed = opts.seed
        self.configs = select_configs(opts.configs)
        self.suite = build_suite(opts.seed, opts.test_files, opts.tests_per_file)
        self.shards = {cfg: plan_shards(config_files(cfg, self.suite), cfg) for cfg in self.configs}
        self.rules = plant_rules(opts.seed, self.suite, self.configs, opts.platform_failures)
        self.planted = frozenset(r.template for r in self.rules)
        self.unstable = plant_unstable(opts.seed, self.configs, opts.unstable_jobs)
        self.life: tuple[LifeRule, ...] = ()
        if opts.lifecycle_from:
            self.life = plant_lifecycle(opts.seed, self.suite, self.configs,
                                        dt.date.fromisoformat(opts.lifecycle_from), self.planted)
            self.planted |= frozenset(r.template for r in self.life)
        self.life_by_file: dict[str, list[LifeRule]] = {}
        for r in self.life:
            self.life_by_file.setdefault(r.template.file, []).append(r)
        self.rules_by_file: dict[str, list[Rule]] = {}
        for r in self.rules:
            self.rules_by_file.setdefault(r.template.file, []).append(r)
        self.workflows: dict[str, list[TestConfig]] = {}
        for cfg in self.configs:
            self.workflows.setdefault(cfg.workflow, []).append(cfg)
        self.workflow_ids = {w: 5_000_000 + 1_000 * i for i, w in enumerate(WORKFLOW_FILES)}
        self.pr_stride = max(60, opts.prs_per_day)

    # ------------------------------------------------------------------ schedule

    @lru_cache(maxsize=8)
    def commits(self, day: dt.date) -> tuple[Commit, ...]:
        rng = random.Random(f"{self.seed}|commits|{day.isoformat()}")
        n = self.opts.commits_per_day
        # merges follow working hours across US/EU/Asia: heaviest 14:00-02:00 UTC
        weights = [1.0 + 2.0 * (h >= 14 or h < 2) + 0.8 * (7 <= h < 14) for h in range(24)]
        start = day_start_ms(day)
        times = sorted(start + h * 3_600_000 + rng.randrange(3_600_000)
                       for h in rng.choices(range(24), weights, k=n))
        base = day_number(day) * n
        out = []
        for i, t in enumerate(times):
            idx = base + i
            pr = 100_000 + day_number(day) * self.pr_stride + rng.randrange(self.pr_stride)
            msg = f"[{rng.choice(AREAS)}] {rng.choice(VERBS)} {rng.choice(THINGS)} (#{pr})"
            out.append(Commit(idx, commit_sha(self.seed, idx), commit_sha(self.seed, idx - 1), t,
                              rng.choice(CONTRIBUTORS), msg))
        return tuple(out)

    def head_at(self, t: int) -> Commit:
        """The main commit that was the branch head at time t."""
        day = day_of(t)
        for c in reversed(self.commits(day)):
            if c.time <= t:
                return c
        return self.commits(day - dt.timedelta(days=1))[-1]

    @lru_cache(maxsize=8)
    def breakages(self, day: dt.date) -> tuple[Breakage, ...]:
        out: list[Breakage] = []
        for back in (1, 0):
            d = day - dt.timedelta(days=back)
            out += breakages_for_day(self.seed, d, self.opts.commits_per_day, self.suite, self.configs,
                                     self.planted)
        return tuple(out)

    @lru_cache(maxsize=32)
    def _time_regression_draw(self, day: dt.date) -> tuple[TimeRegression, ...]:
        return tuple(time_regressions_for_day(self.seed, day, self.opts.commits_per_day, self.suite, self.configs,
                                              self.opts.time_regression_rate))

    @lru_cache(maxsize=16)
    def time_regressions(self, day: dt.date) -> tuple[TimeRegression, ...]:
        """Those that can be active on `day`'s commits: planted on it or the days before it.

        A day's draw is dropped when it overlaps a draw of the days before it (same file and
        platform at the same time): compounded factors would make a truth nobody can score.
        Draws, not planted regressions, are compared, so each day is decided by a bounded
        number of earlier days' seeds and never by what was generated before it."""
        out: list[TimeRegression] = []
        for back in range(TIME_REGRESSION_MAX_DAYS, -1, -1):
            d = day - dt.timedelta(days=back)
            earlier = [r for k in range(1, TIME_REGRESSION_MAX_DAYS + 1)
                       for r in self._time_regression_draw(d - dt.timedelta(days=k))]
            out += [r for r in self._time_regression_draw(d) if not any(overlaps(r, e) for e in earlier)]
        return tuple(out)

    def slow_factors(self, cfg: TestConfig, code_index: int) -> dict[str, float]:
        """File path -> time factor of the planted regressions in the code of main commit `code_index`."""
        if code_index < 0:
            return {}
        day = EPOCH_DAY + dt.timedelta(days=code_index // self.opts.commits_per_day)
        out: dict[str, float] = {}
        for r in self.time_regressions(day):
            if r.first <= code_index < r.fixed and (r.platforms is None or cfg.platform in r.platforms):
                out[r.file] = out.get(r.file, 1.0) * r.factor
        return out

    # ------------------------------------------------------------------ a day

    def activities(self, day: dt.date) -> list[Activity]:
        """All activities triggered on `day`, in a fixed order (run slots follow it)."""
        out: list[Activity] = []
        slot = [0]

        def next_slot() -> int:
            s = slot[0]
            slot[0] += 1
            if s >= MAX_RUNS_PER_DAY:
                raise ValueError("too many workflow runs for one day; lower --commits-per-day/--prs-per-day")
            return s

        for c in self.commits(day):
            out.append(self._main_push(day, c, next_slot))
        for wf, hours in SCHEDULED_WORKFLOWS.items():
            if wf in self.workflows:
                for h in hours:
                    out.append(self._scheduled(day, wf, h, next_slot))
        out.append(self._viable_strict(day))
        for i in range(self.opts.prs_per_day):
            out.append(self._pull_request(day, i, next_slot))
        if self.opts.lifecycle_from and day >= dt.date.fromisoformat(self.opts.lifecycle_from):
            out.append(self._rerun_disabled(day, next_slot))
        return out

    # ------------------------------------------------------------------ activities

    def _main_push(self, day, c: Commit, next_slot) -> Activity:
        rng = random.Random(f"{self.seed}|push|{c.sha}")
        act = Activity(day)
        commit = commit_object(c.sha, c.message, c.time, c.author)
        recv = c.time + rng.randint(200, 3000)
        did = _uuid(rng)
        payload = push_payload("refs/heads/main", c.parent, c.sha, [commit], MERGEBOT)
        self._deliver(act, rng, recv, "push", did, payload, "")
        act.pushes.append((c, did, recv))
        head = _main_head(c)
        broken = [b for b in self.breakages(day) if b.first <= c.index < b.fixed]
        bad = [(t, "broken", BROKEN_MESSAGE) for b in broken for t in b.templates]
        for wf in ("Lint",) + PUSH_WORKFLOWS:
            if wf == "Lint" or wf in self.workflows:
                self._run(act, rng, wf, "push", c.sha, "main", head, MERGEBOT, c.message.split("\n")[0], (),
                          c.time + rng.randint(2_000, 20_000), next_slot(), bad, on_main=True, code=c.index)
        act.truth.append(("main_commits", c.time, _commit_truth(c, recv, act.jobs, broken)))
        return act

    def _scheduled(self, day, wf: str, hour: int, next_slot) -> Activity:
        t = day_start_ms(day) + hour * 3_600_000 + 29 * 60_000
        rng = random.Random(f"{self.seed}|cron|{wf}|{t}")
        act = Activity(day)
        c = self.head_at(t)
        head = _main_head(c)
        bad = [(tt, "broken", BROKEN_MESSAGE) for b in self.breakages(day_of(c.time))
               if b.first <= c.index < b.fixed for tt in b.templates]
        self._run(act, rng, wf, "schedule", c.sha, "main", head, MERGEBOT, wf, (),
                  t + rng.randint(30_000, 600_000), next_slot(), bad, on_main=True, code=c.index)
        return act

    def disabled_rates(self, day: dt.date, cfg: TestConfig) -> dict:
        """The tests disabled on `day` (see disabled.py) that `cfg` runs, with their failure rate there."""
        out = {}
        for r in self.rules:
            if r.platforms is None or cfg.platform in r.platforms:
                out[r.template] = r.rate
        for r in self.life:
            if r.start is None or day > r.start:  # a burst's tests are disabled the day after it begins
                out[r.template] = r.rate_on(day)
        return out

    def _rerun_disabled(self, day, next_slot) -> Activity:
        """The day's scheduled rerun_disabled_tests run: one job per test config, over the files
        holding a disabled test it runs."""
        t = day_start_ms(day) + RERUN_HOUR * 3_600_000 + 29 * 60_000
        rng = random.Random(f"{self.seed}|rerun-disabled|{day.isoformat()}")
        act = Activity(day)
        c = self.head_at(t)
        slot, dn = next_slot(), day_number(day)
        run = RunAttempt(RUN_BASE + dn * 20_000 + slot, 1, "periodic", self.workflow_ids["periodic"],
                         (dn * 97 + slot) % 1_000_000, "schedule", c.sha, "main", _main_head(c), MERGEBOT,
                         "periodic", (), t, code_index=c.index)
        for i, cfg in enumerate(self.configs):
            rates = self.disabled_rates(day, cfg)
            files = tuple(f for f in config_files(cfg, self.suite) if any(x.file == f.path for x in rates))
            if not files:
                continue
            job = self._job(rng, run, JOB_BASE + dn * 5_000_000 + slot * 400 + i, rerun_job_name(cfg), "test",
                            [cfg.runner], cfg, t + rng.randint(2_000, 60_000), QUEUE_MINUTES[queue_family(cfg)],
                            20.0, 0.0)
            job.shard, job.files = 1, files
            paths = {f.path for f in files}
            job.reruns = rerun_reds(random.Random(f"{self.seed}|reruns|{job.id}"),
                                    {x: r for x, r in rates.items() if x.file in paths}, cfg)
            act.jobs.append(job)
            self._job_deliveries(act, rng, job)
        if not act.jobs:
            return act
        run.started = min(j.started for j in act.jobs)
        run.completed = max(j.completed for j in act.jobs) + rng.randint(1_000, 5_000)
        act.runs.append(run)
        for action, at in (("requested", run.created), ("in_progress", run.started), ("completed", run.completed)):
            self._deliver(act, rng, at + rng.randint(100, 2500), "workflow_run", _uuid(rng), run, action,
                          path=WORKFLOW_FILES["periodic"])
        return act

    def _viable_target(self, t: int) -> Commit:
        """viable/strict trails main by the commits whose trunk signal is not in yet."""
        head = self.head_at(t)
        lag = random.Random(f"{self.seed}|viable|{t}").randint(3, 10)
        idx = head.index - lag
        return Commit(idx, commit_sha(self.seed, idx), commit_sha(self.seed, idx - 1), t, MERGEBOT, "")

    def _viable_strict(self, day) -> Activity:
        act = Activity(day)
        rng = random.Random(f"{self.seed}|viable-strict|{day.isoformat()}")
        start = day_start_ms(day)
        times = [start + h * 3_600_000 + 7 * 60_000 for h in range(1, 24, 3)]
        prev = self._viable_target(times[0] - 3 * 3_600_000)
        for t in times:
            target = self._viable_target(t)
            if target.index <= prev.index:
                continue
            payload = push_payload("refs/heads/viable/strict", prev.sha, target.sha, [], MERGEBOT)
            self._deliver(act, rng, t + rng.randint(200, 2000), "push", _uuid(rng), payload, "")
            prev = target
        return act

    def _pull_request(self, day, i: int, next_slot) -> Activity:
        number = 100_000 + day_number(day) * self.pr_stride + i
        rng = random.Random(f"{self.seed}|pr|{number}")
        act = Activity(day)
        author = rng.choice(CONTRIBUTORS)
        branch = f"gh/{author}/{number % 997 + 1}/head"
        ref = f"refs/heads/{branch}"
        start = day_start_ms(day)
        t_open = start + rng.randrange(DAY_MS - 3_600_000)
        base = self.head_at(t_open)
        title = f"[{rng.choice(AREAS)}] {rng.choice(VERBS)} {rng.choice(THINGS)}"
        labels: list[str] = ["open source"] if rng.random() < 0.3 else []
        bad = self._breaking_test(act, rng, number, t_open)
        bad += self._flaky_test_broken_by_pr(number, t_open, bad)
        # a PR branched off a broken main commit fails the same way (Dr. CI's BROKEN TRUNK)
        bad += [(tt, "broken", BROKEN_MESSAGE) for b in self.breakages(day_of(base.time))
                if b.first <= base.index < b.fixed for tt in b.templates]
        # target determination: PR jobs run only the files relevant to the change
        paths = sorted(f.path for f in self.suite)
        td = frozenset(rng.sample(paths, max(1, len(paths) // 5)) + [t.file for t, _, _ in bad])
        shas = []
        before = ZERO_SHA
        t = t_open
        n_sync = rng.choices((0, 1, 2, 3), weights=(0.45, 0.3, 0.15, 0.1))[0]
        for k in range(n_sync + 1):
            sha = hashlib.sha1(f"{self.seed}|pr|{number}|{k}".encode()).hexdigest()
            shas.append(sha)
            commit = commit_object(sha, title, t - 60_000, author)
            created = k == 0
            forced = not created and rng.random() < 0.05
            push = push_payload(ref, before, sha, [commit], author, forced=forced, created=created)
            self._deliver(act, rng, t - 30_000 + rng.randint(0, 5000), "push", _uuid(rng), push, "")
            action = "opened" if created else "synchronize"
            extra = None if created else {"before": before, "after": sha}
            payload = pull_request_payload(action, number, author, branch, sha, base.sha, title, labels,
                                           t_open, t, extra=extra)
            self._deliver(act, rng, t + rng.randint(200, 3000), "pull_request", _uuid(rng), payload, "")
            head = {"id": sha, "tree_id": sha[::-1], "message": title,
                    "timestamp": commit["timestamp"], "base_sha": base.sha,
                    "author": {"name": author, "email": f"{author}@users.noreply.github.com"},
                    "committer": {"name": author, "email": f"{author}@users.noreply.github.com"}}
            for wf in ("Lint",) + PR_WORKFLOWS:
                if wf == "Lint" or wf in self.workflows:
                    self._run(act, rng, wf, "pull_request", sha, branch, head, author, title, (number,),
                              t + rng.randint(3_000, 30_000), next_slot(), bad, on_main=False, td=td,
                              code=base.index)
            if k == 0:
                labels = self._label(act, rng, number, author, branch, sha, base.sha, title, labels, t_open, t)
            before = sha
            t += rng.randint(20 * 60_000, 2 * 3_600_000)
        t_close = t + rng.randint(10 * 60_000, 6 * 3_600_000)
        merged = rng.random() < 0.65
        payload = pull_request_payload("closed", number, author, branch, shas[-1], base.sha, title, labels,
                                       t_open, t_close, state="closed", merged=merged,
                                       actor=MERGEBOT if merged else author)
        self._deliver(act, rng, t_close + rng.randint(200, 2000), "pull_request", _uuid(rng), payload, "")
        if rng.random() < 0.6:
            push = push_payload(ref, shas[-1], ZERO_SHA, [], author, deleted=True)
            self._deliver(act, rng, t_close + rng.randint(60_000, 300_000), "push", _uuid(rng), push, "")
        return act

    def _breaking_test(self, act: Activity, rng: random.Random, number: int, t_open: int) -> list:
        """Now and then a PR that breaks a test: consistent failures in every run of this PR."""
        if rng.random() >= 0.12:
            return []
        cands = [t for cfg in self.workflows.get("pull", []) for f in config_files(cfg, self.suite)
                 for t in f.tests if not t.device_generic and not t.skip and t not in self.planted]
        if not cands:
            return []
        t = rng.choice(sorted(set(cands), key=lambda x: (x.file, x.class_base, x.name_base)))
        act.truth.append(("pr_caused_failures", t_open, {"pr": number, **identity(t)}))
        return [(t, "pr", "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 64")]

    def _label(self, act: Activity, rng: random.Random, number: int, author: str, branch: str, sha: str,
               base_sha: str, title: str, labels: list[str], t_open: int, t: int) -> list[str]:
        """The labels a new PR gets from the bot and its author, each a `labeled` delivery."""
        for name, p, who in (("ciflow/trunk", 0.4, "pytorch-bot[bot]"),
                             ("topic: not user facing", 0.3, author),
                             (f"release notes: {rng.choice(AREAS)}", 0.3, author)):
            if rng.random() < p:
                labels = labels + [name]
                tl = t + rng.randint(60_000, 1_800_000)
                payload = pull_request_payload("labeled", number, author, branch, sha, base_sha, title,
                                               labels, t_open, tl, actor=who, extra={"label": label_object(name)})
                self._deliver(act, rng, tl + rng.randint(200, 2000), "pull_request", _uuid(rng), payload, "")
        return labels

    def _flaky_test_broken_by_pr(self, number: int, t_open: int, bad: list) -> list:
        """Sometimes a PR breaks a test that is flaky elsewhere, with a message of its own: a new
        failure that must never be called flaky. Drawn from its own generator, so the other
        draws of the PR (and every figure built on them) stay as they were."""
        rng = random.Random(f"{self.seed}|pr-breaks-flaky|{number}")
        flaky = [r for r in self.rules if r.kind == "flaky" and r.platforms is None and not r.template.skip]
        if bad or not flaky or rng.random() >= self.opts.pr_breaks_flaky_rate:
            return []
        rule = rng.choice(sorted(flaky, key=lambda r: (r.template.file, r.template.class_base, r.template.name_base)))
        # the message names the PR's change, so two such PRs do not fail alike
        change = "".join(chr(97 + int(x, 16)) for x in hashlib.sha1(str(number).encode()).hexdigest()[:8])
        return [(rule.template, "pr", f"{PR_BREAKS_FLAKY_MESSAGE} after change {change}")]

    # ------------------------------------------------------------------ runs and jobs

    def _run(self, act: Activity, rng: random.Random, wf: str, event: str, sha: str, branch: str,
             head: dict, actor: str, title: str, prs: tuple[int, ...], t0: int, slot: int,
             bad: list, on_main: bool, td: frozenset[str] | None = None, code: int = -1) -> None:
        """One workflow run; `td` is target determination's file selection on PRs (None = all);
        `code` the index of the main commit whose code it tests."""
        dn = day_number(act.day)
        run_id = RUN_BASE + dn * 20_000 + slot
        wid = self.workflow_ids[wf]
        run = RunAttempt(run_id, 1, wf, wid, (dn * 97 + slot) % 1_000_000, event, sha, branch, head,
                         actor, title, prs, t0, code_index=code)
        specs = self._specs(wf)
        jobs = self._attempt(act, rng, run, specs, t0, slot, bad, on_main, td)
        if run.conclusion == "failure" and rng.random() < (0.35 if on_main else 0.2):
            t1 = run.completed + rng.randint(5 * 60_000, 60 * 60_000)
            run2 = RunAttempt(run_id, 2, wf, wid, run.run_number, event, sha, branch, head, actor, title,
                              prs, t1, code_index=code)
            rerun = self._rerun_specs(jobs)
            jobs2 = self._attempt(act, rng, run2, rerun, t1, slot, bad, on_main, td)
            act.truth.append(("reattempted_runs", t1, {
                "run_id": run_id, "workflow": wf, "head_sha": sha, "run_attempt": 2,
                "failed_job_ids": [j.id for j in jobs if j.conclusion in ("failure", "cancelled")],
                "rerun_job_ids": [j.id for j in jobs2]}))

    def _specs(self, wf: str) -> list[tuple]:
        if wf == "Lint":
            return [("lint", name) for name in LINT_JOBS]
        specs: list[tuple] = [("label",)]
        seen = []
        for cfg in self.workflows[wf]:
            if cfg.build_env not in seen:
                seen.append(cfg.build_env)
                specs.append(("build", cfg))
        for cfg in self.workflows[wf]:
            specs += [("test", cfg, s + 1) for s in range(cfg.num_shards)]
        if wf == "trunk":
            specs.append(("docs",))
        return specs

    @staticmethod
    def _rerun_specs(jobs: list[Job]) -> list[tuple]:
        """GitHub's "re-run failed jobs": failed ones, plus tests skipped behind a failed build."""
        failed_builds = {j.cfg.build_env for j in jobs if j.kind == "build" and j.conclusion == "failure"}
        specs = []
        for j in jobs:
            if j.kind == "lint" and j.conclusion == "failure":
                specs.append(("lint", j.name))
            elif j.kind == "build" and j.conclusion == "failure":
                specs.append(("build", j.cfg))
            elif j.kind == "test" and (j.conclusion in ("failure", "cancelled") or
                                       j.cfg.build_env in failed_builds):
                specs.append(("test", j.cfg, j.shard))
        return specs

    def _attempt(self, act: Activity, rng: random.Random, run: RunAttempt, specs: list[tuple], t0: int,
                 slot: int, bad: list, on_main: bool, td: frozenset[str] | None) -> list[Job]:
        base_id = JOB_BASE + day_number(act.day) * 5_000_000 + slot * 400 + (run.attempt - 1) * 200
        if len(specs) > 200:
            raise ValueError("too many jobs in one workflow run")
        jobs: list[Job] = []
        ready = t0 + 2_000
        builds: dict[str, Job] = {}
        for j, spec in enumerate(specs):
            kind = spec[0]
            jid = base_id + j
            if kind == "label":
                job = self._job(rng, run, jid, LABEL_JOB, "label", ["ubuntu-latest"], None,
                                t0 + rng.randint(500, 3000), 0.15, 0.5, 0.0)
                ready = job.completed + 1_000
            elif kind == "lint":
                job = self._job(rng, run, jid, spec[1], "lint", ["linux.2xlarge"], None,
                                t0 + rng.randint(500, 3000), 0.5, 8.0, 0.005 if on_main else 0.06)
            elif kind == "build":
                cfg = spec[1]
                job = self._job(rng, run, jid, build_job_name(cfg.build_env), "build", [cfg.build_runner], cfg,
                                ready + rng.randint(200, 2000), 1.0, BUILD_MINUTES[cfg.platform],
                                0.006 if on_main else 0.04)
                builds[cfg.build_env] = job
            elif kind == "docs":
                job = self._job(rng, run, jid, DOCS_JOB, "docs", ["linux.2xlarge"], None,
                                ready + rng.randint(200, 2000), 1.0, 6.0, 0.0)
                job.waited = rng.randint(60_000, 30 * 60_000)
                job.started += job.waited
                job.completed += job.waited
            else:
                cfg, shard = spec[1], spec[2]
                build = builds.get(cfg.build_env)
                job = self._test_job(rng, run, jid, cfg, shard, build, ready, bad, td)
            jobs.append(job)
        for job in jobs:
            self._job_deliveries(act, rng, job)
            if not on_main and job.conclusion in ("failure", "cancelled"):
                act.truth.append(("pr_failed_jobs", job.completed, _pr_job_truth(run, job, self.unstable)))
            if job.infra:
                act.truth.append(("infra_failed_jobs", job.completed, {
                    "job_id": job.id, "run_id": run.run_id, "run_attempt": run.attempt, "name": job.name,
                    "kind": job.infra, "conclusion": job.conclusion, "report": _report_state(job)}))
        run.started = min(j.started for j in jobs)
        run.completed = max(j.completed for j in jobs) + rng.randint(1_000, 5_000)
        concl = {j.conclusion for j in jobs}
        run.conclusion = "failure" if "failure" in concl else "cancelled" if "cancelled" in concl else "success"
        act.runs.append(run)
        act.jobs += jobs
        path = WORKFLOW_FILES[run.workflow]
        for action, t in (("requested", run.created), ("in_progress", run.started), ("completed", run.completed)):
            self._deliver(act, rng, t + rng.randint(100, 2500), "workflow_run", _uuid(rng), run, action,
                          path=path)
        return jobs

    def _runner(self, rng: random.Random, label: str) -> tuple[str, int, str]:
        if label == "ubuntu-latest":
            n = rng.randint(1, 500)
            return f"GitHub Actions {n}", n, "GitHub Actions"
        if label.startswith("macos"):
            n = rng.randint(1, 60)
            return f"{label}-{n:03d}", 10_000 + n, "Default"
        if "rocm" in label:
            n = rng.randint(1, 400)
            return f"linux-mi300-gpu-{n:03d}-{rng.getrandbits(20):05x}", 20_000 + n, "Default"
        if "idc" in label:
            n = rng.randint(1, 80)
            return f"idc-xpu-runner-{n:02d}", 30_000 + n, "Default"
        n = rng.getrandbits(60)
        return f"i-0{n:016x}", 1_000_000 + n % 50_000_000, "Default"

    def _job(self, rng, run, jid, name, kind, labels, cfg, created, queue_min, run_min, fail_p) -> Job:
        queue = _lognormal_ms(rng, queue_min, 0.7)
        dur = max(5_000, _lognormal_ms(rng, run_min, 0.25))
        rn, rid, group = self._runner(rng, labels[0])
        concl = "failure" if rng.random() < fail_p else "success"
        return Job(jid, run, name, kind, labels, rn, rid, group, created, created + queue,
                   created + queue + dur, concl, cfg)

    def _test_job(self, rng, run, jid, cfg: TestConfig, shard: int, build: Job | None, ready: int,
                  bad: list, td: frozenset[str] | None) -> Job:
        name = test_job_name(cfg, shard)
        labels = [cfg.runner]
        files = tuple(f for f in self.shards[cfg][shard - 1] if td is None or f.path in td)
        if build is not None and build.conclusion != "success":
            t = build.completed + rng.randint(1_000, 3_000)
            return Job(jid, run, name, "test", labels, "", 0, "", t, t, t, "skipped", cfg, shard, files,
                       queued_event=False)
        created = (build.completed if build else ready) + rng.randint(1_000, 3_000)
        queue = _lognormal_ms(rng, QUEUE_MINUTES[queue_family(cfg)], 0.9)
        setup = _lognormal_ms(rng, 12.0 if cfg.platform == "win" else 6.0, 0.2)
        factors = self.slow_factors(cfg, run.code_index)
        slow = {f.path: factors[f.path] for f in files if f.path in factors}
        tests_ms = int(sum(f.seconds * slow.get(f.path, 1.0) for f in files) * cfg.speed * 1000
                       * math.exp(rng.gauss(0.0, 0.1)))
        rn, rid, group = self._runner(rng, cfg.runner)
        job = Job(jid, run, name, "test", labels, rn, rid, group, created, created + queue, 0, "success",
                  cfg, shard, files, slow=slow)
        duration = setup + tests_ms + rng.randint(30_000, 120_000)
        job.outcomes = self._outcomes(rng, cfg, files, bad, day_of(run.created))
        if any(o.tries[-1] for o in job.outcomes.values()):
            job.conclusion = "failure"
        r = rng.random()
        if r < 0.012:
            job.cut = rng.uniform(0.0, 0.9)
            if cfg.device == "cuda" and r < 0.006:
                job.infra, job.conclusion = "cuda_illegal_memory_access", "failure"
            elif r < 0.009:
                job.infra, job.conclusion = "runner_lost", "failure"
                duration = int(setup + tests_ms * job.cut)
            else:
                job.infra, job.conclusion = "timeout", "cancelled"
                duration = TEST_TIMEOUT_MS
        if duration > TEST_TIMEOUT_MS:
            job.infra, job.conclusion, job.cut = "timeout", "cancelled", (TEST_TIMEOUT_MS - setup) / max(1, tests_ms)
            duration = TEST_TIMEOUT_MS
        job.completed = job.started + duration
        return job

    def _outcomes(self, rng, cfg: TestConfig, files, bad: list, day: dt.date) -> dict:
        out = {}
        paths = {f.path for f in files}
        for f in files:
            rules = [(r.template, r.rate, r.kind, r.message) for r in self.rules_by_file.get(f.path, ())
                     if r.platforms is None or cfg.platform in r.platforms]
            rules += [(r.template, r.rate_on(day), "flaky", r.message) for r in self.life_by_file.get(f.path, ())]
            for t, rate, kind, message in rules:
                if skip_reason(t, cfg):
                    continue
                tries = []
                for _ in range(3):
                    failed = rng.random() < rate
                    tries.append(failed)
                    if not failed:
                        break
                if tries[0]:
                    out[t] = Outcome(t, tries, kind, message)
        for t, kind, msg in bad:
            if t.file in paths and not skip_reason(t, cfg):
                out[t] = Outcome(t, [True, True, True], kind, msg)
        return out

    # ------------------------------------------------------------------ deliveries

    def _deliver(self, act: Activity, rng: random.Random, received: int, event: str, did: str, obj,
                 action: str, old: str = "", path: str = "") -> None:
        if event == "workflow_run":
            obj = (obj, path)
        d = Delivery(received, 0, event, did, obj, action, old)
        act.deliveries.append(d)
        if rng.random() < self.opts.duplicate_rate:
            delay = rng.randint(1_000, 60_000) if rng.random() < 0.7 else rng.randint(3_600_000, 6 * 3_600_000)
            act.deliveries.append(Delivery(received + delay, 0, event, did, obj, action, old, original=received))

    def _job_deliveries(self, act: Activity, rng: random.Random, job: Job) -> None:
        def old() -> str:
            r = rng.random()
            p = self.opts.old_payload_rate
            return "meta" if r < p * 0.6 else "steps" if r < p else ""

        done_recv = job.completed + rng.randint(100, 2500)
        if job.queued_event:
            self._deliver(act, rng, job.created + rng.randint(100, 2500), "workflow_job", _uuid(rng), job,
                          "queued", old())
            if job.waited:
                self._deliver(act, rng, job.created + rng.randint(3_000, 9_000), "workflow_job", _uuid(rng), job,
                              "waiting", old())
            start_recv = job.started + rng.randint(100, 2500)
            if job.kind in ("test", "build") and rng.random() < self.opts.out_of_order_rate:
                start_recv = done_recv + rng.randint(200, 20_000)
                act.out_of_order_jobs.append((job.id, start_recv))
            self._deliver(act, rng, start_recv, "workflow_job", _uuid(rng), job, "in_progress", old())
        self._deliver(act, rng, done_recv, "workflow_job", _uuid(rng), job, "completed", old())


def _main_head(c: Commit) -> dict:
    """The head_commit of a run on main commit `c`."""
    return {"id": c.sha, "tree_id": c.sha[::-1], "message": c.message,
            "timestamp": commit_object(c.sha, c.message, c.time, c.author)["timestamp"],
            "author": {"name": c.author, "email": f"{c.author}@users.noreply.github.com"},
            "committer": {"name": "PyTorch MergeBot", "email": "pytorchmergebot@users.noreply.github.com"}}


def _commit_truth(c: Commit, pushed: int, jobs: list[Job], broken: list[Breakage]) -> dict:
    """What happened to a main commit's push-triggered jobs: every job that failed in some attempt,
    with each attempt's conclusion, and the planted breakages it carries. Enough to tell, without
    the lake, whether a commit's failures never recovered (red) or all recovered on rerun (flaky)."""
    attempts: dict[tuple[str, str], dict[int, str]] = {}
    for j in jobs:
        attempts.setdefault((j.run.workflow, j.name), {})[j.run.attempt] = j.conclusion
    failed = [{"workflow": wf, "name": name, "conclusions": [by[a] for a in sorted(by)]}
              for (wf, name), by in sorted(attempts.items())
              if any(v in ("failure", "cancelled") for v in by.values())]
    return {"sha": c.sha, "index": c.index, "pushed_at": iso_ms(pushed),
            "last_completed_at": iso_ms(max(j.completed for j in jobs)),
            "broken_tests": [identity(t) for b in broken for t in b.templates],
            "failed_jobs": failed}


def _pr_job_truth(run: RunAttempt, job: Job, unstable: tuple[UnstableJob, ...] = ()) -> dict:
    """What a failed PR job's failure is, as Dr. CI should class it (`class`): UNSTABLE for a job
    marked by an open issue, whatever broke it (PyTorch's Dr. CI puts that first), else its `cause`:
    the PR's own (NEW: a build or lint failure, or a test the PR broke), the infrastructure's, the
    broken main's it branched from, or a flaky test's (one planted flaky, or failing on one platform
    at a rate below 1: both strike intermittently, on main too, and rebasing does not make them go
    away). `cause` is kept for marked jobs too, so a scorer can check the classes beneath the marks;
    `flaky_elsewhere` marks a PR-broken test that is flaky on other commits; `merge_base` is the main
    commit the PR branched from (a scorer cannot expect a verdict about main before the archive)."""
    failing = [o for o in job.outcomes.values() if o.tries[-1]]
    kinds = {o.kind for o in failing}
    if job.infra:
        cause = "INFRA"
    elif job.kind != "test" or "pr" in kinds:
        cause = "NEW"
    elif "broken" in kinds:
        cause = "BROKEN TRUNK"
    elif kinds:
        cause = "FLAKY"
    else:
        cause = "NEW"
    marked = any(u.marks(run.workflow, job.cfg, job.kind) for u in unstable)
    return {"pr": run.pr_numbers[0] if run.pr_numbers else None, "head_sha": run.head_sha,
            "merge_base": run.head_commit.get("base_sha"), "job_id": job.id,
            "run_id": run.run_id, "run_attempt": run.attempt, "workflow": run.workflow, "name": job.name,
            "class": "UNSTABLE" if marked else cause, "cause": cause,
            "flaky_elsewhere": any(o.kind == "pr" and o.message.startswith(PR_BREAKS_FLAKY_MESSAGE) for o in failing)}


def _report_state(job: Job) -> str:
    """What an infra failure left of the job's test report (see junit.job_cases)."""
    if job.infra == "cuda_illegal_memory_access":
        return "complete"
    total = sum(len(f.tests) for f in job.files)
    first = len(job.files[0].tests) if job.files else 0
    return "missing" if not total or first / total > job.cut else "partial"
