"""Type checks for fields of parsed JSON, shared by every ingest that reads archived records.

JSON gives no schema: a field may be missing, or present with another type in a payload from
another version or a misbehaving sender. Both ingest paths reject such records with the same
wording, so a reader of the `rejects` table sees one vocabulary whatever the source.
"""

from __future__ import annotations


def checked(value, kind: type | tuple[type, ...], name: str, error: type[ValueError]):
    """`value` if it is None or of `kind`, else raise `error` naming the field.

    A JSON `true` is a Python bool, which is an int: it passes only where a bool is asked for.
    """
    if value is None or (isinstance(value, kind) and (kind is bool or not isinstance(value, bool))):
        return value
    names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    raise error(f"wrong type: {name} is {type(value).__name__}, expected {names}")
