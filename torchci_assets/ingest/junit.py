"""Turn JUnit XML test reports into rows of the lake's `test_run` table.

One row per test per job attempt, carrying the test's FINAL outcome and how many failed
attempts preceded it. Flaky-test detection depends on that pair, so every dialect that
records retries is folded into the same two columns:

* pytest + pytest-rerunfailures (what real pytest 8/9 writes): one `<testcase>` entry per
  attempt, the failed attempts written as empty entries and the last entry holding the
  final outcome. Entries with the same identity are therefore merged, in document order,
  wherever they appear in the report (pytest-xdist interleaves them).
* pytest's own double entry for a test that fails in its body and then errors in
  teardown: a `<failure>` entry followed by an `<error message="failed on teardown
  with ...">` entry. That is one attempt, not a rerun; its outcome stays `failed`.
  A test that passes and then errors in teardown gets a single `<error>` entry: `error`.
* `<rerun>` children (PyTorch's junit-xml-reruns plugin): one failed attempt each.
* Surefire's `<flakyFailure>`/`<flakyError>` (failed attempts, final pass) and
  `<rerunFailure>`/`<rerunError>` (failed attempts after the `<failure>`/`<error>`).

Column semantics (shared with the JSONL reader in `runs_jsonl`):

* `status` is the final outcome, by precedence failure > error > skipped > passed when one
  entry holds several result elements. pytest writes xfail as `<skipped>` (so: skipped)
  and a non-strict xpass as a plain pass.
* `rerun_count` counts failed attempts before the final outcome.
* `time` is the SUM over all attempts, as PyTorch sums test-case times: it is what the
  job paid for the test, which is what test times and shard plans need.
* `message` is the first line (at most 500 characters) of the first failure-like message,
  attempts in order: rerun, flakyFailure, flakyError, failure, error, rerunFailure,
  rerunError; a skipped test with no failure message keeps its skip reason (PyTorch's
  "test is disabled because ..." lives there). The fixed order makes the same test give
  the same message from XML and from JSONL, where document order is lost.
* `(file, classname, name)` are normalised by `normalise_test_identity` so that PyTorch's
  style (`classname="TestNN" file="nn/test_convolution.py"`), plain pytest
  (`classname="test.nn.test_convolution.TestNN"`) and pytest's xunit1 (`file=` added)
  all give `("nn/test_convolution.py", "TestNN", name)`.

Safety: the report is parsed with expat directly, fed in chunks, keeping only the current
test case's few attributes and at most a few KB of message text, so memory does not grow
with `<system-out>` or traceback sizes; it grows with the number of distinct tests (one
small tuple each, bounded by `max_testcases`). Expat must hold one token (a tag with its
attributes, a comment) whole, so a token longer than the line cap (`TORCHCI_MAX_LINE_BYTES`)
rejects the report; the report itself is capped at `TORCHCI_MAX_REPORT_BYTES` (512 MiB by
default) of DECOMPRESSED bytes, counted as they are read, so a gzip bomb stops at the cap.
Any DOCTYPE is rejected as soon as expat sees it, before an entity can be declared, so
neither internal entity expansion (billion laughs) nor external entities (file or network
reads) can happen. A report that is too large, truncated (mid-XML or mid-gzip), malformed or
has an unexpected root is rejected WHOLE: rows are only released once the document closed
cleanly, because a partial report undercounts failures and would pass for a complete one.

One bad test case, on the other hand, costs only its test: a `<testcase>` without a name,
or with a time that is not a finite non-negative number of seconds (at most MAX_SECONDS), is
a reject located at its line and column, and every other test of the report is kept. When
the bad entry is one attempt of a test with several entries (reruns), the whole test is
dropped with it: its other attempts alone would misstate its outcome.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple
from xml.parsers import expat

import pyarrow as pa

from torchci_assets.ingest.fields import INT64_MAX
from torchci_assets.ingest.lines import max_line_bytes

DEFAULT_MAX_BYTES = 512 * 1024 * 1024
# A test case time above this (31 years) is a broken clock, not a measurement, and sums of such times overflow.
MAX_SECONDS = 1e9
DEFAULT_MAX_TESTCASES = 1_000_000
DEFAULT_BATCH_SIZE = 10_000
MESSAGE_MAX_CHARS = 500
READ_CHUNK_BYTES = 1 << 20
MAX_DEPTH = 64
# Enough text to find the first non-blank line of a message given only as element text.
_MESSAGE_SCAN_CHARS = 4096

TEST_RUN_SCHEMA = pa.schema(
    [
        ("workflow_id", pa.int64()),
        ("workflow_run_attempt", pa.int64()),
        ("job_id", pa.int64()),
        ("invoking_file", pa.string()),
        ("file", pa.string()),
        ("classname", pa.string()),
        ("name", pa.string()),
        ("time", pa.float64()),
        ("status", pa.string()),
        ("rerun_count", pa.int64()),
        ("message", pa.string()),
    ]
)

OUTCOME_TAGS = {"failure": "failed", "error": "error", "skipped": "skipped"}
RETRY_TAGS = ("rerun", "flakyFailure", "flakyError", "rerunFailure", "rerunError")
# Where the row's message comes from, first match wins (see the module docstring).
MESSAGE_ORDER = (
    "rerun", "flakyFailure", "flakyError", "failure", "error", "rerunFailure", "rerunError",
)
_TEARDOWN_ERROR_PREFIX = "failed on teardown with"
# Directory PyTorch's tests live under; file paths are kept relative to it.
TEST_ROOT = "test/"
# Folders under which PyTorch writes a report per invoking test module.
_REPORT_KIND_DIRS = ("python-pytest", "python-unittest")
_REPORT_PATH_RE = re.compile(
    r"(?:^|/)test-reports/day=\d{4}-\d{2}-\d{2}/(\d{1,19})/(\d{1,19})/(\d{1,19})/(.+\.xml)(?:\.gz)?$"
)
_SUREFIRE_THOUSANDS_RE = re.compile(r"^\d{1,3}(,\d{3})+(\.\d+)?$")


def max_report_bytes() -> int:
    """The decompressed size cap of one report (or test-runs file), from TORCHCI_MAX_REPORT_BYTES."""
    text = os.environ.get("TORCHCI_MAX_REPORT_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"TORCHCI_MAX_REPORT_BYTES={text!r} is not a number of bytes") from None


class ParsedBatch(NamedTuple):
    """Rows of `test_run` and rejects of single test cases or lines (the `rejects` table's columns)."""

    rows: list[dict]
    rejects: list[dict]


class ReportRejected(Exception):
    """A whole report (or file) that yields no rows, with a reason for the rejects table.

    `code` is a short stable token (too-large, truncated, unreadable, malformed, doctype,
    bad-root, bad-time, too-many-testcases, too-deep, bad-path, empty) that asset checks
    can count; `detail` is for people; `location` is "line:column" (1-based) when the
    fault has a place in the document.
    """

    def __init__(self, code: str, detail: str, location: str | None = None):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.location = location

    def as_reject(self, source: str) -> dict:
        """The row for the lake's `rejects` table, located `path:line:column` like the other readers'."""
        location = f"{source}:{self.location}" if self.location else source
        return {"source": source, "location": location, "reason": str(self), "sample": None}


def parse_report_path(path: str) -> tuple[int, int, int, str | None]:
    """(workflow_id, run_attempt, job_id, invoking_file) from an archived report's path.

    The archive places reports at `test-reports/day=D/<run_id>/<attempt>/<job_id>/<path>`;
    PyTorch writes each report under `python-pytest/<invoking file>/`, e.g.
    `test/test-reports/python-pytest/nn/test_convolution/nn.test_convolution-1f.xml`
    gives `nn/test_convolution` (the whole path, not just the last folder as PyTorch's
    uploader does, because test-times.json keys keep the sub-folder). None when the
    report is not under such a folder.
    """
    match = _REPORT_PATH_RE.search(path.replace("\\", "/"))
    if match is None:
        raise ReportRejected(
            "bad-path", "expected test-reports/day=YYYY-MM-DD/<run_id>/<attempt>/<job_id>/<...>.xml[.gz]"
        )
    run_id, attempt, job_id, inner = match.groups()
    if not (int(run_id) <= INT64_MAX and 1 <= int(attempt) <= INT64_MAX and int(job_id) <= INT64_MAX):
        raise ReportRejected("bad-path", f"run id and job id must be 0..{INT64_MAX}, the attempt 1..{INT64_MAX}")
    parts = inner.split("/")[:-1]
    invoking_file = None
    for i, part in enumerate(parts):
        if part in _REPORT_KIND_DIRS and i + 1 < len(parts):
            invoking_file = "/".join(parts[i + 1:])
    return int(run_id), int(attempt), int(job_id), invoking_file


def normalise_test_identity(classname: str, file: str | None, invoking_file: str | None = None) -> tuple[str, str]:
    """(file, classname) in one spelling whatever dialect the report used.

    The file is made relative to PyTorch's `test/` folder with `/` separators. Plain
    pytest puts the module path in front of the class (`test.nn.test_convolution.TestNN`);
    with a `file` attribute the module prefix is known exactly, without one the class
    part starts at the first dotted component that begins with an upper-case letter
    (modules are lower-case by convention, test classes `Test...`). A module-level test
    function has classname "". When nothing names the module (bare `TestNN`, no file),
    the file falls back to the invoking module, else "".
    """
    classname = classname or ""
    if file:
        original = file.replace("\\", "/").removeprefix("./")
        stripped = original.removeprefix(TEST_ROOT)
        for module_file in (original, stripped):
            module = module_file.removesuffix(".py").replace("/", ".")
            if classname == module:
                return stripped, ""
            if classname.startswith(module + "."):
                return stripped, classname[len(module) + 1:]
        return stripped, classname
    parts = classname.split(".")
    split_at = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    module_parts, class_parts = parts[:split_at], parts[split_at:]
    if module_parts:
        file = "/".join(module_parts) + ".py"
    elif invoking_file:
        file = invoking_file + ".py"
    else:
        file = ""
    return file.removeprefix(TEST_ROOT), ".".join(class_parts)


def first_line(text: str | None) -> str | None:
    """First non-blank line, truncated: a message column, not a traceback store."""
    if not text:
        return None
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:MESSAGE_MAX_CHARS]
    return None


