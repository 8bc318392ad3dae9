"""Counters, gauges and histograms for `GET /metrics`, in Prometheus' text format (version 0.0.4).

Written here instead of adding prometheus_client: a dozen series, updated from the event loop
and two writer threads, need only a lock and a renderer.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

# Seconds: from a page-cache fsync (~0.1 ms) to a stalled disk (> 1 s).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HELP = {
    "torchci_receiver_requests_total": ("counter", "HTTP requests answered, by endpoint and status code."),
    "torchci_receiver_received_total": ("counter", "Deliveries accepted for the archive, by stream."),
    "torchci_receiver_rejected_total": ("counter", "Requests refused, by endpoint and reason."),
    "torchci_receiver_ignored_total": ("counter", "Callbacks answered 200 `ignored` and not kept, by endpoint and reason (not_allowlisted, below_l2)."),
    "torchci_receiver_dropped_total": ("counter", "Webhook deliveries acknowledged but not kept (event not configured, ping)."),
    "torchci_receiver_written_total": ("counter", "Records appended to the spool and fsynced, by stream."),
    "torchci_receiver_write_errors_total": ("counter", "Spool appends that failed (the requests got 503), by stream."),
    "torchci_receiver_fsync_seconds": ("histogram", "Duration of one spool write + fdatasync (a group of records)."),
    "torchci_receiver_fsync_batch_records": ("histogram", "Records made durable by one fdatasync."),
    "torchci_receiver_ack_seconds": ("histogram", "Time from the request's start to its acknowledgement (200), by endpoint."),
    "torchci_receiver_loop_lag_seconds": ("histogram", "How late the event loop wakes from a 100 ms sleep."),
    "torchci_receiver_rolled_total": ("counter", "Spool segments published to the archive, by stream."),
    "torchci_receiver_rolled_records_total": ("counter", "Records published to the archive, by stream."),
    "torchci_receiver_roll_dropped_lines_total": ("counter", "Spool lines not archived because they were torn by a crash (never acknowledged)."),
    "torchci_receiver_roll_failures_total": ("counter", "Failed attempts to publish a segment (it is kept and retried)."),
    "torchci_receiver_late_segments_total": ("counter", "Segments published into a day older than yesterday (UTC), which the archive's `_late/<day>` marker makes the refresh sensor pick up."),
    "torchci_receiver_spool_segments": ("gauge", "Spool segments not yet in the archive, by stream."),
    "torchci_receiver_spool_bytes": ("gauge", "Bytes in the spool not yet in the archive, by stream."),
    "torchci_receiver_oldest_segment_age_seconds": ("gauge", "Age of the oldest sealed segment waiting for the archive."),
    "torchci_receiver_jwks_fetches_total": ("counter", "Attempts to fetch the OIDC issuer's key set."),
    "torchci_receiver_disconnects_total": ("counter", "Clients that hung up before their request's body was read, by endpoint."),
    "torchci_receiver_timeouts_total": ("counter", "Connections closed because their headers or body came too slowly, by phase."),
    "torchci_receiver_inflight_body_bytes": ("gauge", "Request-body bytes held in memory now, across connections."),
    "torchci_receiver_ready": ("gauge", "1 while this replica would keep a delivery sent now (GET /readyz), else 0."),
}
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                     for k, v in labels)
    return "{" + inner + "}"


class Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile (None when empty)."""
        if not self.count:
            return None
        rank, seen = q * self.count, 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts):
            seen += n
            if seen >= rank:
                return bound
        return float("inf")


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.counters: dict[tuple[str, tuple], float] = {}
        self.histograms: dict[tuple[str, tuple], Histogram] = {}
        self.gauges: Callable[[], dict[tuple[str, tuple], float]] = dict

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self.counters[key] = self.counters.get(key, 0) + value

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            hist = self.histograms.get(key)
            if hist is None:
                buckets = BATCH_BUCKETS if name.endswith("_records") else LATENCY_BUCKETS
                hist = self.histograms[key] = Histogram(buckets)
            hist.observe(value)

    def counter(self, name: str, **labels: str) -> float:
        return self.counters.get((name, tuple(sorted(labels.items()))), 0)

    def histogram(self, name: str, **labels: str) -> Histogram | None:
        return self.histograms.get((name, tuple(sorted(labels.items()))))

    def render(self) -> str:
        with self._lock:
            counters = dict(self.counters)
            histograms = {k: (h.buckets, list(h.counts), h.sum, h.count) for k, h in self.histograms.items()}
        gauges = self.gauges()
        lines: list[str] = []
        for name, (kind, text) in HELP.items():
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            for (n, labels), value in sorted({**counters, **gauges}.items()):
                if n == name:
                    lines.append(f"{name}{_labels(labels)} {value:g}")
            for (n, labels), (buckets, counts, total, count) in sorted(histograms.items()):
                if n != name:
                    continue
                seen = 0
                for bound, c in zip((*buckets, "+Inf"), counts):
                    seen += c
                    le = bound if isinstance(bound, str) else f"{bound:g}"
                    lines.append(f"{name}_bucket{_labels(labels + (('le', le),))} {seen}")
                lines.append(f"{name}_sum{_labels(labels)} {total:.6f}")
                lines.append(f"{name}_count{_labels(labels)} {count}")
        return "\n".join(lines) + "\n"
