"""Whether the GitHub credentials in the environment can be used, and the GitHub App's JWT.

Apart from the client (resources.github, which loads Dagster and requests) so the preflight can
check the credentials in a moment, before a command loads anything heavy.
"""

from __future__ import annotations

import base64
import json
import os
import time


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def token_problem(token: str) -> str | None:
    """Why GITHUB_TOKEN cannot be sent as a token (never showing it), or None. Secrets mounted
    from files end with a newline, which is trimmed; anything else is not a token."""
    token = token.strip()
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        return "GITHUB_TOKEN is not a token: it holds spaces or control characters; set it to the token alone"
    return None


def app_missing(app_id: str | None, private_key_pem: str | None) -> str | None:
    """Which GitHub App setting is missing, as a message naming the variables, or None."""
    missing = [name for name, value in (("GITHUB_APP_ID", app_id), ("GITHUB_APP_PRIVATE_KEY", private_key_pem))
               if not value]
    if not missing:
        return None
    return (f"GitHub App auth is partly configured: {' and '.join(missing)} not set "
            "(set GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY, or GITHUB_TOKEN)")


def app_problem(app_id: str | None, private_key_pem: str | None) -> str | None:
    """Why the GitHub App settings cannot sign in (naming the variables, never the key), or None."""
    if missing := app_missing(app_id, private_key_pem):
        return missing
    try:
        app_jwt(app_id, private_key_pem, time.time())
    except (ValueError, RuntimeError) as exc:
        return str(exc)
    return None


def has_credentials(env=None) -> bool:
    """Whether credentials to write to GitHub are set (a token or an App): the schedules that only
    write to GitHub start by themselves only then."""
    env = os.environ if env is None else env
    return any(env.get(v) for v in ("GITHUB_TOKEN", "GITHUB_APP_ID"))


def credential_problems(env: dict) -> list[str]:
    """What is wrong with the GitHub credentials in `env` (GITHUB_TOKEN, or the App's
    GITHUB_APP_ID + GITHUB_APP_PRIVATE_KEY [+ GITHUB_APP_INSTALLATION_ID]), one line each; none
    set is a dry run, not a problem. For the preflight: found at start, not in a run's step."""
    token = env.get("GITHUB_TOKEN") or ""
    if token:
        return [p for p in (token_problem(token),) if p]
    app = [env.get(k) for k in ("GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY", "GITHUB_APP_INSTALLATION_ID")]
    if not any(app):
        return []
    return [p for p in (app_problem(app[0], app[1]),) if p]


def app_jwt(app_id: str, private_key_pem: str, now: float) -> str:
    """The short-lived RS256 JWT a GitHub App presents to mint installation tokens.

    `cryptography` is imported here, not at module load, so token-only and dry-run use do
    not need it installed.
    """
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
    except ImportError:
        raise RuntimeError("GitHub App authentication signs an RS256 JWT and needs the "
                           "'cryptography' package; install it or set GITHUB_TOKEN") from None
    pem = private_key_pem if "\n" in private_key_pem else private_key_pem.replace("\\n", "\n")
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError("GITHUB_APP_PRIVATE_KEY is not an unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("GITHUB_APP_PRIVATE_KEY must be an RSA key (GitHub Apps sign with RS256)")
    header = {"alg": "RS256", "typ": "JWT"}
    # iat is backdated a minute for clock drift; GitHub rejects exp more than 10 min ahead.
    claims = {"iat": int(now) - 60, "exp": int(now) + 540,
              "iss": int(app_id) if app_id.isdigit() else app_id}
    signing_input = ".".join(_b64url(json.dumps(p, separators=(",", ":")).encode())
                             for p in (header, claims))
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"

