"""Raw GitHub Actions logs of failed jobs (`logs/day=D/<job_id>.log[.gz]`), with the noise a real
one carries around its failure line: `2026-11-01T12:00:00.1234567Z ` timestamps, ANSI colour
codes, `##[group]` markers, environment dumps, pytest progress, `##[warning]`s, the
`##[error]Process completed with exit code 1.` every failed step prints, and confusers (a
compiler error inside the sccache log PyTorch prints after a failed build).

The failure written is the one the simulator planted, and consistent with the job's report: a
test job's log lists the same failed tests as its JUnit XML (both come from `junit.job_cases`);
a runner lost or a timeout cuts the log where the tests stopped; a CUDA error shows in every
test after it. The planted line (the last line that states the failure, as a classifier with
PyTorch's semantics surfaces the last match) goes to ground truth with its kind.

A log is uploaded after its job ends, minutes later, and now and then hours later: it then lands
in the next day's folder, as late logs do.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from .junit import IMA, Case, job_cases
from .model import DAY_MS, Job, iso_ms
from .writer import gzip_bytes

KINDS = ("test", "runner_lost", "cuda_error", "timeout", "lint", "build")
LATE_LOG_RATE = 0.03
GZIP_RATE = 0.7  # PyTorch keeps its logs gzipped; some uploaders do not
SHUTDOWN = ("##[error]The runner has received a shutdown signal. This can happen when the runner service is "
            "stopped, or a manually started runner is canceled.")
EXIT_1 = "##[error]Process completed with exit code 1."
SCCACHE_START = "=================== sccache compilation log ==================="
SCCACHE_STOP = ("=========== If your build fails, please take a look at the log above for possible reasons "
                "===========")


@dataclass
class _Log:
    """Lines being written; `mark` records a line that states the failure."""

    rng: random.Random
    lines: list[str] = field(default_factory=list)
    planted: int = 0  # 1-based number of the last marked line

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def mark(self, line: str) -> None:
        self.lines.append(line)
        self.planted = len(self.lines)

    def group(self, title: str, command: str, env: dict[str, str]) -> None:
        self.add(f"##[group]Run {title}", *(f"\x1b[36;1m{c}\x1b[0m" for c in command.split("\n")),
                 "shell: /usr/bin/bash -e {0}", "env:", *(f"  {k}: {v}" for k, v in env.items()), "##[endgroup]")


def log_kind(job: Job) -> str | None:
    """What the log of `job` shows, or None for a job that has no failure log."""
    if job.conclusion not in ("failure", "cancelled"):
        return None
    if job.kind == "test":
        return {"runner_lost": "runner_lost", "cuda_illegal_memory_access": "cuda_error",
                "timeout": "timeout"}.get(job.infra, "test")
    return job.kind if job.kind in ("lint", "build") else None


def _header(log: _Log, job: Job) -> None:
    rng = log.rng
    log.add("Current runner version: '2.329.0'", f"Runner name: '{job.runner_name}'",
            f"Runner group name: '{job.runner_group or 'default'}'",
            f"Machine name: 'ip-10-0-{rng.randint(0, 255)}-{rng.randint(1, 254)}'",
            "##[group]GITHUB_TOKEN Permissions", "Actions: read", "Contents: read", "Metadata: read", "##[endgroup]",
            "Secret source: Actions", "Prepare workflow directory", "Prepare all required actions",
            "Getting action download info",
            f"Download action repository 'actions/checkout@v4' (SHA:{rng.getrandbits(160):040x})",
            f"Download action repository 'pytorch/test-infra@main' (SHA:{rng.getrandbits(160):040x})",
            f"Complete job name: {job.name}")
    env = {"GIT_DEFAULT_BRANCH": "main", "AWS_ACCESS_KEY_ID": "***", "AWS_SECRET_ACCESS_KEY": "***",
           "BUILD_ENVIRONMENT": job.cfg.build_env if job.cfg else "lint", "PR_NUMBER": "",
           "SHA1": job.run.head_sha}
    log.group("actions/checkout@v4", f"git checkout --progress --force {job.run.head_sha}", {"fetch-depth": "1"})
    log.add(f"HEAD is now at {job.run.head_sha[:7]} {job.run.title[:60]}",
            "##[warning]Node.js 16 actions are deprecated. Please update the following actions to use Node.js 20.")
    log.group("Pull docker image", "docker pull \"${DOCKER_IMAGE}\"", env)
    for layer in range(rng.randint(3, 8)):
        log.add(f"{rng.getrandbits(48):012x}: Pull complete")
    log.add(f"Digest: sha256:{rng.getrandbits(256):064x}", "Status: Downloaded newer image")


def _test_body(log: _Log, job: Job, seed: int, kind: str) -> None:
    """pytest output file by file, from the same cases as the job's report."""
    rng = log.rng
    cases = job_cases(job, seed)
    log.group("Test", ".ci/pytorch/test.sh", {"TEST_CONFIG": job.cfg.test_config,
                                                "SHARD_NUMBER": str(job.shard), "NUM_TEST_SHARDS": str(job.cfg.num_shards)})
    log.add(f"+ python test/run_test.py --shard {job.shard} {job.cfg.num_shards} --verbose")
    failed_files = []
    for path, module, cs in cases:
        _pytest_file(log, path, module, cs)
        if any(c.result in ("failed", "error") for c in cs):
            failed_files.append(module)
            log.add(f"{module} 1/1 failed!")
    if kind in ("runner_lost", "timeout"):
        done = {m for _, m, _ in cases}
        rest = [f for f in job.files if f.module not in done]
        if rest:  # the file that was running when the job stopped
            f = rest[0]
            log.add(f"Running {f.module} 1/1 ... [{iso_ms(job.completed - 60_000)}]", "",
                    "\x1b[1m============================= test session starts ==============================\x1b[0m")
            for t in f.tests[: rng.randint(0, len(f.tests))]:
                cls, name = t.concrete(job.cfg.device)
                log.add(f"{f.path}.py::{cls}::{name} PASSED [{rng.uniform(0.001, 2):.4f}s]")
        if kind == "runner_lost":
            log.mark(SHUTDOWN)
            log.add("##[error]The operation was canceled.")
        else:
            log.mark(f"##[error]The action 'Test' has timed out after {(job.completed - job.started) // 60_000} "
                     "minutes.")
            log.add("##[error]The operation was canceled.")
        return
    if kind == "cuda_error" and not any(c.message == IMA for _, _, cs in cases for c in cs):
        # the error hit after the last test (teardown, a CUDA graph replay): the process dies with it
        log.add("terminate called after throwing an instance of 'c10::AcceleratorError'")
        log.mark(f"  what():  {IMA.split(': ', 1)[1]}")
        log.add("Exception raised from c10_cuda_check_implementation at /var/lib/jenkins/pytorch/c10/cuda/"
                "CUDAException.cpp:44 (most recent call first):",
                f"{cases[-1][1] if cases else 'test_cuda'} 1/1 failed! Received signal: SIGIOT")
    reruns = [f"test/{p}.py::{c.classname}::{c.name}" for p, _, cs in cases for c in cs
              if c.reruns and c.result == "passed"]
    if reruns:
        log.add(f"The following tests failed and then succeeded when run in a new process{reruns}")
    if failed_files:
        log.add("Traceback (most recent call last):",
                '  File "/var/lib/jenkins/pytorch/test/run_test.py", line 2093, in <module>', "    main()",
                '  File "/var/lib/jenkins/pytorch/test/run_test.py", line 2080, in main', "    raise RuntimeError(",
                f"RuntimeError: {', '.join(failed_files)} failed!")
    log.add(EXIT_1)


