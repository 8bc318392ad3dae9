"""Type and range checks for fields of parsed JSON, shared by every ingest that reads archived records.

JSON gives no schema: a field may be missing, or present with another type in a payload from
another version or a misbehaving sender. And a JSON number has no size: `2**63` is valid JSON,
a valid Python int, and does not fit the lake's int64 columns. Every ingest rejects such
records with the same wording, so a reader of the `rejects` table sees one vocabulary whatever
the source, and one odd record never stops a day.

Two layers use this module:
- `checked` at each field an extractor reads: the reject names the field (`workflow_job.id`);
- `RowGuard` under the staging batches: when Arrow refuses a batch of rows, every value of every
  row is checked against its column's Arrow type, and the rows that do not fit become rejects
  while the others are kept. So a field an extractor forgot to check is a reject of its record,
  never an error that fails the batch and the day, and the check costs nothing while every
  batch converts (which the extractors' own checks make the normal case).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

T = TypeVar("T")
# What Arrow raises when a Python value does not fit a column.
_ARROW_REFUSALS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_FLOAT_MAX = int(1.7976931348623157e308)


def checked(value, kind: type | tuple[type, ...], name: str, error: type[ValueError], *,
            minimum: int | None = None):
    """`value` if it is None or of `kind`, else raise `error` naming the field.

    A JSON `true` is a Python bool, which is an int: it passes only where a bool is asked for.
    Integers must fit an int64 column (a double where a float is accepted too) and be at least
    `minimum` when given (ids and attempts are positive); floats must be finite.
    """
    if value is None or (kind is str and type(value) is str):
        return value
    if not isinstance(value, kind) or (isinstance(value, bool) and not _wants(kind, bool)):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise error(f"wrong type: {name} is {type(value).__name__}, expected {names}")
    if isinstance(value, int) and not isinstance(value, bool):
        if _wants(kind, float):  # a number column: any integer a double holds
            if abs(value) > _FLOAT_MAX or (minimum is not None and value < minimum):
                raise error(f"out of range: {name} = {_short(value)}")
        elif not (INT64_MIN if minimum is None else minimum) <= value <= INT64_MAX:
            low = INT64_MIN if minimum is None else minimum
            raise error(f"out of range: {name} = {_short(value)}, expected {low}..{INT64_MAX}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise error(f"out of range: {name} = {value}, expected a finite number")
    return value


def _wants(kind, t: type) -> bool:
    return kind is t or (isinstance(kind, tuple) and t in kind)


def _short(value) -> str:
    try:
        text = str(value)
    except ValueError:  # an int too long to print
        return f"an integer of about {value.bit_length() * 0.30103:.0f} digits"
    return text if len(text) <= 40 else text[:37] + "..."


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _value_problem(t: pa.DataType):
    """A function value -> problem text (None when the value fits a column of type `t`)."""
    if pa.types.is_integer(t):
        low, high = _int_range(t)

        def integer(v):
            if isinstance(v, bool) or not isinstance(v, int):
                return f"{type(v).__name__}, expected int"
            return None if low <= v <= high else f"{_short(v)} out of range {low}..{high}"
        return integer
    if pa.types.is_floating(t):
        def floating(v):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return f"{type(v).__name__}, expected a number"
            if isinstance(v, int):  # a float column takes a JSON integer, if a double can hold it
                return None if abs(v) <= _FLOAT_MAX else f"{_short(v)} out of range"
            return None if math.isfinite(v) else f"{v} is not finite"
        return floating
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return lambda v: None if isinstance(v, str) else f"{type(v).__name__}, expected str"
    if pa.types.is_boolean(t):
        return lambda v: None if isinstance(v, bool) else f"{type(v).__name__}, expected bool"
    if pa.types.is_timestamp(t):
        def timestamp(v):
            if isinstance(v, dt.datetime):
                return None
            if isinstance(v, int) and not isinstance(v, bool):
                return None if INT64_MIN <= v <= INT64_MAX else f"{_short(v)} out of range"
            return f"{type(v).__name__}, expected a timestamp"
        return timestamp
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _value_problem(t.value_type)

        def items(v):
            if not isinstance(v, (list, tuple)):
                return f"{type(v).__name__}, expected a list"
            return next((f"item {p}" for p in (item(x) for x in v if x is not None) if p), None)
        return items
    raise TypeError(f"no row check for Arrow type {t}")


class RowGuard:
    """Checks staging rows against the Arrow schema they are converted to.

    `problem(row)` takes a tuple (or a dict, by column name) and returns None when every value
    fits its column, else the first misfit, e.g. "column id: 9223372036854775808 out of range
    -9223372036854775808..9223372036854775807". Columns in `skip` are filled by the ingest
    itself (a location, a sequence number) and not checked.
    """

    def __init__(self, schema: pa.Schema, skip: tuple[str, ...] = ()):
        self.columns = [(i, f.name, _value_problem(f.type)) for i, f in enumerate(schema) if f.name not in skip]

    def problem(self, row: tuple | dict) -> str | None:
        by_name = isinstance(row, dict)
        for i, name, misfit in self.columns:
            value = row.get(name) if by_name else (row[i] if i < len(row) else None)
            if value is not None and (why := misfit(value)):
                return f"wrong type: column {name} is {why}"
        return None

    def convert(self, rows: list, build: Callable[[list], T], reject: Callable[[object, str], None]) -> T:
        """`build(rows)`; if Arrow refuses them, `build` of the rows that fit, after handing each
        misfit to `reject(row, problem)`. A misfit the guard cannot name still raises (a bug here)."""
        try:
            return build(rows)
        except _ARROW_REFUSALS:
            pass
        kept = []
        for row in rows:
            problem = self.problem(row)
            if problem is None:
                kept.append(row)
            else:
                reject(row, problem)
        return build(kept)