def parse_time(value: object) -> float:
    """Seconds from a report's time value; ValueError for anything not a finite, non-negative number.

    A missing value is 0.0 (the attribute is optional in JUnit). Surefire's
    locale-formatted thousands (`1,234.5`) are accepted because real reports contain them.
    """
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        raise ValueError(f"time {value!r} is not a number")
    if isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            if not _SUREFIRE_THOUSANDS_RE.match(value.strip()):
                raise ValueError(f"time {value!r} is not a number") from None
            seconds = float(value.replace(",", ""))
    elif isinstance(value, (int, float)):
        seconds = float(value)
    else:
        raise ValueError(f"time {value!r} is not a number")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"time {value!r} is not a finite non-negative number")
    if seconds > MAX_SECONDS:
        raise ValueError(f"time {value!r} is more than {MAX_SECONDS:.0f} seconds")
    return seconds


@dataclass(frozen=True)
class Entry:
    """One recorded attempt group: a `<testcase>` element or one JSONL row."""

    time: float
    status: str
    retries: int
    message: str | None
    teardown_error: bool  # pytest's second entry for a test that failed, then errored in teardown

    @classmethod
    def from_results(cls, time: float, results: dict[str, list[str | None]]) -> Entry:
        """Build from result tags mapped to their messages (None where a result has none)."""
        if not results:
            return cls(time, "passed", 0, None, False)
        status = "passed"
        for tag in ("failure", "error", "skipped"):
            if results.get(tag):
                status = OUTCOME_TAGS[tag]
                break
        retries = sum(len(results.get(tag, ())) for tag in RETRY_TAGS)
        message = next(
            (m for tag in MESSAGE_ORDER for m in results.get(tag, ()) if m),
            None,
        )
        if message is None and status == "skipped":
            message = next((m for m in results["skipped"] if m), None)
        teardown_error = (
            status == "error" and retries == 0 and (message or "").startswith(_TEARDOWN_ERROR_PREFIX)
        )
        return cls(time, status, retries, message, teardown_error)


