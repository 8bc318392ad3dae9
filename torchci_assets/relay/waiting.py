"""Which deliveries a relay sensor waits for, so the receiver rolls them into the archive
within `TORCHCI_PUSH_ROLL_S` instead of the usual minute: pushes to the relayed branches,
the pull_request / check_run / check_suite deliveries the relay acts on, and L3/L4 callbacks
about pull requests (each may become an upstream check run)."""

from __future__ import annotations

import datetime as dt

from torchci_assets.config import RelayConfig
from torchci_assets.relay.pull_requests import relay_event
from torchci_assets.relay.pushes import push_commit


def relay_waits_for(event: str, payload: dict, delivery_id: str, received_at: dt.datetime,
                    config: RelayConfig) -> bool:
    if event == "push":
        return push_commit(payload, delivery_id, received_at, config)[0] is not None
    return relay_event(event, delivery_id, received_at, payload, config)[0] is not None


def makes_check_run(level: str, raw_body: bytes) -> bool:
    """An L3/L4 callback echoing a pull_request dispatch (cheap: no second parse of the body)."""
    return level in ("L3", "L4") and b'"pull_request"' in raw_body
