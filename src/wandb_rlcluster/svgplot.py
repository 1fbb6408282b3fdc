"""A tiny, dependency-free SVG line chart: two series on one axis, with marked rows.

Enough for the rule reference (an example's firing stream next to its healthy stream) and nothing more. The
output is deterministic text (coordinates rounded to 0.1 px), so a regenerated page can be compared with the
committed one byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 360, 150
PAD_L, PAD_R, PAD_T, PAD_B = 44, 8, 18, 22


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-2:
        return f"{x:.1e}"
    return f"{x:.3g}"


def line_chart(series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]], *, title: str = "",
               marks: Sequence[tuple[float, str, str]] = ()) -> str:
    """An SVG document: ``series`` is ``(label, colour, [(x, y), ...])``; ``marks`` vertical lines
    ``(x, label, colour)``. Non-finite points break a line (a NaN row is a gap, as in W&B)."""
    pts = [(x, y) for _, _, s in series for x, y in s if math.isfinite(x) and math.isfinite(y)]
    xs = [x for x, _ in pts] + [m[0] for m in marks] or [0.0, 1.0]
    ys = [y for _, y in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1.0
    if y1 == y0:
        y0, y1 = y0 - 0.5 * max(1.0, abs(y0)), y1 + 0.5 * max(1.0, abs(y1))
    pad = 0.05 * (y1 - y0)
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def px(x: float) -> str:
        return f"{PAD_L + (x - x0) / (x1 - x0) * pw:.1f}"

    def py(y: float) -> str:
        return f"{PAD_T + (1 - (y - y0) / (y1 - y0)) * ph:.1f}"

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="9">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#bbb"/>']
    if title:
        out.append(f'<text x="{PAD_L}" y="11" font-size="10">{escape(title)}</text>')
    for y in (y0 + pad, y1 - pad):
        out.append(f'<text x="{PAD_L - 3}" y="{py(y)}" text-anchor="end" dominant-baseline="middle">'
                   f'{escape(_fmt(y))}</text>')
    for x in (x0, x1):
        out.append(f'<text x="{px(x)}" y="{HEIGHT - 8}" text-anchor="middle">{escape(_fmt(x))}</text>')
    for k, (x, label, colour) in enumerate(marks):  # labels alternate above and inside the bottom: close marks
        out.append(f'<line x1="{px(x)}" y1="{PAD_T}" x2="{px(x)}" y2="{PAD_T + ph}" stroke="{colour}" '
                   'stroke-dasharray="3,2"/>')
        ly = PAD_T - 3 if k % 2 else PAD_T + ph - 3
        out.append(f'<text x="{px(x)}" y="{ly}" text-anchor="middle" fill="{colour}">{escape(label)}</text>')
    legend_x = PAD_L + pw
    for n, (label, colour, s) in enumerate(series):
        runs: list[list[str]] = [[]]
        for x, y in s:
            if math.isfinite(x) and math.isfinite(y):
                runs[-1].append(f"{px(x)},{py(y)}")
            elif runs[-1]:
                runs.append([])
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="1.5" fill="{colour}"/>')
            elif run:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1" points="{" ".join(run)}"/>')
        out.append(f'<text x="{legend_x - 3}" y="{PAD_T + 10 + 10 * n}" text-anchor="end" '
                   f'fill="{colour}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
