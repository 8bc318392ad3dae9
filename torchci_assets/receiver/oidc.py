"""GitHub Actions OIDC tokens: who is calling `/relay/callback`.

A downstream job mints a token (`core.getIDToken(audience)`) whose `repository` claim GitHub
vouches for; that claim, not anything in the body, is the caller's identity. Verification is
written here on `cryptography` rather than with a JWT library because only one shape is
accepted and every rule is then visible in one place:

- the header's `alg` must be exactly `RS256`. `none` (an unsigned token) and `HS256` (an
  HMAC "signed" with the public key, which anyone can fetch) are refused before any key is
  looked at, as is any `crit` extension;
- the key is the issuer's JWKS entry named by the header's `kid`: an RSA key of at least
  2048 bits, meant for signatures. An unknown `kid` refreshes the key set once (GitHub rotates
  its keys), at most every `min_refresh_s` so random `kid`s cannot hammer the issuer;
- the claims: `iss` equal to the configured issuer, the audience in `aud`, `exp` in the future
  and `iat`/`nbf` not in the future, each with a small leeway for clock skew; `repository` a
  valid `owner/name`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import time
from collections.abc import Callable

import orjson
import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from resources.names import repo_name_problem

log = logging.getLogger("torchci.receiver")

ALGORITHM = "RS256"
MIN_RSA_BITS = 2048
MAX_TOKEN_CHARS = 16 * 1024
MAX_JWKS_BYTES = 1 << 20
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


class TokenError(Exception):
    """A token that does not prove an identity (HTTP 401). `reason` is a short label for metrics."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class KeysUnavailable(Exception):
    """The issuer's keys could not be fetched: not the caller's fault (HTTP 503)."""


def b64url_decode(part: str) -> bytes:
    if not _B64URL.match(part):
        raise TokenError("malformed", "the token is not base64url")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("malformed", "the token is not base64url") from None