class Outcomes:
    """Folds the entries of each test into its final outcome, keeping first-seen order.

    Keys are (workflow_id, workflow_run_attempt, job_id, invoking_file, file, classname,
    name); each value is a small list [time, status, rerun_count, message].
    """

    def __init__(self) -> None:
        self._tests: dict[tuple, list] = {}
        self._dropped: set[tuple] = set()

    def __len__(self) -> int:
        return len(self._tests)

    def drop(self, key: tuple) -> None:
        """Leave the test out of `rows()`: one of its entries was rejected, and the others
        alone would misstate its outcome (a failing last attempt cut off reads as a pass)."""
        self._dropped.add(key)

    def add(self, key: tuple, entry: Entry) -> None:
        state = self._tests.get(key)
        if state is None:
            self._tests[key] = [entry.time, entry.status, entry.retries, entry.message]
            return
        state[0] += entry.time
        if entry.teardown_error and state[1] == "failed":
            return  # same attempt as the failure before it
        # The outcome recorded so far was not final: it was a failed attempt.
        state[1] = entry.status
        state[2] += 1 + entry.retries
        if state[3] is None:
            state[3] = entry.message

    def rows(self) -> Iterator[dict]:
        for key, (time, status, rerun_count, message) in self._tests.items():
            if key in self._dropped:
                continue
            workflow_id, attempt, job_id, invoking_file, file, classname, name = key
            yield {
                "workflow_id": workflow_id,
                "workflow_run_attempt": attempt,
                "job_id": job_id,
                "invoking_file": invoking_file,
                "file": file,
                "classname": classname,
                "name": name,
                "time": time,
                "status": status,
                "rerun_count": rerun_count,
                "message": message,
            }


