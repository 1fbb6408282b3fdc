"""A tiny, dependency-free SVG line chart: series on one axis, with the rule's lines and marked rows.

Enough for the rule pages (an example's firing stream next to its healthy stream, the threshold or band the rule
decides by, where the pathology starts and where the rule fires) and nothing more. Every label sits outside the
plotting area (title and row marks above it, the legend below it), so no text covers a curve; text is at least
12 px. The output is deterministic text (coordinates rounded to 0.1 px), so a regenerated page can be compared with
the committed one byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 640, 330
PAD_L, PAD_R = 64, 16
TITLE_Y = 20
MARK_ROWS = (40, 56)  # the marks' label rows, above the plot: two rows so close marks do not overlap
PAD_T = 66
PLOT_B = HEIGHT - 84  # the plot's bottom edge; below it: x ticks, the axis name, the legend
FONT = 13
MIN_TICKS = 4


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.1e}".replace("e-0", "e-").replace("e+0", "e")
    return f"{x:.4g}"


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: at least ``MIN_TICKS`` of them, steps of 1, 2 or 5 x 10^k."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, target - 1)
    mag = 10 ** math.floor(math.log10(raw))
    for step in (m * mag for m in (0.1, 0.2, 0.5, 1, 2, 5, 10)):
        first = math.ceil(lo / step - 1e-9) * step
        ticks = []
        v = first
        while v <= hi + 1e-9 * step:
            ticks.append(0.0 if abs(v) < step * 1e-9 else round(v, 12))
            v += step
        if MIN_TICKS <= len(ticks) <= target + 2:
            return ticks
    return [lo + k * (hi - lo) / (MIN_TICKS - 1) for k in range(MIN_TICKS)]


def line_chart(series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]], *, title: str = "",
               marks: Sequence[tuple[float, str, str]] = (),
               hlines: Sequence[tuple[float, str, str]] = (), x_label: str = "step") -> str:
    """An SVG document: ``series`` is ``(label, colour, [(x, y), ...])``; ``marks`` vertical lines
    ``(x, label, colour)``; ``hlines`` horizontal lines ``(y, label, colour)`` (a threshold, a band's edge).
    Non-finite points break a line (a NaN row is a gap, as in W&B); a gap row is not drawn."""
    pts = [(x, y) for _, _, s in series for x, y in s if math.isfinite(x) and math.isfinite(y)]
    xs = [x for x, _ in pts] + [m[0] for m in marks] or [0.0, 1.0]
    ys = [y for _, y in pts] + [h[0] for h in hlines if math.isfinite(h[0])] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1.0
    if y1 == y0:
        y0, y1 = y0 - 0.5 * max(1.0, abs(y0)), y1 + 0.5 * max(1.0, abs(y1))
    pad = 0.06 * (y1 - y0)
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = WIDTH - PAD_L - PAD_R, PLOT_B - PAD_T

    def fx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * pw

    def fy(y: float) -> float:
        return PAD_T + (1 - (y - y0) / (y1 - y0)) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="{FONT}">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    if title:
        out.append(f'<text x="{PAD_L}" y="{TITLE_Y}" font-size="{FONT + 2}" font-weight="bold">{escape(title)}</text>')
    for t in nice_ticks(y0, y1):
        out.append(f'<line x1="{PAD_L}" y1="{fy(t):.1f}" x2="{PAD_L + pw}" y2="{fy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{PAD_L - 5}" y="{fy(t):.1f}" text-anchor="end" dominant-baseline="middle">'
                   f'{escape(_fmt(t))}</text>')
    for t in nice_ticks(x0, x1):
        out.append(f'<line x1="{fx(t):.1f}" y1="{PLOT_B}" x2="{fx(t):.1f}" y2="{PLOT_B + 4}" stroke="#888"/>')
        out.append(f'<text x="{fx(t):.1f}" y="{PLOT_B + 18}" text-anchor="middle">{escape(_fmt(t))}</text>')
    out.append(f'<text x="{PAD_L + pw / 2:.1f}" y="{PLOT_B + 36}" text-anchor="middle" fill="#555">'
               f'{escape(x_label)}</text>')
    out.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for y, _label, colour in hlines:
        if math.isfinite(y):
            out.append(f'<line x1="{PAD_L}" y1="{fy(y):.1f}" x2="{PAD_L + pw}" y2="{fy(y):.1f}" stroke="{colour}" '
                       'stroke-width="1.5" stroke-dasharray="7,4"/>')
    for label, colour, s in series:
        runs: list[list[str]] = [[]]
        for x, y in s:
            if math.isfinite(x) and math.isfinite(y):
                runs[-1].append(f"{fx(x):.1f},{fy(y):.1f}")
            elif runs[-1]:
                runs.append([])
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            elif run:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{" ".join(run)}">'
                           f'<title>{escape(label)}</title></polyline>')
    last_x = [-1e9, -1e9]  # right edge of the last label in each row
    for x, label, colour in sorted(marks):
        out.append(f'<line x1="{fx(x):.1f}" y1="{PAD_T}" x2="{fx(x):.1f}" y2="{PLOT_B}" stroke="{colour}" '
                   'stroke-width="1.2" stroke-dasharray="3,3"/>')
        half = 0.3 * FONT * len(label)
        left = min(max(fx(x) - half, 2.0), WIDTH - 2 - 2 * half)
        row = 0 if left > last_x[0] + 6 else 1
        last_x[row] = left + 2 * half
        out.append(f'<text x="{left + half:.1f}" y="{MARK_ROWS[row]}" text-anchor="middle" fill="{colour}">'
                   f'{escape(label)}</text>')
    legend: list[tuple[str, str, bool]] = [(label, colour, False) for label, colour, _ in series]
    legend += list(dict.fromkeys((label, colour, True) for _, label, colour in hlines))  # a band: one entry
    lx, ly = float(PAD_L), PLOT_B + 58
    for label, colour, dashed in legend:
        width = 30 + 0.6 * FONT * len(label)
        if lx + width > WIDTH - PAD_R and lx > PAD_L:
            lx, ly = float(PAD_L), ly + 18
        dash = ' stroke-dasharray="7,4"' if dashed else ""
        out.append(f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 22:.1f}" y2="{ly - 4}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 27:.1f}" y="{ly}" fill="{colour}">{escape(label)}</text>')
        lx += width + 14
    out.append("</svg>")
    return "\n".join(out) + "\n"
