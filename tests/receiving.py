"""Test helpers for `torchci serve`: a real receiver (uvicorn, 127.0.0.1) in this process, GitHub's
webhook signature, and a throwaway OIDC issuer whose key set pytest-httpserver serves."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import threading
import time
import uuid
from pathlib import Path

import requests
import uvicorn
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from conftest import free_port
from resources.storage import Store
from torchci_assets.receiver.app import ConfigWatcher, Receiver, build_app
from torchci_assets.receiver.oidc import KeySet
from torchci_assets.receiver.settings import ReceiverSettings

SECRET = "It's a Secret to Everybody"
ISSUER = "https://token.actions.githubusercontent.com"
AUDIENCE = "pytorch-cross-repo-ci-relay"
L2_REPO = "acme-ai/torch-npu"
L3_REPO = "example-org/torch-tpu-backend"
L1_REPO = "contoso-labs/torch-vpu"
CONFIG_YAML = f"""
upstream: {{repo: pytorch/pytorch, branches: [refs/heads/main]}}
poll_commits: false
allowlist:
  L1: [{L1_REPO}]
  L2: [{L2_REPO}, fabrikam/torch-dpu]
  L3:
    tpu:
      {L3_REPO}: [tpu-oncall]
"""


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_headers(body: bytes, event: str = "workflow_job", delivery: str | None = None,
                    secret: str = SECRET) -> dict:
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, secret), "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/test"}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(header: dict, claims: dict, sign_with) -> str:
    """A compact JWS; `sign_with(signing_input) -> signature bytes`."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64url(sign_with(signing_input.encode()))}"


class Issuer:
    """A throwaway GitHub Actions OIDC issuer: RSA keys by kid, tokens, and the JWKS document."""

    def __init__(self):
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.add_key("key-1")

    def add_key(self, kid: str) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self, kids: list[str] | None = None) -> dict:
        out = []
        for kid in kids or list(self.keys):
            numbers = self.keys[kid].public_key().public_numbers()
            out.append({"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
                        "n": b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
                        "e": b64url(numbers.e.to_bytes(3, "big"))})
        return {"keys": out}

    def claims(self, repo: str = L2_REPO, **overrides) -> dict:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "repository": repo, "repository_owner": repo.split("/")[0],
                  "sub": f"repo:{repo}:ref:refs/heads/main", "ref": "refs/heads/main", "run_id": "17",
                  "iat": now, "nbf": now - 5, "exp": now + 300}
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, repo: str = L2_REPO, kid: str = "key-1", **overrides) -> str:
        key = self.keys[kid]
        return jwt({"typ": "JWT", "alg": "RS256", "kid": kid}, self.claims(repo, **overrides),
                   lambda data: key.sign(data, padding.PKCS1v15(), hashes.SHA256()))

    def public_pem(self, kid: str = "key-1") -> bytes:
        return self.keys[kid].public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclasses.dataclass
class Served:
    url: str
    receiver: Receiver
    archive: Store
    server: uvicorn.Server
    thread: threading.Thread

    def post_webhook(self, body: bytes, **headers) -> requests.Response:
        return requests.post(f"{self.url}/github/webhook", data=body, headers=webhook_headers(body, **headers),
                             timeout=10)

    def post_callback(self, body: bytes | dict, token: str | None) -> requests.Response:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return requests.post(f"{self.url}/relay/callback", data=data, headers=headers, timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        assert not self.thread.is_alive(), "the receiver did not stop"


def settings_for(tmp_path: Path, **overrides) -> ReceiverSettings:
    base = ReceiverSettings.from_env({
        "TORCHCI_ARCHIVE_URI": str(tmp_path / "archive"), "TORCHCI_LAKE_URI": str(tmp_path / "lake"),
        "TORCHCI_SPOOL_DIR": str(tmp_path / "spool"), "TORCHCI_WEBHOOK_SECRETS": SECRET,
        "TORCHCI_RECEIVER_HOST": "test-host", "TORCHCI_OIDC_JWKS_URL": "http://127.0.0.1:9/unused"})
    return dataclasses.replace(base, **overrides)


def config_file(tmp_path: Path, text: str = CONFIG_YAML) -> str:
    path = tmp_path / "relay.yaml"
    path.write_text(text)
    return str(path)


@contextlib.contextmanager
def served(tmp_path: Path, keys: KeySet | None = None, config: str | None = None, **overrides):
    """A receiver on 127.0.0.1 for the duration of the block; stopped (spool rolled) at its end."""
    settings = settings_for(tmp_path, **overrides)
    receiver = Receiver(settings, keys=keys, config=ConfigWatcher(config or config_file(tmp_path)))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(receiver), host="127.0.0.1", port=port, loop="asyncio",
                                           lifespan="on", log_level="warning", access_log=False,
                                           http=receiver.protocol()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the receiver did not start"
        time.sleep(0.02)
    srv = Served(f"http://127.0.0.1:{port}", receiver, Store(settings.archive_uri), server, thread)
    try:
        yield srv
    finally:
        if thread.is_alive():
            srv.stop()


def archived(store: Store, stream: str) -> list[dict]:
    """Every line of every archive file of `stream`, parsed (a torn line fails the test)."""
    out = []
    for entry in store.list_files(stream, (".jsonl.gz",)):
        with store.open_input(entry.path) as f:
            out += [json.loads(line) for line in f.read().splitlines() if line.strip()]
    return out
