"""A test report landing in the archive during the day: what the intra-day refresh must pick up.

`land_flaky_test` writes, for each given job, one more JUnit report as PyTorch's CI uploads it
(pytest with pytest-rerunfailures, PyTorch's xunit1 dialect): a test that failed and passed on
rerun. In three jobs or more that is a flaky verdict the disabled list publishes, so the time
from landing to `disabled-tests-condensed.json` is observable end to end (the freshness test and
`bench/bench_freshness.py`). Files are written whole, as an uploader puts them.
"""

from __future__ import annotations

import uuid
from xml.sax.saxutils import escape, quoteattr

from resources.storage import Store

MESSAGE = "AssertionError: Tensor-likes are not close!"


def flaky_report(file: str, classname: str, name: str, message: str = MESSAGE) -> bytes:
    """A report of one test that failed once, then passed on rerun (`file` without `.py`)."""
    trace = f"Traceback (most recent call last):\n  File \"{file}.py\", line 42, in {name}\n{message}"
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
            '<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="1" time="1.250">'
            f'<testcase classname={quoteattr(classname)} name={quoteattr(name)} time="1.250" '
            f'file={quoteattr(file + ".py")} line="42">'
            f'<rerun message={quoteattr(message)}>{escape(trace)}</rerun></testcase>'
            '</testsuite></testsuites>').encode()


def land_flaky_test(store: Store, day: str, jobs: list[tuple[int, int, int]], file: str, classname: str,
                    name: str) -> list[str]:
    """Write a flaky report of the test for each (run_id, run_attempt, job_id) under `day`; their paths."""
    data = flaky_report(file, classname, name)
    paths = []
    for run_id, attempt, job_id in jobs:
        rel = (f"test-reports/day={day}/{run_id}/{attempt}/{job_id}/test/test-reports/python-pytest/{file}/"
               f"{file.replace('/', '.')}-{uuid.uuid4().hex[:16]}.xml")
        store.write_bytes(rel, data)
        paths.append(rel)
    return paths