def _json_object(data: bytes, what: str) -> dict:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise TokenError("malformed", f"the token's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError("malformed", f"the token's {what} is not a JSON object")
    return value


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise TokenError("missing", "no Authorization header (expected 'Bearer <GitHub Actions OIDC token>')")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise TokenError("malformed", "the Authorization header is not 'Bearer <token>'")
    return token.strip()


def parse_token(token: str) -> tuple[dict, dict, bytes, bytes]:
    """(header, claims, signing input, signature) of a compact JWS, unverified."""
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenError("malformed", "the token is too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("malformed", "the token is not a signed JWT (header.claims.signature)")
    header = _json_object(b64url_decode(parts[0]), "header")
    claims = _json_object(b64url_decode(parts[1]), "claims")
    return header, claims, f"{parts[0]}.{parts[1]}".encode("ascii"), b64url_decode(parts[2])


def check_header(header: dict) -> str:
    """The header's `kid` once the header is one this verifier accepts."""
    alg = header.get("alg")
    if alg != ALGORITHM:
        raise TokenError("algorithm", f"token algorithm {str(alg)[:20]!r} refused (only {ALGORITHM} is accepted)")
    if "crit" in header:
        raise TokenError("malformed", "the token has critical header extensions this verifier does not know")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise TokenError("malformed", "the token's header has no key id (kid)")
    return kid


def check_claims(claims: dict, issuer: str, audience: str, now: float, leeway_s: float) -> str:
    """The verified `repository` claim, once every time and origin claim holds."""
    if claims.get("iss") != issuer:
        raise TokenError("issuer", f"token issuer {str(claims.get('iss'))[:100]!r} is not {issuer!r}")
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    if audience not in audiences:
        raise TokenError("audience", f"token audience {str(aud)[:100]!r} does not include {audience!r}")
    exp, iat, nbf = claims.get("exp"), claims.get("iat"), claims.get("nbf")
    for name, value in (("exp", exp), ("iat", iat), ("nbf", nbf)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TokenError("malformed", f"token claim {name} is not a number")
    if exp is None or iat is None:
        raise TokenError("malformed", "the token has no exp or iat claim")
    if now > exp + leeway_s:
        raise TokenError("expired", "the token has expired")
    if iat > now + leeway_s or (nbf is not None and nbf > now + leeway_s):
        raise TokenError("not_yet_valid", "the token is not valid yet (iat or nbf in the future)")
    repo = claims.get("repository")
    problem = repo_name_problem(repo) if isinstance(repo, str) else "missing"
    if problem:
        raise TokenError("repository", f"the token's repository claim is unusable: {problem}")
    return repo


def rsa_key(jwk: dict) -> rsa.RSAPublicKey | None:
    """The public key of one JWKS entry, or None when it is not an RS256 signing key."""
    if jwk.get("kty") != "RSA" or jwk.get("use", "sig") != "sig" or jwk.get("alg", ALGORITHM) != ALGORITHM:
        return None
    try:
        n = int.from_bytes(b64url_decode(str(jwk["n"])), "big")
        e = int.from_bytes(b64url_decode(str(jwk["e"])), "big")
        key = rsa.RSAPublicNumbers(e, n).public_key()
    except (KeyError, TokenError, ValueError):
        return None
    return key if key.key_size >= MIN_RSA_BITS else None


def fetch_jwks(url: str) -> dict[str, rsa.RSAPublicKey]:
    """`kid -> key` for the usable keys at `url` (blocking; run it in a thread)."""
    try:
        resp = requests.get(url, timeout=(3.05, 10), headers={"Accept": "application/json"}, stream=True)
        resp.raise_for_status()
        body = resp.raw.read(MAX_JWKS_BYTES + 1, decode_content=True)
    except requests.RequestException as exc:
        raise KeysUnavailable(f"fetching the OIDC keys from {url} failed: {exc}") from None
    if len(body) > MAX_JWKS_BYTES:
        raise KeysUnavailable(f"the OIDC key set at {url} is larger than {MAX_JWKS_BYTES} bytes")
    try:
        keys = orjson.loads(body).get("keys")
    except (orjson.JSONDecodeError, AttributeError):
        raise KeysUnavailable(f"the OIDC key set at {url} is not a JWKS document") from None
    out = {}
    for jwk in keys if isinstance(keys, list) else []:
        key = rsa_key(jwk) if isinstance(jwk, dict) else None
        if key is not None and isinstance(jwk.get("kid"), str):
            out[jwk["kid"]] = key
    return out


class KeySet:
    """The issuer's keys by `kid`, fetched lazily, refreshed when stale or on an unknown `kid`.

    Fetches (successful or not) are at least `min_refresh_s` apart, and requests arriving while
    one is under way wait for its result. A failed fetch keeps the keys already known; a token
    whose key is not known then gets KeysUnavailable (503), not a 401, since it may be valid.
    """

    def __init__(self, url: str, fetch: Callable[[str], dict] = fetch_jwks, ttl_s: float = 3600.0,
                 min_refresh_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.url, self._fetch, self.ttl_s, self.min_refresh_s, self._clock = url, fetch, ttl_s, min_refresh_s, clock
        self.keys: dict[str, rsa.RSAPublicKey] = {}
        self.fetched_at: float | None = None  # last successful fetch
        self.attempted_at: float | None = None
        self.attempts = 0
        self.last_error: str | None = None
        self._inflight: asyncio.Future | None = None

    async def key(self, kid: str) -> rsa.RSAPublicKey:
        if self._inflight is None and self._should_refresh(kid):
            self._inflight = asyncio.ensure_future(self._refresh())
        if self._inflight is not None:
            inflight = self._inflight
            await asyncio.shield(inflight)
            if self._inflight is inflight:
                self._inflight = None
        if kid in self.keys:
            return self.keys[kid]
        if self.last_error:
            raise KeysUnavailable(self.last_error)
        raise TokenError("unknown_key", f"no key {kid[:64]!r} in the issuer's key set")

    def _should_refresh(self, kid: str) -> bool:
        now = self._clock()
        if self.attempted_at is not None and now - self.attempted_at < self.min_refresh_s:
            return False
        return kid not in self.keys or self.fetched_at is None or now - self.fetched_at > self.ttl_s

    async def _refresh(self) -> None:
        self.attempted_at, self.attempts = self._clock(), self.attempts + 1
        try:
            keys = await asyncio.to_thread(self._fetch, self.url)
        except KeysUnavailable as exc:
            self.last_error = str(exc)
            log.warning("%s; %d key(s) cached", exc, len(self.keys))
            return
        self.keys, self.fetched_at, self.last_error = keys, self._clock(), None
        log.info("OIDC keys fetched from %s: %d usable", self.url, len(keys))


class OidcVerifier:
    def __init__(self, issuer: str, audience: str, keys: KeySet, leeway_s: float = 60.0,
                 clock: Callable[[], float] = time.time):
        self.issuer, self.audience, self.keys, self.leeway_s, self._clock = issuer, audience, keys, leeway_s, clock

    async def repository(self, authorization: str | None) -> str:
        """The verified `repository` claim of the bearer token; TokenError or KeysUnavailable otherwise."""
        header, claims, signing_input, signature = parse_token(bearer_token(authorization))
        key = await self.keys.key(check_header(header))
        try:
            key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise TokenError("signature", "the token's signature does not verify") from None
        return check_claims(claims, self.issuer, self.audience, self._clock(), self.leeway_s)
