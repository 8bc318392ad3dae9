"""Log lines for events that can repeat thousands of times a minute (clients hanging up, refused
requests, a failing disk): the first of a kind is logged at once, the rest are counted and logged
as one line per interval with their number and the last message. Never a traceback per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Window:
    since: float
    level: int
    count: int = 0  # events not logged yet
    last: str = ""


class ThrottledLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.logger, self.interval_s, self._clock = logger, interval_s, clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def log(self, key: str, level: int, message: str) -> None:
        """Log `message` now if nothing of `key` was logged this interval, else count it."""
        now = self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is not None and now - window.since < self.interval_s:
                window.count += 1
                window.last = message
                return
            held = window.count if window is not None else 0
            self._windows[key] = _Window(now, level)
        suffix = f" (and {held} more like it in the previous {self.interval_s:g}s)" if held else ""
        self.logger.log(level, "%s%s", message, suffix)

    def flush(self) -> None:
        """Log the counts of the intervals that ended (call it now and then, so a burst that stopped
        is still reported)."""
        now = self._clock()
        due = []
        with self._lock:
            for key, window in list(self._windows.items()):
                if now - window.since >= self.interval_s:
                    del self._windows[key]
                    if window.count:
                        due.append(window)
        for window in due:
            self.logger.log(window.level, "%d more in the last %gs, the last: %s", window.count, self.interval_s,
                            window.last)