def batched(items: Iterable[dict], size: int) -> Iterator[list[dict]]:
    """Lists of up to `size` items (itertools.batched needs Python 3.12)."""
    batch: list[dict] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def read_chunks(stream: BinaryIO, max_bytes: int, chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
    """Chunks of a (possibly decompressing) stream, rejecting read errors and oversize files.

    The size check runs on the bytes actually read, so it holds for gzip bombs too.
    """
    total = 0
    while True:
        try:
            chunk = stream.read(chunk_bytes)
        except (EOFError, OSError, zlib.error) as exc:
            truncated = isinstance(exc, EOFError) or "truncated" in str(exc).lower()
            raise ReportRejected(
                "truncated" if truncated else "unreadable",
                f"reading the stream failed after {total} bytes: {exc}",
            ) from None
        if not chunk:
            return
        total += len(chunk)
        if total > max_bytes:
            raise ReportRejected("too-large", f"more than {max_bytes} bytes decompressed (TORCHCI_MAX_REPORT_BYTES)")
        yield chunk


class _JUnitReader:
    """expat callbacks that fold `<testcase>` elements into `Outcomes` as they close."""

    def __init__(self, parser, ids: tuple[int, int, int], invoking_file: str | None, max_testcases: int,
                 source: str = "report"):
        self._parser = parser
        self._source = source
        self.rejects: list[dict] = []  # single test cases, as the `rejects` table's rows
        self._ids = ids
        self._invoking_file = invoking_file
        self._max_testcases = max_testcases
        self._identities: dict[tuple[str, str | None], tuple[str, str]] = {}
        self.outcomes = Outcomes()
        self.testcases = 0
        self.root_closed = False
        self._depth = 0
        self._case_depth = 0  # depth of the open <testcase>, 0 when none is open
        self._case_attrs: dict[str, str] = {}
        self._case_results: dict[str, list[str | None]] = {}
        self._result_tag: str | None = None  # result element whose text is being read
        self._result_message: str | None = None
        self._result_text: list[str] = []
        self._result_text_len = 0
        self._ignore_depth = 0  # inside system-out/err under a result element

    def _where(self) -> str:
        return f"{self._parser.CurrentLineNumber}:{self._parser.CurrentColumnNumber + 1}"

    @property
    def seen_element(self) -> bool:
        return self._depth > 0 or self.root_closed

    def doctype(self, name, system_id, public_id, has_internal_subset) -> None:
        raise ReportRejected(
            "doctype",
            f"DOCTYPE {name!r} refused: JUnit reports have none, and it could declare entities",
            self._where(),
        )

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ReportRejected("too-deep", f"elements nested deeper than {MAX_DEPTH}", self._where())
        if self._depth == 1 and tag not in ("testsuites", "testsuite"):
            raise ReportRejected("bad-root", f"root element <{tag}>, expected <testsuites> or <testsuite>", self._where())
        if tag == "testcase":
            if self._case_depth:
                raise ReportRejected("malformed", "<testcase> inside <testcase>", self._where())
            self.testcases += 1
            if self.testcases > self._max_testcases:
                raise ReportRejected(
                    "too-many-testcases", f"more than {self._max_testcases} test cases (limit)", self._where()
                )
            self._case_depth = self._depth
            self._case_attrs = attrs
            self._case_results = {}
        elif self._result_tag is not None:
            if tag in ("system-out", "system-err"):
                self._ignore_depth += 1
        elif self._case_depth and self._depth == self._case_depth + 1 and (
            tag in OUTCOME_TAGS or tag in RETRY_TAGS
        ):
            self._result_tag = tag
            self._result_message = first_line(attrs.get("message"))
            self._result_text = []
            self._result_text_len = 0

    def text(self, data: str) -> None:
        if (
            self._result_tag is not None
            and self._result_message is None
            and not self._ignore_depth
            and self._result_text_len < _MESSAGE_SCAN_CHARS
        ):
            self._result_text.append(data)
            self._result_text_len += len(data)

    def end(self, tag: str) -> None:
        if self._result_tag is not None:
            if self._depth == self._case_depth + 1:
                message = self._result_message or first_line("".join(self._result_text)[:_MESSAGE_SCAN_CHARS])
                self._case_results.setdefault(self._result_tag, []).append(message)
                self._result_tag = None
                self._result_text = []
            elif tag in ("system-out", "system-err") and self._ignore_depth:
                self._ignore_depth -= 1
        elif self._depth == self._case_depth:
            self._close_testcase()
        self._depth -= 1
        if self._depth == 0:
            self.root_closed = True

    def _close_testcase(self) -> None:
        attrs = self._case_attrs
        self._case_depth = 0
        self._case_attrs = {}
        results, self._case_results = self._case_results, {}
        name = attrs.get("name")
        if not name:
            self._reject("bad-testcase", "<testcase> without a name", attrs)
            return
        raw = (attrs.get("classname", ""), attrs.get("file"))
        identity = self._identities.get(raw)
        if identity is None:
            identity = self._identities[raw] = normalise_test_identity(raw[0], raw[1], self._invoking_file)
        file, classname = identity
        invoking_file = self._invoking_file if self._invoking_file is not None else file.removesuffix(".py")
        key = (*self._ids, invoking_file, file, classname, name)
        try:
            seconds = parse_time(attrs.get("time"))
        except ValueError as exc:
            self._reject("bad-time", f"test case {name[:200]!r}: {exc}", attrs)
            self.outcomes.drop(key)
            return
        self.outcomes.add(key, Entry.from_results(seconds, results))

    def _reject(self, code: str, detail: str, attrs: dict[str, str]) -> None:
        sample = " ".join(f'{k}="{v[:80]}"' for k, v in list(attrs.items())[:6])
        self.rejects.append({"source": self._source, "location": f"{self._source}:{self._where()}",
                             "reason": f"{code}: {detail}", "sample": f"<testcase {sample}>"[:200]})


def _read_outcomes(
    stream: BinaryIO,
    *,
    workflow_id: int,
    run_attempt: int,
    job_id: int,
    invoking_file_hint: str | None = None,
    max_bytes: int | None = None,
    max_testcases: int = DEFAULT_MAX_TESTCASES,
    source_name: str = "report",
) -> _JUnitReader:
    """Parse a whole report into per-test outcomes and test-case rejects, or raise ReportRejected."""
    max_bytes = max_report_bytes() if max_bytes is None else max_bytes
    max_token = max_line_bytes()
    parser = expat.ParserCreate()
    reader = _JUnitReader(parser, (workflow_id, run_attempt, job_id), invoking_file_hint, max_testcases,
                          source_name)
    parser.buffer_text = True
    parser.StartDoctypeDeclHandler = reader.doctype
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.text
    total = 0
    try:
        for chunk in read_chunks(stream, max_bytes):
            total += len(chunk)
            parser.Parse(chunk, False)
            # Bytes expat holds back for an unfinished token (it reports text as it goes).
            if total - max(parser.CurrentByteIndex, 0) > max_token:
                raise ReportRejected(
                    "too-large", f"one XML token (a tag, its attributes, a comment) longer than {max_token} "
                    "bytes (TORCHCI_MAX_LINE_BYTES)", f"{parser.CurrentLineNumber}:{parser.CurrentColumnNumber + 1}")
        parser.Parse(b"", True)
    except expat.ExpatError as exc:
        where = f"{exc.lineno}:{exc.offset + 1}"
        if total == 0:
            raise ReportRejected("empty", "no bytes", where) from None
        if reader.root_closed or exc.code not in (
            expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS],
            expat.errors.codes[expat.errors.XML_ERROR_UNCLOSED_TOKEN],
            expat.errors.codes[expat.errors.XML_ERROR_PARTIAL_CHAR],
            expat.errors.codes[expat.errors.XML_ERROR_UNCLOSED_CDATA_SECTION],
        ):
            raise ReportRejected("malformed", expat.errors.messages[exc.code], where) from None
        raise ReportRejected(
            "truncated", f"document ends after {total} bytes before its root element closes", where
        ) from None
    except (ValueError, LookupError) as exc:
        # An encoding expat lacks is asked of Python's codecs, which refuse multi-byte ones (Shift_JIS,
        # UTF-7, UTF-32: ValueError) and unknown names (LookupError). That happens at the XML
        # declaration, before any element: later, such an error is a bug of the reader, not the report's.
        if reader.seen_element:
            raise
        raise ReportRejected("malformed", f"declared encoding cannot be read: {exc}",
                             f"{parser.CurrentLineNumber}:{parser.CurrentColumnNumber + 1}") from None
    return reader


