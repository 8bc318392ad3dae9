"""Time-series plots as inline SVG, drawn in Python: nothing to fetch when a page is viewed.

Series are told apart by colour (the Okabe-Ito palette, readable with every common colour
vision deficiency) and by dash pattern and marker shape, so a plot reads in grey too. Every
point carries a <title> (the browser's tooltip) with its day and value.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4", "4 4", "3 6")
MARKERS = ("circle", "square", "diamond", "triangle")
W, H = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 30, 12, 30


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[str, float]]  # (YYYY-MM-DD, value), days without a value left out


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def _marker(kind: str, x: float, y: float, color: str, tip: str) -> str:
    t = f"<title>{escape(tip)}</title>"
    if kind == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{color}">{t}</rect>'
    if kind == "diamond":
        return (f'<polygon points="{x:.1f},{y - 4:.1f} {x + 4:.1f},{y:.1f} {x:.1f},{y + 4:.1f} {x - 4:.1f},{y:.1f}" '
                f'fill="{color}">{t}</polygon>')
    if kind == "triangle":
        return (f'<polygon points="{x:.1f},{y - 4:.1f} {x + 4:.1f},{y + 3:.1f} {x - 4:.1f},{y + 3:.1f}" '
                f'fill="{color}">{t}</polygon>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}">{t}</circle>'


def _y_axis(ymax: float, y, fmt) -> str:
    """Five grid lines and their values, drawn only when there is a point: with none, an axis of
    hours read 0.0 h at every tick."""
    return "".join(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
                   f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" class="ytick">{escape(fmt(v))}</text>'
                   for v in (ymax * i / 4 for i in range(5)))


def line_chart(title: str, series: list[Series], days: list[str], unit: str = "", fmt=None) -> str:
    """An SVG line chart of `series` over `days` (the x axis, oldest first); `fmt` formats values
    for the axis and tooltips. Data-free series are listed as such; `data-points` counts the points."""
    fmt = fmt or (lambda v: f"{v:.3g}")
    plotted = [s for s in series if s.points]
    ymax = _nice_max(max((v for s in plotted for _, v in s.points), default=0.0))
    index = {d: i for i, d in enumerate(days)}
    span = max(1, len(days) - 1)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(day: str) -> float:
        return LEFT + pw * index[day] / span if len(days) > 1 else LEFT + pw / 2

    def y(v: float) -> float:
        return TOP + ph * (1 - v / ymax)

    parts = [f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}" '
             f'data-points="{sum(len(s.points) for s in plotted)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>"]
    parts.append(_y_axis(ymax, y, fmt) if plotted else
                 f'<text x="{LEFT + pw / 2:.1f}" y="{TOP + ph / 2:.1f}" class="xtick">no data</text>')
    step = max(1, math.ceil(len(days) / 8))
    for i in range(0, len(days), step):
        d = dt.date.fromisoformat(days[i])
        parts.append(f'<text x="{x(days[i]):.1f}" y="{H - 10}" class="xtick">{d.strftime("%b %d")}</text>')
    for k, s in enumerate(series):
        color, dash, marker = PALETTE[k % len(PALETTE)], DASHES[k % len(DASHES)], MARKERS[k % len(MARKERS)]
        pts = [(x(d), y(v), d, v) for d, v in s.points if d in index]
        if len(pts) > 1:
            path = " ".join(f"{'M' if i == 0 else 'L'}{px:.1f},{py:.1f}" for i, (px, py, _, _) in enumerate(pts))
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"{dash_attr} '
                         f'class="series" data-series="{escape(s.name)}"/>')
        for px, py, d, v in pts:
            parts.append(_marker(marker, px, py, color, f"{s.name} {d}: {fmt(v)}{unit}"))
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><svg width="26" height="10" aria-hidden="true"><line x1="0" y1="5" x2="26" y2="5" '
        f'stroke="{PALETTE[k % len(PALETTE)]}" stroke-width="2"'
        + (f' stroke-dasharray="{DASHES[k % len(DASHES)]}"' if DASHES[k % len(DASHES)] else "")
        + f'/></svg>{escape(s.name)}{"" if s.points else " (no data)"}</span>'
        for k, s in enumerate(series))
    return (f'<figure class="plot"><figcaption>{escape(title)}</figcaption>{"".join(parts)}'
            f'<div class="legend">{legend}</div></figure>')


def duration(seconds: float | None) -> str:
    """1h02m, 14m, 45s."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m"
    return f"{s}s"
