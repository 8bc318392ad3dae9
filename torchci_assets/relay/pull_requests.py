"""Which upstream webhook deliveries the relay acts on besides pushes, as the cross-repo CI
relay (pytorch/test-infra `aws/lambda/cross_repo_ci_relay/webhook/event_handler.py`) does:

- `pull_request` `opened`, `reopened`, `synchronize`, `closed`: dispatched to every
  allowlisted downstream (all levels) as `event_type: pull_request`, once per delivery (and once
  per event when two webhooks deliver it: see `acting.pr_content_key`).
  Other actions (`edited`, `assigned`, ...) are not dispatched. A pull request from a fork is
  dispatched like any other: the delivery is the upstream repository's, its head is the fork's.
- `pull_request` `labeled` with `ciflow/crcr/<device>`: the L3 repositories of that device
  get upstream check runs for this head from now on, and one now for every job that already
  reported (the relay's orderings 2 and 3).
- `check_run` / `check_suite` `rerequested` on a `crcr/...` check run: the downstream run's
  failed jobs are re-run.

Each becomes a `RelayEvent` with its own run key (`<kind>:<delivery id>`), found in the
webhook archive by the same incremental scan as pushes (`pushes.scan_archive`).
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass

from torchci_assets.config import AllowlistEntry, TorchciConfig
from torchci_assets.ingest.payloads import from_rest, parse_envelope
from torchci_assets.relay.pushes import fits_dispatch

PR_ACTIONS = frozenset({"opened", "reopened", "synchronize", "closed"})
LABEL_PREFIX = "ciflow/crcr/"
CHECK_RUN_PREFIX = "crcr/"
# A pull request's description can be 65536 characters; a downstream needs its start at most.
BODY_CHARS = 2000
REPO_KEYS = ("id", "name", "full_name", "private", "html_url", "clone_url", "default_branch", "fork")


@dataclass(frozen=True)
class RelayEvent:
    """One upstream delivery the relay acts on. `kind` is `dispatch`, `labeled`, `rerun` (one
    check run) or `rerun_suite` (every check run of a suite)."""

    kind: str
    event: str
    delivery_id: str
    received_at: str
    sha: str  # the pull request's head (or the check run's / suite's head)
    payload: dict  # the upstream webhook payload (trimmed for dispatch only)

    @property
    def run_key(self) -> str:
        return f"{self.kind}:{self.delivery_id}"

    @property
    def pr_number(self) -> int | None:
        number = (self.payload.get("pull_request") or {}).get("number")
        return number if isinstance(number, int) else None


def pr_labels(payload: dict) -> set[str]:
    """Label names of the pull request in a webhook payload, or in a dispatch / callback body
    (which carry the webhook payload under `payload`), as the relay's extract_pr_labels."""
    pr = payload.get("pull_request")
    if not isinstance(pr, dict) and isinstance(payload.get("payload"), dict):
        pr = payload["payload"].get("pull_request")
    labels = pr.get("labels") if isinstance(pr, dict) else None
    return {label.get("name", "") for label in labels or [] if isinstance(label, dict)}


def needs_check_run(entry: AllowlistEntry | None, labels: set[str]) -> bool:
    """L4 always; L3 only with its device's `ciflow/crcr/<device>` label (the relay's rule)."""
    if entry is None or entry.level not in ("L3", "L4"):
        return False
    return entry.level == "L4" or (entry.device is not None and f"{LABEL_PREFIX}{entry.device}" in labels)


def check_run_name(downstream_repo: str, workflow_name: str, job_name: str) -> str:
    return f"{CHECK_RUN_PREFIX}{downstream_repo}/{workflow_name}/{job_name}"


def repo_from_check_run(name: str) -> str | None:
    """The downstream `owner/repo` of a `crcr/<owner>/<repo>/<workflow>/<job>` name, else None."""
    if not name.startswith(CHECK_RUN_PREFIX):
        return None
    parts = name[len(CHECK_RUN_PREFIX):].split("/")
    if len(parts) < 3 or not parts[0] or not parts[1]:
        return None
    return f"{parts[0]}/{parts[1]}"


