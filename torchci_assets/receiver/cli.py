"""`torchci serve`: the webhook and relay-callback receiver, one ASGI process (uvicorn).

Settings come from the environment (docs/relay.md, "Receiving webhooks"); a setting, the relay config
or a spool that cannot be used stops it before it listens, with exit status 2. SIGTERM (or
Ctrl-C) stops accepting, answers what is in flight, and rolls the spool into the archive.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import sys

from torchci_assets import preflight
from torchci_assets.cli_values import port
from torchci_assets.config import ConfigError
from torchci_assets.receiver.settings import ReceiverSettings, SettingsError


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def return_freed_memory() -> None:
    """Allocate request bodies (anything over 1 MiB) with mmap, so a freed one goes back to the
    system at once. glibc otherwise raises its mmap threshold to the largest block freed (up to
    32 MiB), after which 24 MiB bodies come from the heap, and the heap keeps the memory of
    bodies long gone (the RSS of a receiver that held 40 of them stayed at 842 MB)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 1 << 20)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="torchci serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container)")
    parser.add_argument("--port", type=port, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="lowest level of the log lines printed (default info)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not preflight.report("torchci serve", credentials=False):
        return 2
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    """Listen until stopped. uvicorn, the app and the spool (pyarrow) load only now, so `--help`,
    a usage error and a bad setting answer without them."""
    import uvicorn

    from torchci_assets.receiver.app import ConfigWatcher, Receiver, build_app
    from torchci_assets.receiver.spool import SpoolError, check_spool_dir

    try:
        settings = ReceiverSettings.from_env()
        check_spool_dir(settings.spool_dir)
        receiver = Receiver(settings, config=ConfigWatcher())
        receiver.lock()
    except (SettingsError, ConfigError, SpoolError) as exc:
        print(f"torchci serve: {exc}", file=sys.stderr)
        return 2
    return_freed_memory()
    config = uvicorn.Config(build_app(receiver), host=args.host, port=args.port, loop="uvloop", http=receiver.protocol(),
                            lifespan="on", access_log=False, log_level=args.log_level, backlog=2048,
                            timeout_graceful_shutdown=30, server_header=False)
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1
