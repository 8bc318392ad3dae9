"""glibc heap tuning for the streaming scans.

A scan allocates and frees the same large blocks over and over (8 MB inflated chunks, 16 MB
bronze batches). By default glibc serves blocks that large with mmap, or gives the top of its
heaps back to the kernel as soon as a free leaves a little there, so every next block is
faulted in anew, page by page: about one CPU-second of kernel time of the ~14 a PyTorch-sized
day of webhooks costs. Inside `large_blocks_kept()` blocks under 32 MB come from the heaps and
freed ones stay there for reuse, at the cost of up to a few hundred MB kept until it ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Iterator

# glibc's mallopt parameters, and the defaults documented in mallopt(3)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
DEFAULTS = {M_TRIM_THRESHOLD: 128 << 10, M_TOP_PAD: 128 << 10, M_MMAP_THRESHOLD: 128 << 10}
KEPT = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 256 << 20, M_TOP_PAD: 64 << 20}


def _mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def large_blocks_kept() -> Iterator[bool]:
    """Yields whether the heap is tuned (False where malloc is not glibc's). On exit glibc's
    documented defaults are set again (its dynamic mmap threshold stays off: mallopt cannot
    turn it back on), so the kept memory is returned with the next frees."""
    mallopt = _mallopt()
    tuned = mallopt is not None and all(mallopt(k, v) == 1 for k, v in KEPT.items())
    try:
        yield tuned
    finally:
        if tuned:
            for k, v in DEFAULTS.items():
                mallopt(k, v)
