"""GitHub's webhook signature: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.

The HMAC is computed over the bytes received, before any parsing, and compared in constant
time. Several secrets may be valid at once so a secret can be rotated without losing
deliveries: set old and new, change the secret in GitHub, then drop the old one.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = "sha256="


def signature_for(secret: bytes, body: bytes) -> str:
    """The header value GitHub sends for `body` signed with `secret`."""
    return PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


class SignatureCheck:
    """The HMAC of a body under each secret, fed chunk by chunk as the body arrives, so a large
    body is never hashed in one pass that would hold the event loop (24 MiB: tens of ms)."""

    def __init__(self, secrets: tuple[bytes, ...]):
        self._macs = [hmac.new(secret, digestmod=hashlib.sha256) for secret in secrets]

    def update(self, chunk: bytes) -> None:
        for mac in self._macs:
            mac.update(chunk)

    def matches(self, header: str | None) -> bool:
        """True when `header` is the signature of the body under one of the secrets.

        Every secret is tried even after a match, so the time taken does not tell which one
        (or whether an early one) matched.
        """
        if not header or not header.startswith(PREFIX) or not self._macs:
            return False
        given = header[len(PREFIX):].strip().lower().encode()
        ok = False
        for mac in self._macs:
            ok |= hmac.compare_digest(mac.hexdigest().encode(), given)
        return ok


def signature_matches(secrets: tuple[bytes, ...], body: bytes, header: str | None) -> bool:
    """True when `header` is the signature of `body` under one of `secrets`."""
    check = SignatureCheck(secrets)
    check.update(body)
    return check.matches(header)
