"""Whether this replica should be sent deliveries (`GET /readyz`, the readiness probe).

Liveness (`/healthz`) asks whether the process works; readiness asks whether a delivery sent now
would be kept. GitHub does not retry a failed delivery by itself, so a replica that would answer
503 must leave the Service's endpoints until it would not. Not ready while:
- the spool cannot be written (a small file is written, fsynced and removed, at most once a second);
- the spool holds more than the high-water mark (deliveries are refused then too, so the pod's
  volume never fills and gets the pod evicted with everything not rolled yet);
- optionally, the oldest sealed segment has waited for the archive longer than a limit;
- a setting refuses every delivery of an endpoint (no webhook secret: every webhook is answered
  503). A replica so configured must not look ready beside one that works, nor a lone one pass
  its rollout while GitHub's deliveries fail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from torchci_assets.receiver.settings import ReceiverSettings
from torchci_assets.receiver.spool import probe_write, spool_depth


def refused_by_settings(settings: ReceiverSettings) -> list[str]:
    """The settings under which every delivery of an endpoint is refused: they last as long as the
    process, so they are reasons for as long (a restart with them fixed makes it ready)."""
    if not settings.webhook_secrets:
        return ["no webhook secret is configured: every webhook is answered 503; set TORCHCI_WEBHOOK_SECRETS "
                "(or TORCHCI_WEBHOOK_SECRETS_FILE) to the secret of the GitHub webhook and restart"]
    return []


class Readiness:
    def __init__(self, spool_dir: Path, high_water: int, backlog_s: float = 0.0, every_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, fixed: list[str] | None = None):
        self.spool_dir, self.high_water, self.backlog_s = spool_dir, high_water, backlog_s
        self.every_s, self._clock = every_s, clock
        self.fixed = list(fixed or [])  # reasons of the settings, in every answer
        self._checked = -float("inf")
        # one probe at a time (the periodic refresh's and a request's): the reasons left are the last one's
        self._lock = threading.Lock()
        self._spool_bytes = 0
        self.reasons: list[str] = []

    def due(self) -> bool:
        return self._clock() - self._checked >= self.every_s

    def refresh(self) -> list[str]:
        """Probe now (blocking: run it in a thread); the reasons for not being ready, empty when ready."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> list[str]:
        reasons = list(self.fixed)
        if problem := probe_write(self.spool_dir):
            reasons.append(problem)
        depth = spool_depth(self.spool_dir)
        self._spool_bytes = sum(nbytes for _, nbytes, _ in depth.values())
        if self._spool_bytes > self.high_water:
            reasons.append(f"the spool holds {self._spool_bytes} bytes, over its high-water mark of "
                           f"{self.high_water} (TORCHCI_SPOOL_HIGH_WATER): the archive is not keeping up")
        oldest = max((age for _, _, age in depth.values()), default=0.0)
        if self.backlog_s and oldest > self.backlog_s:
            reasons.append(f"a spool segment has waited {oldest:.0f}s for the archive, over "
                           f"TORCHCI_ROLL_BACKLOG_S={self.backlog_s:g}")
        self.reasons, self._checked = reasons, self._clock()
        return reasons

    @property
    def ready(self) -> bool:
        return not self.reasons

    @property
    def over_high_water(self) -> bool:
        return self._spool_bytes > self.high_water
