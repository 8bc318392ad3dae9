"""Deadlines on reading a request: its headers within one timeout, its body within another.

uvicorn has neither (only an idle keep-alive timeout), so a client sending its headers one byte a
second (slowloris) or withholding the last byte of a body holds its connection, and the body read
so far, for as long as it likes. This is uvicorn's httptools protocol with two timers:

- the header deadline runs from the connection's start, or a request's first byte on a kept-alive
  connection, until its headers are complete;
- the body deadline runs from the end of the headers until the body is complete.

When one expires the client gets `408 Request Timeout` (if no answer was started) and the connection
is closed; the endpoint still reading the body sees a disconnect and drops what it held.

Nor does uvicorn bound the size of a request's line and headers: httptools keeps all of them, so
one client streaming headers as fast as it can within the header deadline holds gigabytes. Past
`max_header_bytes` of them the client gets `431 Request Header Fields Too Large` and is closed.
Headers are counted after each chunk is parsed and only while they are incomplete, so the start of
a body sharing a chunk with the end of its headers never counts: held at most the limit and one
read of the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

TIMED_OUT_KEY = "torchci.timed_out"  # set in the request's scope: "body" when its body deadline expired
REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                   b"content-length: 32\r\n\r\n{\"detail\": \"request too slow\"}\r\n")
HEADERS_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                     b"connection: close\r\ncontent-length: 35\r\n\r\n{\"detail\": \"request headers too large\"}")
# GitHub's webhook headers come to ~1 KB; a browser's, with cookies, to a few.
MAX_HEADER_BYTES = 64 << 10


class DeadlineProtocol(HttpToolsProtocol):
    """Set the class attributes in a subclass (`deadline_protocol`); uvicorn instantiates it per connection."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 15.0
    max_header_bytes: int = MAX_HEADER_BYTES
    on_timeout: Callable[[str], None] = staticmethod(lambda phase: None)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_headers = True
        self._header_bytes = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_headers or self.transport is None or self.transport.is_closing():
            return
        self._header_bytes += len(data)
        if self._header_bytes > self.max_header_bytes:
            self._disarm()
            self.transport.write(HEADERS_TOO_LARGE)
            self.transport.close()
            self.on_timeout("header_size")

    def _arm(self, seconds: float, phase: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm(self.header_timeout_s, "header")

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers, self._header_bytes = True, 0
        self._arm(self.header_timeout_s, "header")

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._arm(self.body_timeout_s, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _expired(self, phase: str) -> None:
        self._deadline = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        cycle = self.cycle if phase == "body" else None
        if phase == "body" and self.scope is not None:
            self.scope[TIMED_OUT_KEY] = phase
        if cycle is None or not cycle.response_started:
            transport.write(REQUEST_TIMEOUT)
        transport.close()
        self.on_timeout(phase)


def deadline_protocol(header_timeout_s: float, body_timeout_s: float,
                      on_timeout: Callable[[str], None]) -> type[DeadlineProtocol]:
    """A protocol class for `uvicorn.Config(http=...)` with these deadlines; `on_timeout(phase)` is
    called on the event loop for each connection closed ("header", "body", or "header_size" for
    headers over MAX_HEADER_BYTES)."""
    return type("DeadlineProtocol", (DeadlineProtocol,), {
        "header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s,
        "on_timeout": staticmethod(on_timeout)})
