"""`torchci serve`: the webhook and relay-callback receiver, one ASGI process (uvicorn).

Settings come from the environment (docs/relay.md, "Receiving webhooks"); a setting, the relay config
or a spool that cannot be used stops it before it listens, with exit status 2. SIGTERM (or
Ctrl-C) stops accepting, answers what is in flight, and rolls the spool into the archive.
"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from torchci_assets.config import ConfigError
from torchci_assets.receiver.app import ConfigWatcher, Receiver, build_app
from torchci_assets.receiver.settings import ReceiverSettings, SettingsError
from torchci_assets.receiver.spool import SpoolError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="torchci serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="lowest level of the log lines printed (default info)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        receiver = Receiver(ReceiverSettings.from_env(), config=ConfigWatcher())
        receiver.lock()
    except (SettingsError, ConfigError, SpoolError) as exc:
        print(f"torchci serve: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(build_app(receiver), host=args.host, port=args.port, loop="uvloop", http="httptools",
                            lifespan="on", access_log=False, log_level=args.log_level, backlog=2048,
                            timeout_graceful_shutdown=30, server_header=False)
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1
