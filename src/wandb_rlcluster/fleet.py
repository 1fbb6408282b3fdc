"""The fleet page: one self-contained HTML table of a sweep, a row per run, sortable by any column.

Each row carries sparklines of the gauges that fired, with a mark at the step where each first fired, so a
sweep's failures can be told apart at a glance. No network to view it: the styles, the SVG and the few lines
of script that sort the table are all inline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from .core import GAUGE_TITLES
from .sweep import VERDICT_RANK, RunRecord, counts

SPARK_W, SPARK_H = 132, 30
MARK_COLORS = {"stop": "#c62828", "warn": "#ef8f00", "ok": "#888"}
LINE_COLORS = {"stop": "#b71c1c", "warn": "#8a5a00", "ok": "#5470c6"}

STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:18px;color:#222;background:#fafafa}
h1{font-size:18px;margin:0 0 4px} .sub{color:#555;margin-bottom:12px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002}
th,td{padding:4px 8px;border-bottom:1px solid #e4e4e4;text-align:left;vertical-align:middle}
th{background:#f0f0f0;cursor:pointer;user-select:none;white-space:nowrap;position:sticky;top:0}
th[aria-sort=ascending]::after{content:" \\25B2";font-size:10px}
th[aria-sort=descending]::after{content:" \\25BC";font-size:10px}
td.num{text-align:right;font-variant-numeric:tabular-nums} td.path{font-family:ui-monospace,monospace;font-size:12px}
td.rule,td.path,td.diag{white-space:nowrap} td.sparks{min-width:200px;max-width:440px}
td.path{max-width:30em;overflow:hidden;text-overflow:ellipsis}
.badge{display:inline-block;min-width:44px;text-align:center;border-radius:3px;padding:1px 6px;font-weight:600;
color:#fff}
.v-stop{background:#c62828}.v-warn{background:#ef8f00}.v-ok{background:#2e7d32}.v-error{background:#777}
.spark{display:inline-block;margin-right:6px;text-align:center;font-size:10px;color:#555}
.spark svg{display:block;background:#fcfcfc;border:1px solid #eee}
.reason{color:#777;font-style:italic}
"""

SCRIPT = """
document.querySelectorAll('#runs th[data-sort]').forEach(th => th.addEventListener('click', () => {
  const body = document.querySelector('#runs tbody');
  const dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
  document.querySelectorAll('#runs th').forEach(h => h.removeAttribute('aria-sort'));
  th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
  const col = th.cellIndex, num = th.dataset.sort === 'num';
  const key = r => r.cells[col].dataset.v;
  const rows = [...body.rows];
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const c = num ? parseFloat(x) - parseFloat(y) : (x < y ? -1 : x > y ? 1 : 0);  // code points: as sorted() does
    return (c ? dir * c : 0) || (a.dataset.rank - b.dataset.rank);
  });
  rows.forEach(r => body.appendChild(r));
}));
"""

HEADERS = (("#", "num"), ("verdict", "num"), ("run", "text"), ("first warn", "num"), ("first stop", "num"),
           ("diagnosis", "text"), ("rule", "text"), ("gauges that fired", "text"), ("rows", "num"))


def sparkline_svg(values: Sequence[float], mark: float | None, severity: str, title: str) -> str:
    """An inline SVG sparkline; ``mark`` (0..1 along the run) draws the firing step as a vertical line."""
    vals = [v for v in values if math.isfinite(v)]
    out = [f'<svg width="{SPARK_W}" height="{SPARK_H}" viewBox="0 0 {SPARK_W} {SPARK_H}" role="img">',
           f"<title>{escape(title)}</title>"]
    if len(vals) >= 2:
        lo, hi = min(vals), max(vals)
        span = hi - lo if hi - lo > 1e-12 * max(1.0, abs(hi)) else 1.0
        step = (SPARK_W - 4) / (len(vals) - 1)
        pts = " ".join(f"{2 + i * step:.1f},{SPARK_H - 3 - (v - lo) / span * (SPARK_H - 6):.1f}"
                       for i, v in enumerate(vals))
        out.append(f'<polyline fill="none" stroke="{LINE_COLORS.get(severity, "#5470c6")}" stroke-width="1.2" '
                   f'points="{pts}"/>')
    if mark is not None:
        x = 2 + min(1.0, max(0.0, mark)) * (SPARK_W - 4)
        out.append(f'<line class="mark" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{SPARK_H}" '
                   f'stroke="{MARK_COLORS.get(severity, "#888")}" stroke-width="1.5" stroke-dasharray="3,2"/>')
    out.append("</svg>")
    return "".join(out)