def _pytest_file(log: _Log, path: str, module: str, cases: list[Case]) -> None:
    rng = log.rng
    log.add(f"Running {module} 1/1 ...", "",
            "\x1b[1m============================= test session starts ==============================\x1b[0m",
            "platform linux -- Python 3.10.16, pytest-7.3.2, pluggy-1.5.0 -- /opt/conda/envs/py_3.10/bin/python",
            "plugins: rerunfailures-14.0, xdist-3.3.1, hypothesis-6.56.4, subtests-0.13.1",
            f"collecting ... collected {len(cases)} items", "")
    bad = []
    for i, c in enumerate(cases, 1):
        word = {"passed": "PASSED", "failed": "FAILED", "error": "ERROR", "skipped": "SKIPPED"}[c.result]
        pct = i * 100 // len(cases)
        node = f"{path}.py::{c.classname}::{c.name}"
        extra = f" ({c.message})" if c.result == "skipped" else ""
        log.add(f"{node} {word} [{c.time:.4f}s]{extra} [{pct:3d}%]")
        if c.result in ("failed", "error"):
            bad.append((node, c))
        elif rng.random() < 0.01:
            log.add("/opt/conda/envs/py_3.10/lib/python3.10/site-packages/torch/_dynamo/utils.py:1903: UserWarning: "
                    "RuntimeError: the fake tensor cache is disabled")
    if bad:
        log.add("", "=================================== FAILURES ===================================")
        for node, c in bad:
            log.add(f"{'_' * 16} {c.classname}.{c.name} {'_' * 16}", "Traceback (most recent call last):",
                    f'  File "/var/lib/jenkins/pytorch/test/{path}.py", line {c.line}, in {c.name}',
                    "    self.assertEqual(actual, expected)")
            _error(log, c.message)
            if c.message == IMA:
                log.add("CUDA kernel errors might be asynchronously reported at some other API call, so the "
                        "stacktrace below might be incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
        log.add("=========================== short test summary info ============================")
        for node, c in bad:
            word = "FAILED" if c.result == "failed" else "ERROR"
            first = c.message.split("\n")[0]
            log.mark(f"{word} [{c.time:.4f}s] {node} - {first}")
    counts = {r: sum(c.result == r for c in cases) for r in ("failed", "passed", "skipped")}
    summary = ", ".join(f"{n} {r}" for r, n in counts.items() if n)
    log.add(f"- generated xml file: /var/lib/jenkins/pytorch/test/test-reports/python-pytest/{module}/"
            f"{module}-{rng.getrandbits(64):016x}.xml -",
            f"\x1b[{'31' if bad else '32'}m========= {summary} in {sum(c.time for c in cases):.2f}s =========\x1b[0m")


def _error(log: _Log, message: str) -> None:
    """The error line(s) of a traceback; the CUDA error line states the planted failure."""
    for i, line in enumerate(message.split("\n")):
        if i == 0 and line == IMA:
            log.mark(line)
        else:
            log.add(line)


def _lint_body(log: _Log, job: Job) -> None:
    rng = log.rng
    log.group("lintrunner", "lintrunner --force-color --all-files --tee-json=lint.json", {"PYTHON": "python3"})
    for linter in ("FLAKE8", "CLANGFORMAT", "MYPY", "RUFF", "NEWLINE"):
        log.add(f"\x1b[32m  ok\x1b[0m {linter}")
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(("torch/_inductor/codegen/triton.py", "torch/nn/modules/conv.py",
                           "torch/distributed/fsdp/_fully_shard/_fsdp_param.py", "test/test_nn.py"))
        code, text = rng.choice((("E501", "line too long (127 > 120 characters)"),
                                 ("F401", "'typing.Any' imported but unused"), ("B950", "line too long")))
        log.mark(f"\x1b[1m>>>\x1b[0m Lint for \x1b[4m{path}\x1b[0m:")
        log.add("", f"  \x1b[31m\x1b[1mError\x1b[0m ({code.startswith('E') and 'FLAKE8' or 'RUFF'}) {code}",
                f"    {text}", "", f"    {rng.randint(10, 900)}  |        return self._helper(x)", "")
    log.add("\x1b[1m\x1b[31mLint failed.\x1b[0m", EXIT_1)


def _build_body(log: _Log, job: Job) -> None:
    rng = log.rng
    log.group("Build", ".ci/pytorch/build.sh", {"BUILD_ENVIRONMENT": job.cfg.build_env})
    total = rng.randint(6000, 9000)
    for i in sorted(rng.sample(range(1, total), 40)):
        log.add(f"[{i}/{total}] Building CXX object caffe2/CMakeFiles/torch_cpu.dir/__/aten/src/ATen/native/"
                f"op_{i % 97}.cpp.o")
    src = rng.choice(("aten/src/ATen/native/cpu/ReduceOps.cpp", "torch/csrc/autograd/engine.cpp",
                      "aten/src/ATen/native/cuda/Blas.cpp"))
    line, col = rng.randint(20, 2000), rng.randint(1, 80)
    log.add(f"FAILED: caffe2/CMakeFiles/torch_cpu.dir/__/{src}.o")
    # gcc's colours: the cleaned line is `path:line:col: error: message`
    log.mark(f"\x1b[01m\x1b[K/var/lib/jenkins/workspace/{src}:{line}:{col}:\x1b[m\x1b[K "
             f"\x1b[01;31m\x1b[Kerror: \x1b[m\x1b[K‘\x1b[01m\x1b[Kfused_reduce\x1b[m\x1b[K’ was not declared in this scope")
    log.add(f"  {line} |   fused_reduce(iter, ops);", "      |   ^~~~~~~~~~~~",
            "ninja: build stopped: subcommand failed.", SCCACHE_START,
            "sccache: Compile requests 6113", "sccache: Cache hits 5902",
            "/tmp/sccache_probe.cpp:1:10: error: unknown flag -fno-fancy-math",  # confuser, ignored by the rules
            SCCACHE_STOP, EXIT_1)


def _footer(log: _Log) -> None:
    log.add("##[group]Run # copy test results back to the mounted workspace",
            "\x1b[36;1mdocker exec -t \"$CONTAINER_NAME\" sh -c \"sudo cp -R test/test-reports ../workspace/test\"\x1b[0m",
            "##[endgroup]", "Post job cleanup.", "[command]/usr/bin/git version", "git version 2.43.0",
            "Cleaning up orphan processes")


def render_log(job: Job, seed: int) -> tuple[bytes, dict] | None:
    """(the raw log, its ground truth) for a failed job, or None for a job without a failure log."""
    kind = log_kind(job)
    if kind is None:
        return None
    rng = random.Random(f"{seed}|log|{job.id}")
    log = _Log(rng)
    _header(log, job)
    if kind == "lint":
        _lint_body(log, job)
    elif kind == "build":
        _build_body(log, job)
    else:
        _test_body(log, job, seed, kind)
    _footer(log)
    span = max(1, job.completed - job.started)
    n = len(log.lines)
    stamps = sorted(job.started + rng.randrange(span) for _ in range(n))
    # GitHub serves a log with a byte-order mark before the first timestamp
    out = "\ufeff" + "".join(f"{iso_ms(t)[:-1]}{rng.randrange(10_000):04d}Z {line}\n"
                             for t, line in zip(stamps, log.lines))
    planted = log.lines[log.planted - 1]
    truth = {"job_id": job.id, "run_id": job.run.run_id, "run_attempt": job.run.attempt, "name": job.name,
             "kind": kind, "conclusion": job.conclusion, "completed_at": iso_ms(job.completed),
             "line_number": log.planted,
             "line": _strip_ansi(planted)}
    return out.encode(), truth


def _strip_ansi(line: str) -> str:
    return re.sub("\x1b\\[[0-9;]*[mK]", "", line)


def log_arrival(job: Job, seed: int) -> int:
    """When the job's log is uploaded: minutes after it ends, sometimes hours (a late log)."""
    rng = random.Random(f"{seed}|log-upload|{job.id}")
    delay = rng.randint(20_000, 600_000)
    if rng.random() < LATE_LOG_RATE:
        delay += rng.randint(2 * 3_600_000, 20 * 3_600_000)
    return job.completed + min(delay, DAY_MS - 1)


def write_job_log(folder: Path, job: Job, seed: int) -> dict | None:
    """Write `<job id>.log[.gz]` into `folder`; returns the ground-truth record (None: no log)."""
    rendered = render_log(job, seed)
    if rendered is None:
        return None
    data, truth = rendered
    gz = random.Random(f"{seed}|log-gz|{job.id}").random() < GZIP_RATE
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{job.id}.log" + (".gz" if gz else "")
    (folder / name).write_bytes(gzip_bytes(data) if gz else data)
    truth["path"] = name
    return truth
