"""A local S3 server (moto's) that writes down every request it answers, by S3 operation: what the
S3 tests' server is, plus a log, so a test can bound the requests a refresh makes and a benchmark
can say where they go. The log is kept server-side: it counts what pyarrow's C++ client really
sends (ranged reads of Parquet footers, listings page by page), which no Python-level wrapper sees.

    python tests/counting_s3.py PORT LOG   # one line per request: time, operation, bucket/key or prefix
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs


def operation(method: str, path: str, query: dict, headers: dict) -> str:
    """The S3 operation a request is, from its method, path, query and headers."""
    is_bucket = path.strip("/").count("/") == 0
    if method == "GET":
        return "ListObjects" if is_bucket else "GetObject"
    if method == "HEAD":
        return "HeadBucket" if is_bucket else "HeadObject"
    if method == "PUT":
        if "uploadId" in query:
            return "UploadPart"
        return "CopyObject" if "HTTP_X_AMZ_COPY_SOURCE" in headers else ("CreateBucket" if is_bucket else "PutObject")
    if method == "POST":
        if "delete" in query:
            return "DeleteObjects"
        return "CreateMultipartUpload" if "uploads" in query else "CompleteMultipartUpload"
    return "DeleteObject" if method == "DELETE" else method


def counting(app, log_path: str):
    """`app` (a WSGI application) writing a line per request to `log_path` before answering it."""
    log = open(log_path, "a", buffering=1)

    def middleware(environ, start_response):
        path, query = environ.get("PATH_INFO", ""), parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        op = operation(environ["REQUEST_METHOD"], path, query, environ)
        where = path.lstrip("/") + ("/" + query["prefix"][0] if "prefix" in query else "")
        log.write(f"{time.time():.6f} {op} {where}\n")
        return app(environ, start_response)

    return middleware


class CountingS3:
    """The server as a process on 127.0.0.1:`port`, logging to `log`."""

    def __init__(self, port: int, log: Path, unauthenticated: int | None = None):
        """`unauthenticated`: moto checks credentials after this many requests (none it knows), as
        AWS refuses a deleted or mistyped key; by default it takes any."""
        self.endpoint, self.log = f"http://127.0.0.1:{port}", log
        env = dict(os.environ)
        if unauthenticated is not None:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(unauthenticated)
        self.proc = subprocess.Popen([sys.executable, __file__, str(port), str(log)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def requests(self, since: float = 0.0) -> list[tuple[float, str, str]]:
        """(time, operation, where) of every request answered from `since` (a time.time()) on."""
        out = []
        for line in self.log.read_text().splitlines():
            at, op, where = (line.split(" ", 2) + [""])[:3]
            if float(at) >= since:
                out.append((float(at), op, where))
        return out

    def counts(self, since: float = 0.0) -> collections.Counter:
        return collections.Counter(op for _, op, _ in self.requests(since))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@contextlib.contextmanager
def serving(log: Path, bucket: str, unauthenticated: int | None = None):
    """A CountingS3 on a free port, with `bucket` made and the environment set for it (conftest's
    `s3_environment`), stopped afterwards."""
    from conftest import free_port, s3_environment, wait_for_port

    port = free_port()
    s3 = CountingS3(port, log, unauthenticated)
    try:
        wait_for_port(port, s3.proc)
        with s3_environment(s3.endpoint, bucket):
            yield s3
    finally:
        s3.stop()


def main() -> None:
    from moto_s3 import Dispatcher, serve

    port, log = int(sys.argv[1]), sys.argv[2]
    serve(port, counting(Dispatcher(), log))


if __name__ == "__main__":
    os.environ.setdefault("MOTO_CALL_RESET_API", "false")
    main()