def _sparks(r: RunRecord) -> str:
    if r.verdict == "error":
        return f'<span class="reason">{escape(r.reason)}</span>'
    cells = []
    span = r.last_step - r.first_step
    for f in r.fired:
        mark = None
        if f.step >= 0:
            mark = (f.step - r.first_step) / span if span > 0 else 1.0
        label = GAUGE_TITLES.get(f.gauge, f.gauge)
        title = f"{label}: {f.severity} at step {f.step}" if f.step >= 0 else f"{label} (nothing fired)"
        cells.append(f'<span class="spark" data-gauge="{escape(f.gauge)}">'
                     f"{sparkline_svg(f.spark, mark, f.severity, title)}{escape(f.gauge)}"
                     f"{f' @{f.step}' if f.step >= 0 else ''}</span>")
    return "".join(cells)


def _num_cell(v: int | None) -> str:
    return f'<td class="num" data-v="{"Infinity" if v is None else v}">{"–" if v is None else v}</td>'


def _text_cell(v: str, cls: str = "") -> str:
    return f'<td{f" class={chr(34)}{cls}{chr(34)}" if cls else ""} data-v="{escape(v)}">{escape(v) or "–"}</td>'


#: The most characters of a run's path the run column shows: the end of the path (where runs differ), the whole
#: path in the cell's tooltip; a long path would otherwise push the other columns off a laptop's screen.
PATH_SHOWN = 44


def _path_cell(path: str) -> str:
    shown = path if len(path) <= PATH_SHOWN else "…" + path[-(PATH_SHOWN - 1):]
    return f'<td class="path" data-v="{escape(path)}" title="{escape(path)}">{escape(shown) or "–"}</td>'


def build_fleet_page(records: Sequence[RunRecord], title: str = "rlcluster sweep") -> str:
    """The whole page, ranked worst first (the order of ``records``); click a header to sort by it."""
    n = counts(records)
    summary = " · ".join(f"{v} {k}" for k, v in n.items() if v)
    head = "".join(f'<th data-sort="{kind}">{escape(label)}</th>' for label, kind in HEADERS)
    rows = []
    for i, r in enumerate(records, 1):
        badge = f'<span class="badge v-{r.verdict}">{r.verdict.upper()}</span>'
        rows.append(
            f'<tr data-rank="{i}" data-verdict="{r.verdict}">'
            f'<td class="num" data-v="{i}">{i}</td>'
            f'<td data-v="{-VERDICT_RANK[r.verdict]}">{badge}</td>'
            f"{_path_cell(r.path)}{_num_cell(r.first_warn_step)}{_num_cell(r.first_stop_step)}"
            f"{_text_cell(r.diagnosis, 'diag')}"
            f'<td class="rule" data-v="{escape(r.rule)}" title="{escape(r.message)}">{escape(r.rule) or "–"}</td>'
            f'<td class="sparks" data-v="{escape(" ".join(f.gauge for f in r.fired if f.step >= 0))}">{_sparks(r)}</td>'
            f"{_num_cell(r.rows if r.verdict != 'error' else None)}</tr>")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head>\n<body><h1>{escape(title)}</h1>"
            f'<div class="sub">{len(records)} run(s) · {escape(summary)} · ranked worst first; click a column '
            "to sort by it (again to reverse); a dashed line marks the step where a gauge first fired</div>\n"
            f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(rows) +
            f"\n</tbody></table>\n<script>{SCRIPT}</script>\n</body></html>\n")
