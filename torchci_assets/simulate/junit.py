"""Test results of one job, as pytest's JUnit XML or as PyTorch's flattened test_run rows.

Both renderings come from the same per-test records, so a job reads the same whichever
form it uploads. Outcomes of planted tests come from the job (decided when the job was
simulated, since they set its conclusion); everything else passes or is skipped by rule.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from .catalog import skip_reason
from .disabled import ENABLED_MESSAGE, rerun_case
from .model import Job, iso_s

IMA = "RuntimeError: CUDA error: an illegal memory access was encountered"
_TRACE = "\n".join((
    "Traceback (most recent call last):",
    '  File "/var/lib/jenkins/pytorch/test/{file}.py", line {line}, in {name}',
    "    self.assertEqual(actual, expected)",
    '  File "/opt/conda/envs/py_3.10/lib/python3.10/site-packages/torch/testing/_internal/common_utils.py",'
    " line 4160, in assertEqual",
    "    raise error_metas.pop()[0].to_error(msg)",
    "{message}",
    "",
    "To execute this test, run the following from the base repo dir:",
    "    python test/{file}.py {cls}.{name}",
    "",
    "This message can be suppressed by setting PYTORCH_PRINT_REPRO_ON_FAILURE=0",
))


@dataclass(slots=True)
class Case:
    classname: str
    name: str
    time: float
    line: int
    result: str  # passed, failed, error, skipped
    message: str
    reruns: int  # failed tries before the final one
    stdout: str


def job_cases(job: Job, seed: int) -> list[tuple[str, str, list[Case]]]:
    """[(file path, report module, cases)] for the files whose report got written."""
    cfg = job.cfg
    rng = random.Random(f"{seed}|report|{job.id}")
    total = sum(len(f.tests) for f in job.files) or 1
    done = 0
    out = []
    for f in job.files:
        start_frac = done / total
        done += len(f.tests)
        if job.infra in ("runner_lost", "timeout") and done / total > job.cut:
            break  # pytest never finished this file: its XML was never written
        cases = []
        for i, t in enumerate(f.tests):
            cls, name = t.concrete(cfg.device)
            secs = f.seconds * t.share * cfg.speed * job.slow.get(f.path, 1.0) * math.exp(rng.gauss(0.0, 0.15))
            reason = skip_reason(t, cfg)
            stdout = ""
            if reason:
                cases.append(Case(cls, name, round(min(secs, 0.002), 3), t.line, "skipped", reason, 0, ""))
                continue
            o = job.outcomes.get(t)
            result, message, reruns = "passed", "", 0
            if job.reruns is not None:  # rerun_disabled_tests: only the disabled tests run
                result, message = rerun_case(job.reruns[t]) if t in job.reruns else ("skipped", ENABLED_MESSAGE)
            elif job.infra == "cuda_illegal_memory_access" and start_frac + i / total >= job.cut:
                first = not cases or cases[-1].message != IMA
                result, message = ("failed" if first else "error"), IMA
            elif o is not None:
                reruns = len(o.tries) - 1
                result = "failed" if o.tries[-1] else "passed"
                message = o.message
                stdout = f"Running {name} on {job.runner_name}\nexpected value differs at index {rng.randint(0, 63)}"
            elif rng.random() < 0.03:
                stdout = f"Using {cfg.device} device; seed={rng.getrandbits(16)}"
            cases.append(Case(cls, name, round(secs, 3), t.line, result, message, reruns, stdout))
        out.append((f.path, f.module, cases))
    return out


def _trace(path: str, c: Case, cls: str) -> str:
    return _TRACE.format(file=path, line=c.line, name=c.name, message=c.message, cls=cls)


def render_xml(path: str, cases: list[Case], job: Job, dialect: str, started_ms: int) -> bytes:
    """One file's report as pytest writes it (junit_family xunit1 for PyTorch's dialect, which
    adds file= and line=; plain pytest xunit2 otherwise, with the dotted module classname)."""
    failures = sum(c.result == "failed" for c in cases)
    errors = sum(c.result == "error" for c in cases)
    skipped = sum(c.result == "skipped" for c in cases)
    total_time = sum(c.time for c in cases)
    ts = iso_s(started_ms).replace("Z", f".{started_ms % 1000:03d}{job.id % 1000:03d}+00:00")
    parts = ['<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">',
             f'<testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" '
             f'tests="{len(cases)}" time="{total_time:.3f}" timestamp="{ts}" hostname="{job.runner_name}">']
    dotted = "test." + path.replace("/", ".") + "."
    for c in cases:
        if dialect == "pytorch":
            head = (f'<testcase classname="{c.classname}" name="{c.name}" time="{c.time:.3f}" '
                    f'file="{path}.py" line="{c.line}"')
        else:
            head = f'<testcase classname="{dotted}{c.classname}" name="{c.name}" time="{c.time:.3f}"'
        if c.result == "passed" and not c.reruns and not c.stdout:
            parts.append(head + " />")
            continue
        parts.append(head + ">")
        if c.reruns:
            rerun = f"<rerun message={quoteattr(c.message)}>{escape(_trace(path, c, c.classname))}</rerun>"
            parts.append(rerun * c.reruns)
        if c.result == "failed":
            parts.append(f"<failure message={quoteattr(c.message)}>{escape(_trace(path, c, c.classname))}</failure>")
        elif c.result == "error":
            msg = f'failed on setup with "{c.message}"'
            parts.append(f"<error message={quoteattr(msg)}>{escape(c.message)}</error>")
        elif c.result == "skipped":
            parts.append(f'<skipped type="pytest.skip" message={quoteattr(c.message)}>'
                         f"{escape(f'/var/lib/jenkins/pytorch/test/{path}.py:{c.line}: {c.message}')}</skipped>")
        if c.stdout:
            parts.append(f"<system-out>{escape(c.stdout)}</system-out>")
        parts.append("</testcase>")
    parts.append("</testsuite></testsuites>")
    return "".join(parts).encode()


def test_run_rows(module: str, path: str, cases: list[Case], job: Job) -> list[dict]:
    """PyTorch's upload_test_stats rows: testcase attributes, child elements as objects (a
    list when repeated), null when absent, plus the job's ids and the invoking file."""
    rows = []
    for c in cases:
        failure = error = skipped = rerun = None
        if c.result == "failed":
            failure = {"message": c.message, "text": _trace(path, c, c.classname)}
        elif c.result == "error":
            error = {"message": f'failed on setup with "{c.message}"', "text": c.message}
        elif c.result == "skipped":
            skipped = {"type": "pytest.skip", "message": c.message,
                       "text": f"/var/lib/jenkins/pytorch/test/{path}.py:{c.line}: {c.message}"}
        if c.reruns:
            one = {"message": c.message, "text": _trace(path, c, c.classname)}
            rerun = one if c.reruns == 1 else [one] * c.reruns
        rows.append({"classname": c.classname, "file": f"{path}.py", "invoking_file": module,
                     "name": c.name, "time": c.time, "line": c.line, "failure": failure, "error": error,
                     "skipped": skipped, "rerun": rerun,
                     "system-out": {"text": c.stdout} if c.stdout else None,
                     "job_id": job.id, "workflow_id": job.run.run_id,
                     "workflow_run_attempt": job.run.attempt})
    return rows