def run_id_from_external_id(external_id: object) -> int | None:
    """The downstream run id a check run carries (`<run_id>`, or the relay's `<run_id>:<pr>`)."""
    head = str(external_id or "").split(":")[0]
    return int(head) if head.isdigit() and 0 < len(head) <= 19 else None


def trim_pr_payload(payload: dict, event_type: str, delivery_id: str) -> dict:
    """The webhook payload as dispatched: verbatim when it fits GitHub's 64 KB for the
    client_payload (the relay forwards it whole), else with the description shortened and the
    repository objects cut to their names, which keeps what downstream workflows read."""
    if fits_dispatch({"event_type": event_type, "delivery_id": delivery_id, "payload": payload}):
        return payload
    out = copy.deepcopy(payload)
    pr = out.get("pull_request") if isinstance(out.get("pull_request"), dict) else {}
    if isinstance(pr.get("body"), str):
        pr["body"] = pr["body"][:BODY_CHARS]
    if isinstance(out.get("repository"), dict):
        out["repository"] = _small_repo(out["repository"])
    for side in ("head", "base"):
        ref = pr.get(side)
        if isinstance(ref, dict) and isinstance(ref.get("repo"), dict):
            ref["repo"] = _small_repo(ref["repo"])
    pr.pop("_links", None)
    return out


def _small_repo(repo: dict) -> dict:
    return {k: repo[k] for k in REPO_KEYS if k in repo}


def _utc_text(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def relay_event(event: str, delivery_id: str, received_at: dt.datetime, payload: dict,
                config: TorchciConfig) -> tuple[RelayEvent | None, str]:
    """The relay's action for one delivery, or None and why not ("" when not the relay's)."""
    repo = (payload.get("repository") or {}).get("full_name") if isinstance(payload.get("repository"), dict) else None
    if event not in ("pull_request", "check_run", "check_suite") or not isinstance(repo, str) \
            or repo.lower() != config.upstream_repo.lower():
        return None, ""
    action = payload.get("action")
    received = _utc_text(received_at)
    if event == "pull_request":
        pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
        sha = str((pr.get("head") or {}).get("sha") or "").lower()
        if action in PR_ACTIONS:
            trimmed = trim_pr_payload(payload, "pull_request", delivery_id)
            return RelayEvent("dispatch", event, delivery_id, received, sha, trimmed), ""
        label = (payload.get("label") or {}).get("name", "") if isinstance(payload.get("label"), dict) else ""
        if action == "labeled" and label.startswith(LABEL_PREFIX):
            return RelayEvent("labeled", event, delivery_id, received, sha, payload), ""
        return None, f"pull_request {delivery_id}: action {action!r} is not relayed"
    if action != "rerequested":
        return None, ""
    if event == "check_run":
        run = payload.get("check_run") if isinstance(payload.get("check_run"), dict) else {}
        if repo_from_check_run(str(run.get("name") or "")) is None:
            return None, f"check_run {delivery_id}: {run.get('name')!r} is not a relay check run"
        return RelayEvent("rerun", event, delivery_id, received, str(run.get("head_sha") or ""), payload), ""
    suite = payload.get("check_suite") if isinstance(payload.get("check_suite"), dict) else {}
    return RelayEvent("rerun_suite", event, delivery_id, received, str(suite.get("head_sha") or ""), payload), ""


def pick_relay_event(line: bytes, config: TorchciConfig) -> tuple[bool, RelayEvent | None, str]:
    """For scan_archive: (is a pull_request/check_run/check_suite delivery, its event, why not)."""
    event, delivery_id, received_at, payload, env = parse_envelope(line)
    if event not in ("pull_request", "check_run", "check_suite"):
        return False, None, ""
    if why := from_rest(env):
        return True, None, f"{event} {delivery_id}: {why}"
    found, why = relay_event(event, delivery_id, received_at, payload, config)
    return found is not None or bool(why), found, why
