"""The ASGI application of `torchci serve`: four endpoints over the spool.

| endpoint | answers |
|---|---|
| `POST /github/webhook` | 200 once the delivery is fsynced (or `ping` / an event not configured: acknowledged, not kept); 400 no event or delivery header, form-encoded or not a JSON object; 401 missing or bad `X-Hub-Signature-256`; 413 over the size limit; 503 the spool cannot write, or no secret is configured |
| `POST /relay/callback` (or the relay's `/github/callback`) | 200 once fsynced, or 200 `ignored` (nothing kept) when the token's repository is not allowlisted at L2 or above; 400 a body breaking the report_callback.py contract, or no dispatch of it to the caller; 401 no valid OIDC token; 413 too large; 429 over the repository's rate (`Retry-After`); 503 keys, ledger or spool unavailable (`Retry-After`) |
| `GET /healthz` | liveness: 200 while both spool writers run, else 503; the spool depth |
| `GET /readyz` | readiness: 200 while a delivery sent now would be kept, else 503 with the reasons (no webhook secret among them) |
| `GET /metrics` | Prometheus text |

Checks run cheapest and least trusting first: size, then authentication, then whether the
caller may use the endpoint, then the body. Nothing unauthenticated is parsed. Before any body is
read: a spool over its high-water mark answers 503 (`Retry-After`), a body that does not fit in
the in-flight budget (`budget.py`) 503 (`Retry-After`), a webhook without a signature 401, a callback
from a repository the relay keeps no results of 200 `ignored`; these answers close the connection
instead of reading the body. Headers and bodies that come too slowly
are cut off by `timeouts.py` (408, connection closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import logging
import math
import os
import re
import time

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from resources.lake import Lake
from resources.storage import Store
from torchci_assets.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_PATH, ConfigError, TorchciConfig, load_config
from torchci_assets.receiver.budget import BodyBudget, Hold, OverBudget
from torchci_assets.receiver.callbacks import (
    BodyError,
    DispatchLedger,
    JobStarts,
    LedgerUnavailable,
    RateLimiter,
    parse_callback,
    seconds_between,
)
from torchci_assets.receiver.metrics import Metrics
from torchci_assets.receiver.oidc import KeySet, KeysUnavailable, OidcVerifier, TokenError
from torchci_assets.receiver.readiness import Readiness, refused_by_settings
from torchci_assets.receiver.records import ci_result_line, webhook_line
from torchci_assets.receiver.settings import ReceiverSettings
from torchci_assets.receiver.signatures import SignatureCheck
from torchci_assets.receiver.spool import (
    STREAMS,
    WRITE_ERRORS,
    Roller,
    RollResult,
    SpoolError,
    SpoolWriter,
    recover,
    spool_depth,
    spool_lock,
)
from torchci_assets.receiver.throttled_log import ThrottledLog
from torchci_assets.receiver.timeouts import MAX_HEADER_BYTES, TIMED_OUT_KEY, DeadlineProtocol, deadline_protocol
from torchci_assets.relay.waiting import makes_check_run, relay_waits_for

log = logging.getLogger("torchci.receiver")

EVENT_RE = re.compile(r"^[a-z][a-z_]{0,63}$")
DELIVERY_RE = re.compile(r"^[\x21-\x7e]{1,200}$")
CALLBACK_LEVELS = ("L2", "L3", "L4")
CATCH_UP_EVERY_S = 30.0
SHUTDOWN_ROLL_S = 20.0
READINESS_EVERY_S = 1.0


class TooLarge(Exception):
    pass


class ConfigWatcher:
    """The relay config (allowlist, upstream branches), reloaded when its file changes.

    A file that stops parsing is reported and the last good config kept, so a bad edit of a
    ConfigMap does not take the receiver down or open the allowlist.
    """

    def __init__(self, path: str | None = None, check_s: float = 10.0):
        self.path = path or os.environ.get(CONFIG_ENV_VAR) or str(DEFAULT_CONFIG_PATH)
        self.check_s = check_s
        self.config = load_config(self.path)
        self._mtime = self._stat()
        self._checked = time.monotonic()

    def _stat(self) -> float | None:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return None

    def current(self) -> TorchciConfig:
        now = time.monotonic()
        if now - self._checked >= self.check_s:
            self._checked = now
            mtime = self._stat()
            if mtime != self._mtime:
                self._mtime = mtime
                try:
                    self.config = load_config(self.path)
                    log.info("relay config reloaded from %s", self.path)
                except ConfigError as exc:
                    log.error("relay config %s is unusable, keeping the previous one: %s", self.path, exc)
        return self.config


class Receiver:
    """Everything the endpoints share, and the spool's lifecycle (start: recover, roll, catch up)."""

    def __init__(self, settings: ReceiverSettings, keys: KeySet | None = None, config: ConfigWatcher | None = None):
        self.settings = settings
        self.metrics = Metrics()
        self.archive = Store(settings.archive_uri)
        self.config = config or ConfigWatcher()
        self.keys = keys or KeySet(settings.oidc_jwks_url)
        self.oidc = OidcVerifier(settings.oidc_issuer, settings.oidc_audience, self.keys, settings.oidc_leeway_s)
        self.limiter = RateLimiter(settings.callbacks_per_minute)
        self.starts = JobStarts()
        self.ledger = DispatchLedger(Lake(Store(settings.lake_uri)))
        self.roller = Roller(settings.spool_dir, self.archive, self.metrics, on_rolled=self._rolled)
        self.writers = {s: SpoolWriter(settings.spool_dir, s, settings.host, self.metrics, settings.roll_interval_s,
                                       settings.roll_bytes, on_sealed=self.roller.sealed) for s in STREAMS}
        self.metrics.gauges = self._gauges
        self.budget = BodyBudget(settings.inflight_bytes)
        self.readiness = Readiness(settings.spool_dir, settings.spool_high_water, settings.roll_backlog_s,
                                   READINESS_EVERY_S, fixed=refused_by_settings(settings))
        self.noise = ThrottledLog(log)
        self._exit = contextlib.ExitStack()
        self._locked = False
        self._froze = False
        self._tasks: list[asyncio.Task] = []

    # ---- lifecycle -----------------------------------------------------------------

    def lock(self) -> None:
        """Own the spool folder (raises SpoolError if another process does)."""
        if not self._locked:
            self._exit.enter_context(spool_lock(self.settings.spool_dir))
            self._locked = True

    async def start(self) -> None:
        self.lock()
        recovered = recover(self.settings.spool_dir)
        if recovered:
            log.warning("recovering %d spool segment(s) left open by a crash", len(recovered))
        rolled, failed = await asyncio.to_thread(self.roller.roll_pending, True)
        if rolled or failed:
            log.info("start: %d spool segment(s) rolled into %s, %d kept for retry", rolled, self.archive.display(),
                     failed)
        await self._catch_up()
        # What was loaded so far lives as long as the process: keep it out of the collector's
        # full passes, which would otherwise pause the event loop for tens of milliseconds. In a
        # process that froze its own heap already (a host embedding the receiver) that is its say.
        self._froze = gc.get_freeze_count() == 0
        if self._froze:
            gc.collect()
            gc.freeze()
        for writer in self.writers.values():
            writer.start()
        self.roller.start()
        self._tasks.append(asyncio.create_task(self._catch_up_forever()))
        self._tasks.append(asyncio.create_task(self._watch_loop()))
        self._tasks.append(asyncio.create_task(self._readiness_loop()))
        if not self.settings.webhook_secrets:
            log.warning("no webhook secret (TORCHCI_WEBHOOK_SECRETS or TORCHCI_WEBHOOK_SECRETS_FILE): "
                        "POST /github/webhook and GET /readyz answer 503 until one is set")
        log.info("receiving into %s (spool %s, roll every %gs or %d bytes); callbacks from %s for audience %r",
                 self.archive.display(), self.settings.spool_dir, self.settings.roll_interval_s,
                 self.settings.roll_bytes, self.settings.oidc_issuer, self.settings.oidc_audience)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for writer in self.writers.values():
            await asyncio.to_thread(writer.close)
        await asyncio.to_thread(self.roller.close)
        try:
            rolled, failed = await asyncio.wait_for(asyncio.to_thread(self.roller.roll_pending), SHUTDOWN_ROLL_S)
            log.info("shutdown: %d segment(s) rolled, %d left in the spool for the next start", rolled, failed)
        except asyncio.TimeoutError:
            log.warning("shutdown: rolling took over %.0fs; what is left is rolled at the next start", SHUTDOWN_ROLL_S)
        self._exit.close()
        self._locked = False
        if self._froze:
            gc.unfreeze()
            self._froze = False

    async def _catch_up(self) -> None:
        try:
            files = await asyncio.to_thread(self.starts.catch_up, self.archive)
        except Exception as exc:  # the archive unreachable: timings of jobs started before are null
            log.warning("reading earlier callbacks from the archive failed: %s", exc)
            return
        if files:
            log.info("callback timings: %d archive file(s) read, %d job start(s) known", files, len(self.starts))

    async def _catch_up_forever(self) -> None:
        """Other replicas' callbacks reach this one through the archive."""
        while True:
            await asyncio.sleep(CATCH_UP_EVERY_S)
            await self._catch_up()

    async def _watch_loop(self, every_s: float = 0.1) -> None:
        """How late the event loop wakes up: time every request waits on top of its own work
        (a blocking call, the GIL held by another thread, a starved CPU)."""
        while True:
            t = time.perf_counter()
            await asyncio.sleep(every_s)
            self.metrics.observe("torchci_receiver_loop_lag_seconds", max(0.0, time.perf_counter() - t - every_s))

    async def _readiness_loop(self) -> None:
        """Keep readiness (and the high-water refusal) current without waiting for a probe, and
        report the counts of throttled log lines."""
        while True:
            try:
                await self.refresh_readiness()
            except Exception as exc:  # e.g. the spool folder unreadable: not ready, and keep checking
                self.readiness.reasons = [*self.readiness.fixed, f"readiness cannot be checked: {exc}"]
                self.noise.log("readiness", logging.ERROR, f"readiness cannot be checked: {exc}")
            self.noise.flush()
            WRITE_ERRORS.flush()
            await asyncio.sleep(READINESS_EVERY_S)

    async def refresh_readiness(self) -> list[str]:
        reasons = await asyncio.to_thread(self.readiness.refresh)
        if not all(w.alive for w in self.writers.values()):
            reasons = self.readiness.reasons = [*reasons, "a spool writer thread stopped"]
        return reasons

    def protocol(self) -> type[DeadlineProtocol]:
        """The HTTP protocol class for uvicorn (`http=`), with this receiver's read deadlines."""
        return deadline_protocol(self.settings.header_timeout_s, self.settings.body_timeout_s, self._timed_out)

    def _timed_out(self, phase: str) -> None:
        if phase == "header_size":
            self.metrics.inc("torchci_receiver_rejected_total", endpoint="any", reason="headers_too_large")
            self.noise.log("headers_too_large", logging.INFO,
                           f"closed a connection whose request headers passed {MAX_HEADER_BYTES >> 10} KiB (431)")
            return
        self.metrics.inc("torchci_receiver_timeouts_total", phase=phase)
        limit = self.settings.header_timeout_s if phase == "header" else self.settings.body_timeout_s
        self.noise.log(f"timeout:{phase}", logging.INFO,
                       f"closed a connection whose request {phase} took over {limit:g}s")

    def _rolled(self, stream: str, result: RollResult) -> None:
        if stream == "ci-results":
            self.starts.mark_read(result.archive_path)

    def _gauges(self) -> dict:
        out: dict = {}
        for stream, (segments, nbytes, oldest) in spool_depth(self.settings.spool_dir).items():
            out[("torchci_receiver_spool_segments", (("stream", stream),))] = segments
            out[("torchci_receiver_spool_bytes", (("stream", stream),))] = nbytes
            out[("torchci_receiver_oldest_segment_age_seconds", (("stream", stream),))] = round(oldest, 3)
        out[("torchci_receiver_jwks_fetches_total", ())] = self.keys.attempts
        out[("torchci_receiver_inflight_body_bytes", ())] = self.budget.held
        out[("torchci_receiver_ready", ())] = int(self.readiness.ready)
        return out

    # ---- answers -------------------------------------------------------------------

    def answer(self, endpoint: str, status: int, body: dict, t0: float, headers: dict | None = None) -> Response:
        self.metrics.inc("torchci_receiver_requests_total", endpoint=endpoint, code=str(status))
        if status == 200:  # refusals are not acknowledgements: their speed would hide a slow acknowledgement
            self.metrics.observe("torchci_receiver_ack_seconds", time.perf_counter() - t0, endpoint=endpoint)
        return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)

    def ignore(self, endpoint: str, repo: str, level: str | None) -> Response:
        """200 `ignored` for an authenticated caller the relay keeps no results of (not allowlisted, or
        below L2), as the relay answers it: a 4xx would turn the downstream job's callback step red for
        a level it cannot change. Nothing is read or kept; the answer is counted by reason, and left out
        of the acknowledgement latency, which it would make look faster than storing is."""
        reason = "not_allowlisted" if level is None else "below_l2"
        self.metrics.inc("torchci_receiver_ignored_total", endpoint=endpoint, reason=reason)
        self.noise.log(f"{endpoint}:ignored:{reason}", logging.INFO, f"{endpoint} 200 ignored: {repo} is "
                       f"{level or 'not allowlisted'}; results are kept from L2 up")
        self.metrics.inc("torchci_receiver_requests_total", endpoint=endpoint, code="200")
        return Response(orjson.dumps({"ok": True, "status": "ignored"}), status_code=200, media_type="application/json")

    def refuse(self, endpoint: str, status: int, reason: str, message: str, t0: float,
               headers: dict | None = None) -> Response:
        self.metrics.inc("torchci_receiver_rejected_total", endpoint=endpoint, reason=reason)
        self._log_refusal(endpoint, status, reason, message)
        return self.answer(endpoint, status, {"detail": message}, t0, headers)

    def _log_refusal(self, endpoint: str, status: int, reason: str, message: str) -> None:
        """One line per reason and minute, with a count: a misconfigured sender must not flood the log."""
        self.noise.log(f"{endpoint}:{reason}", logging.INFO, f"{endpoint} {status} {reason}: {message}")

    def guarded(self, endpoint: str, handler):
        """`handler` behind the checks made before any body is read, with the body budget held for
        the request's life and a client hanging up counted (never a traceback)."""
        async def handle(request: Request) -> Response:
            t0 = time.perf_counter()
            hold = request.state.hold = Hold(self.budget)
            try:
                if self.readiness.over_high_water:
                    response = self.refuse(endpoint, 503, "spool_full", "the spool is over its high-water mark, "
                                           "retry", t0, {"Retry-After": "30"})
                else:
                    response = await handler(request)
            except OverBudget:
                response = self.refuse(endpoint, 503, "busy", "too many request bodies in flight, retry", t0,
                                       {"Retry-After": "5"})
            except ClientDisconnect:
                response = self._disconnected(request, endpoint)
            finally:
                hold.release()
            if not hold.complete:  # answered before the body was read: do not read it now
                response.headers["connection"] = "close"
            return response
        return handle

    def _disconnected(self, request: Request, endpoint: str) -> Response:
        if request.scope.get(TIMED_OUT_KEY) is None:  # a timeout is counted where it closed the connection
            self.metrics.inc("torchci_receiver_disconnects_total", endpoint=endpoint)
            self.noise.log(f"disconnect:{endpoint}", logging.INFO,
                           f"{endpoint}: a client hung up before its body was read")
        return Response(status_code=400)  # nobody is there to read it

    # ---- endpoints -----------------------------------------------------------------

    async def webhook(self, request: Request) -> Response:
        t0, ep = time.perf_counter(), "webhook"
        secrets = self.settings.webhook_secrets.values
        if not secrets:
            return self.refuse(ep, 503, "no_secret", "the receiver has no webhook secret (TORCHCI_WEBHOOK_SECRETS)", t0)
        signature = request.headers.get("x-hub-signature-256")
        if not signature:
            return self.refuse(ep, 401, "missing_signature", "missing X-Hub-Signature-256", t0)
        check = SignatureCheck(secrets)
        try:
            body = await read_body(request, self.settings.webhook_max_bytes, check.update)
        except TooLarge:
            return self.refuse(ep, 413, "too_large", f"the body is over {self.settings.webhook_max_bytes} bytes", t0)
        if not check.matches(signature):
            return self.refuse(ep, 401, "bad_signature", "invalid X-Hub-Signature-256 for this body", t0)
        event = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery", "")
        if not EVENT_RE.match(event) or not DELIVERY_RE.match(delivery):
            return self.refuse(ep, 400, "headers", "X-GitHub-Event and X-GitHub-Delivery are required", t0)
        if event == "ping":
            self.metrics.inc("torchci_receiver_dropped_total", event=event)
            return self.answer(ep, 200, {"ok": True, "pong": True, "delivery_id": delivery}, t0)
        if self.settings.events is not None and event not in self.settings.events:
            self.metrics.inc("torchci_receiver_dropped_total", event=event)
            return self.answer(ep, 200, {"ok": True, "dropped": f"event {event!r} is not configured"}, t0)
        if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return self.refuse(ep, 400, "form_encoded", "set the webhook's content type to application/json", t0)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return self.refuse(ep, 400, "not_json", f"the body is not JSON: {exc}", t0)
        if not isinstance(payload, dict):
            return self.refuse(ep, 400, "not_json", "the body is not a JSON object", t0)
        received = dt.datetime.now(dt.timezone.utc)
        line = webhook_line(event, delivery, received, body)
        seal = None
        if relay_waits_for(event, payload, delivery, received, self.config.current()):
            seal = self.settings.push_roll_s  # a relay sensor is waiting for this one
        try:
            await self.writers["webhooks"].append(line, received, seal)
        except SpoolError as exc:
            return self.refuse(ep, 503, "spool", f"not stored, retry: {exc}", t0, {"Retry-After": "10"})
        self.metrics.inc("torchci_receiver_received_total", stream="webhooks")
        return self.answer(ep, 200, {"ok": True, "delivery_id": delivery}, t0)

    async def callback(self, request: Request) -> Response:
        t0, ep = time.perf_counter(), "callback"
        too_large = f"the body is over {self.settings.callback_max_bytes} bytes"
        if declared_length(request, self.settings.callback_max_bytes) == TOO_LARGE:
            return self.refuse(ep, 413, "too_large", too_large, t0)
        try:
            repo = await self.oidc.repository(request.headers.get("authorization"))
        except TokenError as exc:
            return self.refuse(ep, 401, f"token_{exc.reason}", str(exc), t0, {"WWW-Authenticate": "Bearer"})
        except KeysUnavailable as exc:
            return self.refuse(ep, 503, "keys_unavailable", str(exc), t0, {"Retry-After": "30"})
        entry = self.config.current().entry_for(repo)
        if entry is None or entry.level not in CALLBACK_LEVELS:
            return self.ignore(ep, repo, entry.level if entry else None)
        wait = self.limiter.retry_after(repo.lower())
        if wait:
            return self.refuse(ep, 429, "rate_limited", f"rate limit exceeded for {repo}", t0,
                               {"Retry-After": str(max(1, math.ceil(wait)))})
        try:  # the body of an authenticated, allowlisted caller within its rate: the token is in the headers
            raw = await read_body(request, self.settings.callback_max_bytes)
        except TooLarge:
            return self.refuse(ep, 413, "too_large", too_large, t0)
        try:
            callback = parse_callback(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            return self.refuse(ep, 400, "not_json", f"the body is not JSON: {exc}", t0)
        except BodyError as exc:
            return self.refuse(ep, 400, "body", str(exc), t0)
        received = dt.datetime.now(dt.timezone.utc)
        now = received.timestamp()
        queue_time = execution_time = None
        job = callback.job(repo)
        if not callback.self_report:
            try:
                dispatched = await self.ledger.dispatched_at(callback.commit_shas, repo, callback.delivery_id)
            except LedgerUnavailable as exc:
                return self.refuse(ep, 503, "ledger_unavailable", str(exc), t0, {"Retry-After": "30"})
            if dispatched is None:
                return self.refuse(ep, 400, "no_dispatch", f"callback rejected: no dispatch of delivery "
                                   f"{callback.delivery_id!r} to {repo} in the dispatches ledger", t0)
            if callback.status == "in_progress":
                first = self.starts.get(job)
                started = first if first is not None and first <= now else now
                queue_time = seconds_between(dispatched, started) if callback.run_attempt == 1 else None
            else:
                execution_time = seconds_between(self.starts.get(job), now)
        line = ci_result_line(repo, entry.level, queue_time, execution_time, raw, received)
        try:
            await self.writers["ci-results"].append(line, received, self.settings.push_roll_s
                                                     if makes_check_run(entry.level, raw) else None)
        except SpoolError as exc:
            return self.refuse(ep, 503, "spool", f"not stored, retry: {exc}", t0, {"Retry-After": "10"})
        if callback.status == "in_progress" and not callback.self_report:
            self.starts.record(job, now)
        self.metrics.inc("torchci_receiver_received_total", stream="ci-results")
        return self.answer(ep, 200, {"ok": True, "status": callback.status}, t0)

    async def healthz(self, request: Request) -> Response:
        alive = all(w.alive for w in self.writers.values())
        depth = {s: {"segments": n, "bytes": b, "oldest_sealed_s": round(a, 1)}
                 for s, (n, b, a) in spool_depth(self.settings.spool_dir).items()}
        return Response(orjson.dumps({"ok": alive, "spool": depth}), status_code=200 if alive else 503,
                        media_type="application/json")

    async def readyz(self, request: Request) -> Response:
        reasons = await self.refresh_readiness() if self.readiness.due() else self.readiness.reasons
        return Response(orjson.dumps({"ready": not reasons, "reasons": reasons}), status_code=503 if reasons else 200,
                        media_type="application/json")

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


TOO_LARGE = -1


def declared_length(request: Request, limit: int) -> int | None:
    """The body's Content-Length, None without one, TOO_LARGE when it is over `limit`."""
    text = request.headers.get("content-length")
    declared = int(text) if text is not None and text.isdigit() else None
    return TOO_LARGE if declared is not None and declared > limit else declared


async def read_body(request: Request, limit: int, on_chunk=None) -> bytearray:
    """The request body, refused (TooLarge) as soon as it is known to exceed `limit` bytes.

    Under `guarded`, a body whose declared length does not fit in the in-flight budget is refused
    (OverBudget) before anything is read, and each chunk is taken from the budget as it comes.
    `on_chunk(chunk)` sees each chunk as it arrives (the signature is computed so).
    """
    declared = declared_length(request, limit)
    if declared == TOO_LARGE:
        raise TooLarge
    hold: Hold | None = getattr(request.state, "hold", None)
    if hold is not None and declared is not None:
        hold.admit(declared)
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise TooLarge
        if hold is not None:
            hold.take(len(chunk), declared)
        if on_chunk is not None:
            on_chunk(chunk)
        body += chunk
    if hold is not None:
        hold.complete = True
    return body  # not copied into bytes: a 25 MiB body would be held twice


def build_app(receiver: Receiver) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        await receiver.start()
        try:
            yield
        finally:
            await receiver.stop()

    callback = receiver.guarded("callback", receiver.callback)
    return Starlette(routes=[
        Route("/github/webhook", receiver.guarded("webhook", receiver.webhook), methods=["POST"]),
        Route("/relay/callback", callback, methods=["POST"]),
        # the relay's own path, which the callback action's default URL names: a workflow that kept
        # it and changed only the host reports here too
        Route("/github/callback", callback, methods=["POST"]),
        Route("/healthz", receiver.healthz, methods=["GET"]),
        Route("/readyz", receiver.readyz, methods=["GET"]),
        Route("/metrics", receiver.metrics_text, methods=["GET"]),
    ], lifespan=lifespan)
