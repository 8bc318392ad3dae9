"""The two archive lines the receiver writes, byte for byte what the ingest reads.

- `webhooks/`: `{"event", "delivery_id", "received_at", "payload"}`, the payload as GitHub sent it;
- `ci-results/`: `{"trusted": {"verified_repo", "downstream_repo_level", "ci_metrics": {"queue_time",
  "execution_time"}}, "untrusted": {"callback_payload": <body as sent>}, "received_at"}`.

The bodies are embedded as received rather than parsed and dumped again, which would cost time
and could change them (number formats, key order, escapes): the archive keeps what was signed.
`received_at` is the receipt in UTC with milliseconds, `2026-11-01T12:00:00.123Z`.
"""

from __future__ import annotations

import datetime as dt

import orjson


def one_line(raw: bytes) -> bytes:
    """A JSON document on one line, byte for byte otherwise: a raw newline can only be whitespace
    between tokens (JSON strings cannot hold one), so it becomes a space."""
    return raw.replace(b"\r", b" ").replace(b"\n", b" ") if b"\n" in raw or b"\r" in raw else raw


def iso_utc(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ci_result_line(repo: str, level: str, queue_time: float | None, execution_time: float | None,
                   raw_body: bytes, received: dt.datetime) -> bytes:
    """The archive line for one callback, its body embedded verbatim."""
    trusted = orjson.dumps({"verified_repo": repo, "downstream_repo_level": level,
                            "ci_metrics": {"queue_time": queue_time, "execution_time": execution_time}})
    return (b'{"trusted":' + trusted + b',"untrusted":{"callback_payload":' + one_line(raw_body)
            + b'},"received_at":"' + iso_utc(received).encode() + b'"}\n')


def webhook_line(event: str, delivery_id: str, received: dt.datetime, raw_body: bytes) -> bytes:
    """The archive line for one webhook delivery, its payload embedded verbatim."""
    return (b'{"event":' + orjson.dumps(event) + b',"delivery_id":' + orjson.dumps(delivery_id)
            + b',"received_at":"' + iso_utc(received).encode() + b'","payload":' + one_line(raw_body) + b"}\n")