def parse_junit(
    stream: BinaryIO,
    *,
    workflow_id: int,
    run_attempt: int,
    job_id: int,
    invoking_file_hint: str | None = None,
    max_bytes: int | None = None,
    max_testcases: int = DEFAULT_MAX_TESTCASES,
    batch_size: int = DEFAULT_BATCH_SIZE,
    source_name: str = "report",
) -> Iterator[ParsedBatch]:
    """Batches of `test_run` rows (dicts in TEST_RUN_SCHEMA's column order) and of rejected
    test cases (located `<source_name>:line:column`) from one report.

    `stream` is any binary file-like with `.read(n)`, already decompressed. The whole
    report is parsed before the first batch is yielded, so a rejected report raises
    ReportRejected from the first `next()` and never yields a partial set of rows.
    `invoking_file_hint` is what `parse_report_path` found; without one each row's
    invoking file is its own file without `.py`. `max_bytes` defaults to `max_report_bytes()`.
    """
    reader = _read_outcomes(
        stream,
        workflow_id=workflow_id,
        run_attempt=run_attempt,
        job_id=job_id,
        invoking_file_hint=invoking_file_hint,
        max_bytes=max_bytes,
        max_testcases=max_testcases,
        source_name=source_name,
    )
    for rejects in batched(reader.rejects, batch_size):
        yield ParsedBatch([], rejects)
    for rows in batched(reader.outcomes.rows(), batch_size):
        yield ParsedBatch(rows, [])
