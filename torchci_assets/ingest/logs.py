"""Raw job logs in the archive: `logs/day=D/<job_id>.log[.gz]`, as GitHub Actions serves them
(timestamps and ANSI codes intact) and PyTorch keeps them under `log/<job_id>`.

A log can be hundreds of MB and one line of it megabytes (a progress bar, a dumped tensor), so
a log is read as a stream of blocks of whole lines: memory is bounded by the block and the
longest line kept (LOG_LINE_MAX_BYTES, the rest of a longer line is dropped and counted),
never by the file. What cannot be read becomes a reject of source `logs`: a name that is not
`<job id>.log[.gz]` (or a file in a sub-folder: the layout is flat), a second copy of a job's
log, a file unreadable from its first byte; a log cut short (a truncated gzip) keeps the lines
before the cut, and the reject says where it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from resources.storage import Store
from torchci_assets.ingest.lines import iter_chunks
from torchci_assets.ingest.rejects import Reject

SOURCE = "logs"
LOG_LINE_MAX_BYTES = 1 << 20
_NAME = re.compile(r"^([1-9][0-9]{0,18})\.log(\.gz)?$")


@dataclass(frozen=True)
class JobLog:
    job_id: int
    path: str  # relative to the archive root
    size: int  # bytes on storage (compressed for .gz)
    stamp: str | None = None  # which version of the file (`FileEntry.stamp`)


def list_job_logs(store: Store, day: str) -> tuple[list[JobLog], list[Reject]]:
    """The day's job logs, one per job id (sorted), and a reject for every other file there."""
    folder = f"{SOURCE}/day={day}"
    logs: dict[int, JobLog] = {}
    rejects = []
    for entry in store.list_files(folder, ("",)):
        rel = entry.path[len(folder) + 1:]
        m = _NAME.match(rel)
        if not m:
            why = "not directly in the day folder" if "/" in rel else "name is not <job id>.log or <job id>.log.gz"
            rejects.append(Reject(SOURCE, entry.path, f"not a job log: {why}", None))
            continue
        job_id = int(m.group(1))
        if job_id in logs:
            rejects.append(Reject(SOURCE, entry.path, f"second log for job {job_id} (kept {logs[job_id].path})",
                                  None))
            continue
        logs[job_id] = JobLog(job_id, entry.path, entry.size, entry.stamp)
    return sorted(logs.values(), key=lambda log: log.job_id), rejects


class LogBlocks:
    """Iterate a log's blocks of whole lines (each ends with a line break, but maybe the last).

    After iteration, `bytes_read` is the size of the (decompressed) log, `long_lines` the number
    of lines cut to LOG_LINE_MAX_BYTES and `error` what stopped the read early, if anything
    (the blocks before it were complete lines of the log).
    """

    def __init__(self, store: Store, path: str, max_line: int = LOG_LINE_MAX_BYTES):
        self.store, self.path, self.max_line = store, path, max_line
        self.bytes_read = 0
        self.long_lines = 0
        self.error: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        tail = b""  # the start of an unfinished line, at most max_line bytes
        skipping = False  # dropping the rest of a line longer than max_line
        try:
            for chunk in iter_chunks(self.store, self.path):
                self.bytes_read += len(chunk)
                if skipping:
                    cut = chunk.find(b"\n")
                    if cut < 0:
                        continue
                    chunk, skipping = chunk[cut:], False
                data = tail + chunk if tail else chunk
                last = data.rfind(b"\n")
                body, tail = data[:last + 1], data[last + 1:]
                if len(tail) > self.max_line:
                    tail, skipping = tail[:self.max_line], True
                    self.long_lines += 1
                if body:
                    yield self._cap_lines(body)
        except OSError as e:
            self.error = str(e) or type(e).__name__
        if tail:
            yield tail

    def _cap_lines(self, body: bytes) -> bytes:
        """`body` with every line longer than max_line cut to it.

        The check jumps a line-length at a time: if the window of max_line + 1 bytes after a line
        start holds a line break, no line starting before the last one in it is too long. So a
        block of ordinary lines costs a few searches, and only one with a long line is split.
        """
        pos, end = 0, len(body)
        while end - pos > self.max_line:
            last = body.rfind(b"\n", pos, pos + self.max_line + 1)
            if last < 0:
                break
            pos = last + 1
        else:
            return body
        lines = body.split(b"\n")
        self.long_lines += sum(len(line) > self.max_line for line in lines)
        return b"\n".join(line[:self.max_line] for line in lines)
