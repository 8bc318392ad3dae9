"""The receiver's settings, from the environment (every one has a default but the webhook secret).

Secrets are held in a `Secrets` object whose repr never shows them, so a settings object can
be logged or shown in an error without leaking what signs GitHub's deliveries.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
# The audience pytorch/test-infra's cross-repo-ci-relay-callback action mints its token for.
RELAY_AUDIENCE = "pytorch-cross-repo-ci-relay"
# The events the lake reads (webhook_events keeps any event; the typed tables read these) and
# `issues`, which DISABLED-test issues come from. "*" accepts every event.
DEFAULT_EVENTS = ("workflow_job", "workflow_run", "push", "pull_request", "issues", "issue_comment", "check_run",
                  "check_suite")  # the last two: re-runs from the Checks tab (the relay)
MIB = 1 << 20

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "ki": 1 << 10, "m": 1000**2, "mb": 1000**2,
          "mib": MIB, "mi": MIB, "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "gi": 1 << 30}


# Every variable `from_env` reads (the storage's own S3 variables aside).
ENV_VARS = ("TORCHCI_ARCHIVE_URI", "TORCHCI_LAKE_URI", "TORCHCI_SPOOL_DIR", "TORCHCI_RECEIVER_HOST",
            "TORCHCI_WEBHOOK_SECRETS", "TORCHCI_WEBHOOK_SECRETS_FILE", "TORCHCI_WEBHOOK_EVENTS", "TORCHCI_WEBHOOK_MAX_BYTES",
            "TORCHCI_CALLBACK_MAX_BYTES", "TORCHCI_OIDC_ISSUER", "TORCHCI_OIDC_AUDIENCE", "TORCHCI_OIDC_JWKS_URL",
            "TORCHCI_OIDC_LEEWAY_S", "TORCHCI_CALLBACK_RATE_LIMIT", "TORCHCI_ROLL_INTERVAL_S", "TORCHCI_ROLL_BYTES",
            "TORCHCI_PUSH_ROLL_S", "TORCHCI_HEADER_TIMEOUT_S", "TORCHCI_BODY_TIMEOUT_S", "TORCHCI_INFLIGHT_BYTES",
            "TORCHCI_SPOOL_HIGH_WATER", "TORCHCI_ROLL_BACKLOG_S")


class SettingsError(ValueError):
    """A variable that cannot be used; the message names it and says what it should be."""


class Secrets:
    """Webhook secrets (several at once while one is rotated), never shown in a repr or a log."""

    def __init__(self, values: tuple[bytes, ...]):
        self.values = values

    def __repr__(self) -> str:
        return f"Secrets(<{len(self.values)} hidden>)"

    def __bool__(self) -> bool:
        return bool(self.values)


def parse_size(text: str, name: str) -> int:
    """Bytes from `1048576`, `64MB`, `64MiB` or `1.5GiB`."""
    m = _SIZE_RE.match(text)
    if not m:
        raise SettingsError(f"{name}={text!r}: expected a size such as 65536, 64MB or 64MiB")
    value = int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    if value < 1:
        raise SettingsError(f"{name}={text!r}: must be at least one byte")
    return value


def _number(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a number") from None
    if not value >= minimum:
        raise SettingsError(f"{name}={raw!r}: must be at least {minimum:g}")
    return value


def webhook_secrets(env: Mapping[str, str]) -> tuple[bytes, ...]:
    """The secrets of TORCHCI_WEBHOOK_SECRETS (comma-separated, trimmed) and of the file that
    TORCHCI_WEBHOOK_SECRETS_FILE names (one a line, kept byte for byte but the line's end): GitHub
    takes any text as a secret, and one with a comma or an edge space can only come from the file.
    An unreadable file is an error naming the path, never its content."""
    secrets = [s.strip().encode() for s in env.get("TORCHCI_WEBHOOK_SECRETS", "").split(",") if s.strip()]
    path = (env.get("TORCHCI_WEBHOOK_SECRETS_FILE") or "").strip()
    if path:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise SettingsError(f"TORCHCI_WEBHOOK_SECRETS_FILE={path!r}: cannot be read ({e.strerror}); name a "
                                "file holding the webhook secret, one a line") from None
        secrets += [line.rstrip(b"\r") for line in data.split(b"\n") if line.rstrip(b"\r")]
    return tuple(dict.fromkeys(secrets))


def _host_name(raw: str) -> str:
    """The host part of `<host>-<start>` archive names, made safe for a path (the start has no
    '-', so a host name with dashes still splits back at the last one)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", raw.strip()) or "receiver"
    return name[:63]


@dataclass(frozen=True)
class ReceiverSettings:
    archive_uri: str = "./var/archive"
    lake_uri: str = "./var/lake"
    spool_dir: Path = Path("./var/spool")
    host: str = "receiver"
    webhook_secrets: Secrets = field(default_factory=lambda: Secrets(()))
    events: frozenset[str] | None = frozenset(DEFAULT_EVENTS)  # None: every event
    webhook_max_bytes: int = 25 * MIB
    callback_max_bytes: int = 1 * MIB
    oidc_issuer: str = GITHUB_ISSUER
    oidc_audience: str = RELAY_AUDIENCE
    oidc_jwks_url: str = f"{GITHUB_ISSUER}/.well-known/jwks"
    oidc_leeway_s: float = 60.0
    callbacks_per_minute: float = 100.0
    roll_interval_s: float = 30.0  # half of what landing -> outputs may add (docs/operations.md, "Freshness")
    roll_bytes: int = 64 * MIB
    push_roll_s: float = 1.0
    # What an unauthenticated client can hold: a request's headers must arrive within
    # header_timeout_s and its body within body_timeout_s (GitHub gives up on a delivery after
    # 10 s); bodies held in memory across all connections are capped at inflight_bytes.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 15.0
    inflight_bytes: int = 256 * MIB
    # Readiness: not ready (and deliveries refused) above this many spool bytes, so the pod's
    # emptyDir (2 GiB in deploy/receiver.yaml) never fills; not ready while the oldest sealed
    # segment waits longer than roll_backlog_s for the archive (0: never).
    spool_high_water: int = 1536 * MIB
    roll_backlog_s: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ReceiverSettings":
        env = os.environ if env is None else env
        secrets = webhook_secrets(env)
        events_raw = env.get("TORCHCI_WEBHOOK_EVENTS", "").strip()
        if events_raw == "*":
            events = None
        elif events_raw:
            events = frozenset(e.strip() for e in events_raw.split(",") if e.strip())
            if not events:  # every delivery would be acknowledged and dropped: GitHub would show them delivered
                raise SettingsError(f"TORCHCI_WEBHOOK_EVENTS={events_raw!r}: names no event; list the events to "
                                    "keep, comma-separated, or * for all")
        else:
            events = frozenset(DEFAULT_EVENTS)
        issuer = (env.get("TORCHCI_OIDC_ISSUER") or GITHUB_ISSUER).strip().rstrip("/")
        settings = cls(
            archive_uri=env.get("TORCHCI_ARCHIVE_URI") or "./var/archive",
            lake_uri=env.get("TORCHCI_LAKE_URI") or "./var/lake",
            spool_dir=Path(env.get("TORCHCI_SPOOL_DIR") or "./var/spool"),
            host=_host_name(env.get("TORCHCI_RECEIVER_HOST") or socket.gethostname()),
            webhook_secrets=Secrets(secrets),
            events=events,
            webhook_max_bytes=parse_size(env.get("TORCHCI_WEBHOOK_MAX_BYTES") or "25MiB", "TORCHCI_WEBHOOK_MAX_BYTES"),
            callback_max_bytes=parse_size(env.get("TORCHCI_CALLBACK_MAX_BYTES") or "1MiB", "TORCHCI_CALLBACK_MAX_BYTES"),
            oidc_issuer=issuer,
            oidc_audience=(env.get("TORCHCI_OIDC_AUDIENCE") or RELAY_AUDIENCE).strip(),
            oidc_jwks_url=(env.get("TORCHCI_OIDC_JWKS_URL") or f"{issuer}/.well-known/jwks").strip(),
            oidc_leeway_s=_number(env, "TORCHCI_OIDC_LEEWAY_S", 60.0, 0.0),
            callbacks_per_minute=_number(env, "TORCHCI_CALLBACK_RATE_LIMIT", 100.0, 1.0),
            roll_interval_s=_number(env, "TORCHCI_ROLL_INTERVAL_S", 30.0, 0.1),
            roll_bytes=parse_size(env.get("TORCHCI_ROLL_BYTES") or "64MiB", "TORCHCI_ROLL_BYTES"),
            push_roll_s=_number(env, "TORCHCI_PUSH_ROLL_S", 1.0, 0.0),
            header_timeout_s=_number(env, "TORCHCI_HEADER_TIMEOUT_S", 10.0, 0.1),
            body_timeout_s=_number(env, "TORCHCI_BODY_TIMEOUT_S", 15.0, 0.1),
            inflight_bytes=parse_size(env.get("TORCHCI_INFLIGHT_BYTES") or "256MiB", "TORCHCI_INFLIGHT_BYTES"),
            spool_high_water=parse_size(env.get("TORCHCI_SPOOL_HIGH_WATER") or "1536MiB", "TORCHCI_SPOOL_HIGH_WATER"),
            roll_backlog_s=_number(env, "TORCHCI_ROLL_BACKLOG_S", 0.0, 0.0),
        )
        if settings.inflight_bytes * 3 // 4 < settings.webhook_max_bytes:
            raise SettingsError(f"TORCHCI_INFLIGHT_BYTES={settings.inflight_bytes}: must be at least 4/3 of "
                                f"TORCHCI_WEBHOOK_MAX_BYTES ({settings.webhook_max_bytes}), or no delivery of the "
                                "largest size could be read")
        return settings
