"""Hostile HTTP clients for `torchci serve`, over raw sockets on 127.0.0.1: a body sent whole but
its last byte, headers one byte a second (slowloris), a client hanging up mid-body. Each reports
what the server answered and when it closed the connection. Used by the tests and bench-serve."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

CHUNK = 1 << 20


@dataclass
class Outcome:
    status: int | None  # the status line the server sent, None when it closed without one
    closed_after_s: float | None  # from the request's start to the server closing; None: still open


def request_head(size: int, signature: str = "sha256=" + "0" * 64, path: str = "/github/webhook") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"X-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: {signature}\r\nContent-Length: {size}\r\n\r\n").encode()


async def _until_closed(reader: asyncio.StreamReader, t0: float, give_up_s: float) -> Outcome:
    head = b""
    try:
        async with asyncio.timeout(give_up_s):
            while chunk := await reader.read(65536):
                head += chunk[:64] if len(head) < 64 else b""
    except TimeoutError:
        return Outcome(_status(head), None)
    except ConnectionError:
        pass
    return Outcome(_status(head), time.monotonic() - t0)


def _status(head: bytes) -> int | None:
    return int(head[9:12]) if head.startswith(b"HTTP/1.1 ") and head[9:12].isdigit() else None


async def _connect(port: int, give_up_s: float) -> tuple[asyncio.StreamWriter, asyncio.Task]:
    """A connection and the task that waits for the server to close it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return writer, asyncio.create_task(_until_closed(reader, time.monotonic(), give_up_s))


async def _outcome(writer: asyncio.StreamWriter, closed: asyncio.Task) -> Outcome:
    try:
        return await closed
    finally:
        writer.close()


async def withheld_body(port: int, size: int, give_up_s: float) -> Outcome:
    """Send the headers of a `size`-byte webhook with a made-up signature and all of its body but
    the last byte, as fast as the server takes it; then wait for the server to close."""
    writer, closed = await _connect(port, give_up_s)
    block = b"x" * CHUNK
    try:
        writer.write(request_head(size))
        left = size - 1
        while left and not closed.done():
            writer.write(block[:min(left, CHUNK)])
            left -= min(left, CHUNK)
            await writer.drain()
    except ConnectionError:
        pass
    return await _outcome(writer, closed)


async def slowloris(port: int, every_s: float, give_up_s: float) -> Outcome:
    """Send a request's headers one byte every `every_s` seconds; wait for the server to close."""
    writer, closed = await _connect(port, give_up_s)
    head = request_head(100)
    try:
        for i in range(len(head)):
            if closed.done():
                break
            writer.write(head[i:i + 1])
            await writer.drain()
            await asyncio.wait([closed], timeout=every_s)
    except ConnectionError:
        pass
    return await _outcome(writer, closed)


async def hang_up_mid_body(port: int, size: int = 100_000, sent: int = 1000) -> None:
    """Send the headers and the first `sent` bytes of a body, then close the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_head(size) + b"{" + b" " * (sent - 1))
    await writer.drain()
    await asyncio.sleep(0.2)  # the endpoint is reading the body by now
    writer.close()
    await writer.wait_closed()
