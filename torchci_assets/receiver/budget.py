"""A cap on request-body bytes held in memory across all connections.

The signature of a webhook covers its whole body, so a body is read before anyone knows whether
it is GitHub's; without a cap, 40 clients each sending 24 MiB and withholding the last byte hold
about 1 GB. A body whose declared length does not fit in what is left is refused with 503 and
`Retry-After` before it is read, and everything a request took is given back when it is answered.

Large bodies (over `small_body` bytes) may use only three quarters of the budget: the rest stays
for the small bodies nearly every delivery is, so clients holding large bodies cannot starve
GitHub's ordinary deliveries. A large body takes its declared length before it is read, so the
clients beyond the large share are refused without a byte read. A small body takes its bytes as
they arrive (one whose next chunk does not fit is cut off with the same 503): taking its declared
length up front would let a few dozen connections that declare a body and send nothing hold the
small share, and so every delivery, at no cost. Used from the event loop only: no lock.
"""

from __future__ import annotations

MIB = 1 << 20


class OverBudget(Exception):
    """The body does not fit in what is left of the budget."""


class BodyBudget:
    def __init__(self, limit: int, small_body: int = MIB):
        self.limit = limit
        self.large_limit = limit * 3 // 4
        self.small_body = small_body
        self.held = 0
        self.held_large = 0

    def fits(self, n: int, large: bool) -> bool:
        return self.held + n <= self.limit and (not large or self.held_large + n <= self.large_limit)

    def take(self, n: int, large: bool) -> None:
        if not self.fits(n, large):
            raise OverBudget
        self.held += n
        if large:
            self.held_large += n

    def give(self, n: int, large: bool) -> None:
        self.held -= n
        if large:
            self.held_large -= n


class Hold:
    """What one request took from the budget; `release` gives all of it back."""

    def __init__(self, budget: BodyBudget):
        self.budget = budget
        self.small = self.large = 0
        self.reserved = False  # a large body's declared length was taken whole
        self.complete = False  # the whole body was read

    def admit(self, declared: int) -> None:
        """Before reading a body of `declared` bytes: take it whole if large, else check it fits now;
        OverBudget when it does not."""
        if declared > self.budget.small_body:
            self.budget.take(declared, True)
            self.large, self.reserved = declared, True
        elif not self.budget.fits(declared, False):
            raise OverBudget

    def take(self, n: int, declared: int | None) -> None:
        """Take `n` more bytes; a body is large when its declared length (else its size so far) is."""
        if self.reserved:
            return
        large = (declared if declared is not None else self.small + self.large + n) > self.budget.small_body
        if not large:
            self.budget.take(n, False)
            self.small += n
            return
        moved, self.small = self.small, 0  # a body grown past small_body counts as large, all of it
        self.budget.give(moved, False)
        try:
            self.budget.take(moved + n, True)
        except OverBudget:
            self.budget.take(moved, False)
            self.small = moved
            raise
        self.large += moved + n

    def release(self) -> None:
        self.budget.give(self.small, False)
        self.budget.give(self.large, True)
        self.small = self.large = 0
