"""moto's S3 server for the tests: what `python -m moto.server` runs, less two costs paid on every
request that were most of the server's CPU over the test suite.

- moto works out which of its services a request is for from a host name, and for each request
  lists its own package folder (some 200 `isdir`s) and tries up to 180 URL patterns. The answer
  depends only on the name, and the tests send a handful, so it is worked out once per name.
- werkzeug writes a log line per request; the tests throw the server's output away, so none is made.

The server is otherwise moto's own, answering HTTP on 127.0.0.1 as it would to any S3 client.

    python tests/moto_s3.py PORT
"""

from __future__ import annotations

import logging
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering the service each host name is for."""

    def __init__(self):
        super().__init__(create_backend_app)
        self.backends: dict[str | None, object] = {}

    def get_backend_for_host(self, host: str | None):
        # moto calls this holding self.lock, so the dict needs no lock of its own
        if host not in self.backends:
            self.backends[host] = super().get_backend_for_host(host)
        return self.backends[host]


def serve(port: int, app) -> None:
    """Answer with WSGI application `app` (a Dispatcher, or one wrapping it) on 127.0.0.1:`port`."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), Dispatcher())
