"""Metadata as the Dagster UI shows it: the UI prints every digit of a float it is given
(95.83333333333333) and every key, even one whose text is empty (`skipped: ""`), which reads as
something said. Assets pass their figures through here so each reads at a glance."""

from __future__ import annotations


def readable(value: float, digits: int = 1) -> float:
    """A time, a percentage or a size to `digits` decimals (one by default: a tenth of a second or
    of a percent is as fine as a reader compares them); a share of one gets 4, and the rate of
    something rare (rejects) 6, so that a few in a million do not show as 0."""
    return round(float(value), digits)


def said(metadata: dict) -> dict:
    """The metadata without its empty texts: a key with nothing to say is left out."""
    return {k: v for k, v in metadata.items() if v != ""}
