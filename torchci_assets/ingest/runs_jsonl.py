"""Turn PyTorch's flattened test rows (upload_test_stats JSONL) into `test_run` rows.

Each line is one `<testcase>` element as PyTorch's uploader flattens it: its attributes
(classname, file, name, time, ...), `invoking_file`, the job's ids, and one key per result
child (`failure`, `error`, `skipped`, `rerun`, Surefire's `flakyFailure`, ...) holding a
dict with `message`/`text`, a list of such dicts when the element repeated, or null/absent.
Lines are folded with exactly the JUnit reader's semantics (`junit.Entry`, `junit.Outcomes`):
lines for the same test in the same job attempt are attempts in file order, so rows here
and rows from the XML of the same run agree.

A bad line (not JSON, not an object, missing ids or name, ids that are negative or beyond int64,
a bad time or result value, longer than `TORCHCI_MAX_LINE_BYTES`) becomes a reject for that
line and the rest of the file is kept: the lines around it are still whole. As in the XML
reader, a test one of whose lines has a bad time is dropped whole (`Outcomes.drop`). A file
that cannot be read to its end (truncated or corrupt gzip) or is over
the byte limit is rejected whole with `junit.ReportRejected`, like a report: unlike
webhook lines, these lines are not independent at the cut, since the attempts of one test
are separate lines; keeping the head would turn a test whose failing final attempt was cut
off into a pass (stock pytest writes its earlier attempts as empty, passing-looking lines).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import orjson

from torchci_assets.ingest.fields import checked
from torchci_assets.ingest.junit import (
    DEFAULT_BATCH_SIZE,
    OUTCOME_TAGS,
    RETRY_TAGS,
    Entry,
    Outcomes,
    ParsedBatch,
    batched,
    first_line,
    max_report_bytes,
    normalise_test_identity,
    parse_time,
    read_chunks,
)
from torchci_assets.ingest.lines import max_line_bytes as _max_line_bytes
from torchci_assets.ingest.lines import split_lines, too_long

SAMPLE_CHARS = 200
_ID_FIELDS = ("workflow_id", "workflow_run_attempt", "job_id")


class _BadLine(ValueError):
    """A line that cannot become a row; `key` is set when the line named its test."""

    key: tuple | None = None


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
        value = checked(record.get(field), int, field, _BadLine, minimum=1 if field == "workflow_run_attempt" else 0)
        if value is None:
            raise _BadLine(f"{field} must be an integer, got None")
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
    key = (*ids, invoking_file, file, classname, name)
    try:
        seconds = parse_time(record.get("time"))
    except ValueError as exc:
        bad = _BadLine(str(exc))
        bad.key = key
        raise bad from None
    return key, Entry.from_results(seconds, _results(record))


def parse_test_runs_jsonl(
    stream: BinaryIO,
    source_name: str,
    *,
    max_bytes: int | None = None,
    max_line_bytes: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> Iterator[ParsedBatch]:
    """Batches of `test_run` rows and of per-line rejects (the `rejects` table's columns).

    Like `junit.parse_junit`, everything is read before the first batch is yielded: lines
    of one test may be far apart, and a file that fails to read to its end raises
    ReportRejected from the first `next()` without yielding anything. Blank lines are
    skipped silently. The caps default to `max_report_bytes()` (the whole file, decompressed)
    and `lines.max_line_bytes()` (one line).
    """
    max_bytes = max_report_bytes() if max_bytes is None else max_bytes
    limit = _max_line_bytes() if max_line_bytes is None else max_line_bytes
    outcomes = Outcomes()
    rejects: list[dict] = []
    for number, line in split_lines(read_chunks(stream, max_bytes), limit):
        if line is not None and not line.strip():
            continue
        try:
            if line is None:
                raise _BadLine(too_long(limit))
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise _BadLine(f"invalid JSON: {exc}") from None
            key, entry = _key_and_entry(record)
        except _BadLine as exc:
            if exc.key is not None:
                outcomes.drop(exc.key)
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
