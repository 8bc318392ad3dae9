"""Turn PyTorch's flattened test rows (upload_test_stats JSONL) into `test_run` rows.

Each line is one `<testcase>` element as PyTorch's uploader flattens it: its attributes
(classname, file, name, time, ...), `invoking_file`, the job's ids, and one key per result
child (`failure`, `error`, `skipped`, `rerun`, Surefire's `flakyFailure`, ...) holding a
dict with `message`/`text`, a list of such dicts when the element repeated, or null/absent.
Lines are folded with exactly the JUnit reader's semantics (`junit.Entry`, `junit.Outcomes`):
lines for the same test in the same job attempt are attempts in file order, so rows here
and rows from the XML of the same run agree.

A bad line (not JSON, not an object, missing ids or name, a bad time or result value)
becomes a reject for that line and the rest of the file is kept: the lines around it are
still whole. A file that cannot be read to its end (truncated or corrupt gzip) or is over
the byte limit is rejected whole with `junit.ReportRejected`, like a report: unlike
webhook lines, these lines are not independent at the cut, since the attempts of one test
are separate lines; keeping the head would turn a test whose failing final attempt was cut
off into a pass (stock pytest writes its earlier attempts as empty, passing-looking lines).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import orjson

from torchci_assets.ingest.junit import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BYTES,
    OUTCOME_TAGS,
    RETRY_TAGS,
    Entry,
    Outcomes,
    batched,
    first_line,
    normalise_test_identity,
    parse_time,
    read_chunks,
)

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
SAMPLE_CHARS = 200
_ID_FIELDS = ("workflow_id", "workflow_run_attempt", "job_id")


class ParsedBatch(NamedTuple):
    rows: list[dict]
    rejects: list[dict]


class _BadLine(ValueError):
    pass


def _message(result: dict) -> str | None:
    """First line of a result's message, else of its text.

    The uploader turns numeric-looking attributes into numbers, so a message can be one.
    """
    for field in ("message", "text"):
        value = result.get(field)
        message = first_line(value if value is None or isinstance(value, str) else str(value))
        if message:
            return message
    return None


def _results(record: dict) -> dict[str, list[str | None]]:
    """Result tags present on the line, each with its messages, as `Entry.from_results` takes them."""
    results: dict[str, list[str | None]] = {}
    for tag in (*OUTCOME_TAGS, *RETRY_TAGS):
        value = record.get(tag)
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(item, dict) for item in items):
            raise _BadLine(f"{tag} must be an object or a list of objects")
        results[tag] = [_message(item) for item in items]
    return results


def _optional_str(record: dict, field: str) -> str | None:
    value = record.get(field)
    if value is not None and not isinstance(value, str):
        raise _BadLine(f"{field} must be a string")
    return value


def _key_and_entry(record: object) -> tuple[tuple, Entry]:
    if not isinstance(record, dict):
        raise _BadLine("line is not a JSON object")
    ids = []
    for field in _ID_FIELDS:
        value = record.get(field)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _BadLine(f"{field} must be an integer, got {value!r}")
        ids.append(value)
    name = record.get("name")
    if not isinstance(name, str) or not name:
        raise _BadLine("name must be a non-empty string")
    invoking_file = _optional_str(record, "invoking_file")
    file, classname = normalise_test_identity(
        _optional_str(record, "classname") or "", _optional_str(record, "file"), invoking_file
    )
    if invoking_file is None:
        invoking_file = file.removesuffix(".py")
    try:
        seconds = parse_time(record.get("time"))
    except ValueError as exc:
        raise _BadLine(str(exc)) from None
    return (*ids, invoking_file, file, classname, name), Entry.from_results(seconds, _results(record))


def _lines(stream: BinaryIO, max_bytes: int, max_line_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) pairs; the line is None when it is longer than max_line_bytes.

    An over-long line is skipped without being buffered, so one huge record cannot
    exhaust memory.
    """
    number = 0
    pending = bytearray()
    too_long = False
    for chunk in read_chunks(stream, max_bytes):
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            piece = chunk[start:] if newline < 0 else chunk[start:newline]
            if not too_long:
                pending += piece
                too_long = len(pending) > max_line_bytes
                if too_long:
                    pending = bytearray()
            if newline < 0:
                break
            number += 1
            yield number, None if too_long else bytes(pending)
            pending = bytearray()
            too_long = False
            start = newline + 1
    if pending or too_long:
        yield number + 1, None if too_long else bytes(pending)


def parse_test_runs_jsonl(
    stream: BinaryIO,
    source_name: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> Iterator[ParsedBatch]:
    """Batches of `test_run` rows and of per-line rejects (the `rejects` table's columns).

    Like `junit.parse_junit`, everything is read before the first batch is yielded: lines
    of one test may be far apart, and a file that fails to read to its end raises
    ReportRejected from the first `next()` without yielding anything. Blank lines are
    skipped silently.
    """
    outcomes = Outcomes()
    rejects: list[dict] = []
    for number, line in _lines(stream, max_bytes, max_line_bytes):
        if line is not None and not line.strip():
            continue
        try:
            if line is None:
                raise _BadLine(f"line longer than {max_line_bytes} bytes")
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise _BadLine(f"invalid JSON: {exc}") from None
            key, entry = _key_and_entry(record)
        except _BadLine as exc:
            rejects.append(
                {
                    "source": source_name,
                    "location": f"{source_name}:{number}",
                    "reason": str(exc),
                    "sample": None if line is None else line[:SAMPLE_CHARS].decode("utf-8", "replace"),
                }
            )
            continue
        outcomes.add(key, entry)
    for chunk in batched(rejects, batch_size):
        yield ParsedBatch([], chunk)
    for rows in batched(outcomes.rows(), batch_size):
        yield ParsedBatch(rows, [])
