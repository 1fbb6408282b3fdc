"""A local, self-contained HTML dashboard of a run: the report's layout as static SVG plots.

For people who cannot reach W&B from their cluster, or want one file to attach to a
post-mortem: every panel of the family's layout, coloured by its gauge's status,
with alert thresholds drawn as dashed lines and findings marked at their steps.
No JavaScript, no external assets: it opens from disk with no network.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import html
import math
import re
from typing import Any

from .analyze import Analysis, Downsampler, analyze_stream, detect_framework_of, detect_trainer, load_any, planned_steps
from .core import DIAGNOSIS_ID, FAMILY_LABELS, GAUGE_TITLES, InstrumentCluster
from .core.cluster import resolve_warn_sooner
from .core.frameworks import get_profile
from .core.keys import Row, canonical_family
from .core.rollouts import evidence_lines
from .core.text import clean_text
from .layouts import FRAMEWORK_LAYOUT, Layout, PanelSpec, load_layout, thresholds
from .readers.stream import StreamedLog

STATUS_COLOR = {"ok": "#2e9d5b", "warn": "#e0a100", "stop": "#d1343b", "no-data": "#9aa0a6"}
SEVERITY_COLOR = {"info": "#5f8fd6", "warn": "#e0a100", "stop": "#d1343b"}
PALETTE = ("#3366cc", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f")
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 200, 52, 12, 10, 26
MAX_POINTS = 400


class SeriesStore:
    """(step, value) per metric, thinned by averaging neighbours (bounded memory).

    Two :class:`Downsampler` per metric, one for steps and one for values: pushed in step, they halve at
    the same moments, so their bucket means stay paired.
    """

    def __init__(self) -> None:
        self.series: dict[str, tuple[Downsampler, Downsampler]] = {}
        #: layout key -> the name its series is stored under (a framework layout's own keys; None: TRL's rule)
        self.key_of: dict[str, str | None] | None = None

    def push(self, key: str, step: float, value: float) -> None:
        if not math.isfinite(value):
            return
        xs, ys = self.series.setdefault(key, (Downsampler(MAX_POINTS), Downsampler(MAX_POINTS)))
        xs.push(step)
        ys.push(value)

    def get(self, key: str) -> list[tuple[float, float]]:
        pair = self.series.get(key)
        return list(zip(pair[0].series(), pair[1].series(), strict=True)) if pair else []


def _esc(value: object) -> str:
    """HTML-escaped, with control characters shown as escapes (they are not valid in the page's SVG)."""
    return html.escape(clean_text(value))


def _canonical(layout_key: str) -> str:
    """A layout key as W&B stores it (``train/x``, ``eval/x``) -> the core's canonical name (``x``, ``eval_x``)."""
    if layout_key.startswith("train/"):
        return layout_key[6:]
    return "eval_" + layout_key[5:] if layout_key.startswith("eval/") else layout_key


def _series_key(layout_key: str, profile: Any) -> str | None:
    """The name a layout key (or ``*`` pattern) has in a normalised row: the framework profile's name for it, else
    TRL's rule; None when the profile drops the key."""
    if profile is not None:
        known, canon = profile.canonical(layout_key)
        if known:
            return canon
    return _canonical(layout_key)


class SeriesCollector:
    """Records every series a layout plots during the analysis pass: logged keys and rlcluster values."""

    def __init__(self, layout: Layout, profile: Any = None) -> None:
        ys = [y for sec in layout.sections for p in sec.panels for y in p.y]
        # a framework's layout names its own keys: the series are found under the names the profile gives them
        self.key_of = {y: _series_key(y, profile) for y in ys}
        self.wanted_raw = {k for y, k in self.key_of.items() if k is not None and not y.startswith("rlcluster/")}
        self.wanted_derived = [tuple(y.split("/", 2)[1:]) for y in ys if y.startswith("rlcluster/")]
        self.patterns = [w for w in self.wanted_raw if "*" in w]
        self.store = SeriesStore()
        if profile is not None:
            self.store.key_of = self.key_of

    def __call__(self, row: Row, cluster: InstrumentCluster, updated: set[str]) -> None:
        if row.kind == "summary":
            return
        for k, v in row.values.items():
            if k in self.wanted_raw or any(fnmatch.fnmatchcase(k, p) for p in self.patterns):
                self.store.push(k, row.step, v)
        for gid, name in self.wanted_derived:
            g = cluster.gauges.get(gid)
            if g is not None and gid in updated and name in g.derived:
                self.store.push(f"rlcluster/{gid}/{name}", row.step, g.derived[name])


def _expand(panel: PanelSpec, store: SeriesStore, key_of: dict[str, str | None] | None = None) -> list[str]:
    keys: list[str] = []
    for y in panel.y:
        c = key_of.get(y, _canonical(y)) if key_of is not None else _canonical(y)
        if c is None:
            continue
        if "*" in c:
            keys += sorted(k for k in store.series if fnmatch.fnmatchcase(k, c))
        elif c in store.series:
            keys.append(c)
    return keys


def _fmt(v: float) -> str:
    a = abs(v)
    if a == 0:
        return "0"
    return f"{v:.3g}" if 1e-3 <= a < 1e5 else f"{v:.1e}"


#: A series whose largest value is this many times smaller than the panel's largest gets its own (right) axis: on
#: one axis it would be a flat line (steps/s beside tokens/s).
AXIS_SPLIT = 20.0


def _y_range(values: list[float]) -> tuple[float, float]:
    """The axis range of ``values``: a margin of 5 %, never below 0 for data that is never negative (a share, a
    length), and a constant drawn from 0 to twice itself (all zeros: 0 to 1), not around itself."""
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = (0.0, 1.0) if lo == 0 else ((0.0, 2 * lo) if lo > 0 else (2 * lo, 0.0))
    span = hi - lo
    bottom, top = lo - 0.05 * span, hi + 0.05 * span
    return (max(bottom, 0.0) if lo >= 0 else bottom), top


def _axis_groups(series: list[tuple[str, list[tuple[float, float]]]]) -> tuple[set[str], set[str]]:
    """(keys on the left axis, keys on the right axis): a series far smaller than the largest goes right."""
    size = {k: max(abs(v) for _, v in pts) for k, pts in series}
    largest = max(size.values())
    right = {k for k, m in size.items() if 0 < m * AXIS_SPLIT < largest}
    return set(size) - right, right


def _svg(panel: PanelSpec, store: SeriesStore, marks: list[tuple[str, float, str, str]],
         findings: list[dict[str, Any]], x_range: tuple[float, float]) -> str:
    keys = _expand(panel, store, store.key_of)
    series = [(k, store.get(k)) for k in keys]
    series = [(k, pts) for k, pts in series if pts]
    if not series:
        return (f'<svg viewBox="0 0 {W} {H}" class="empty"><text x="{W / 2}" y="{H / 2}" text-anchor="middle">'
                "no data for this panel</text></svg>")
    marked = [m for m in marks if _canonical(m[0]) in keys]
    left, right = _axis_groups(series)
    axes = {side: _y_range([v for k, pts in series if k in group for _, v in pts]
                           + [m[1] for m in marked if _canonical(m[0]) in group])
            for side, group in (("left", left), ("right", right)) if group}
    pad_r = PAD_L if right else PAD_R
    x0, x1 = x_range
    if x1 <= x0:
        x1 = x0 + 1

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - pad_r)

    def sy(y: float, side: str = "left") -> float:
        lo, hi = axes[side]
        return PAD_T + (hi - y) / (hi - lo) * (H - PAD_T - PAD_B)

    parts = [f'<svg viewBox="0 0 {W} {H}" role="img"><rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - pad_r}" '
             f'height="{H - PAD_T - PAD_B}" class="plot"/>']
    for side, (lo, hi) in axes.items():
        tx, anchor = (PAD_L - 4, "end") if side == "left" else (W - pad_r + 4, "start")
        for frac in (0, 0.5, 1):
            yv = lo + frac * (hi - lo)
            parts.append(f'<text x="{tx}" y="{sy(yv, side) + 4:.1f}" text-anchor="{anchor}" class="tick">'
                         f"{_fmt(yv)}</text>")
    for frac in (0, 0.5, 1):
        xv = x0 + frac * (x1 - x0)
        parts.append(f'<text x="{sx(xv):.1f}" y="{H - 8}" text-anchor="middle" class="tick">{xv:.0f}</text>')
    for f in findings:
        color = SEVERITY_COLOR.get(f["severity"], "#888")
        x = sx(float(f["step"]))
        tip = _esc(f"step {f['step']} {f['severity'].upper()} {f['rule']}: {f['message']}") + _examples(f, "&#10;")
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="{color}" '
                     f'stroke-width="1.5" opacity="0.8"><title>{tip}</title></line>')
        parts.append(f'<circle cx="{x:.1f}" cy="{PAD_T + 4}" r="3.5" fill="{color}"><title>{tip}</title></circle>')
    # thresholds: a dashed line each, named in the legend (a label on the plot sat on the curves)
    for metric, value, severity, label in marked:
        y = sy(value, "right" if _canonical(metric) in right else "left")
        parts.append(f'<line x1="{PAD_L}" x2="{W - pad_r}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="{SEVERITY_COLOR.get(severity, "#888")}" stroke-dasharray="5 4" stroke-width="1.2">'
                     f"<title>{_esc(label)}</title></line>")
    for i, (k, pts) in enumerate(series):
        side = "right" if k in right else "left"
        d = " ".join(f"{sx(x):.1f},{sy(y, side):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{d}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.6">'
                     f"<title>{_esc(k)}</title></polyline>")
        if len(pts) == 1:  # a probe measured once: a line of one point draws nothing
            parts.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1], side):.1f}" r="3" '
                         f'fill="{PALETTE[i % len(PALETTE)]}"><title>{_esc(k)}</title></circle>')
    parts.append("</svg>")
    legend = "".join(f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{_esc(k)}'
                     f'{" (right axis)" if k in right else ""}</span>' for i, (k, _) in enumerate(series))
    legend += "".join(f'<span class="thr" style="color:{SEVERITY_COLOR.get(sev, "#888")}"><i class="dash" '
                      f'style="border-color:{SEVERITY_COLOR.get(sev, "#888")}"></i>{_esc(label)}</span>'
                      for _, _, sev, label in marked)
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _count(n: int, noun: str) -> str:
    """``1 finding``, ``3 findings``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _rule_link(rule: str, doc: str) -> str:
    """The rule's name, linked to its page in the manual (what it means, what to do, how to tune it) where the
    manual's address is set (RLCLUSTER_DOCS_URL), else with the command that prints that page as its tooltip."""
    if "://" not in doc:
        return f"<span class=\"rule\" title=\"{html.escape(doc, quote=True)}\">{_esc(rule)}</span>"
    return f"<a href=\"{html.escape(doc, quote=True)}\" title=\"the rule's page\">{_esc(rule)}</a>"


def _examples(finding: dict[str, Any], sep: str) -> str:
    """A finding's example completions (rollout evidence), each escaped, after ``sep`` (a line break)."""
    return "".join(f"{sep}{_esc('e.g. ' + x)}" for x in evidence_lines(finding.get("evidence") or [], width=160))


def _md(text: str) -> str:
    """The guides' tiny markdown: **bold**, *italic*, `code`, paragraphs."""
    out = html.escape(text)  # shipped guide text: its newlines make the paragraphs
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out, flags=re.S)
    out = re.sub(r"\*(.+?)\*", r"<i>\1</i>", out, flags=re.S)
    out = re.sub(r"`(.+?)`", r"<code>\1</code>", out)
    return "".join(f"<p>{p.strip()}</p>" for p in out.split("\n\n") if p.strip())


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f5f6f8;color:#1f2328}
header{background:#1f2937;color:#fff;padding:16px 24px}header h1{margin:0;font-size:20px}
header .meta{opacity:.8;margin-top:4px}.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;
font-weight:600;margin-left:8px}main{padding:12px 24px 40px}h2{margin:28px 0 6px;font-size:17px}
.guide{color:#444;max-width:1100px}.guide p{margin:4px 0}.grid{display:grid;grid-template-columns:repeat(auto-fill,
minmax(440px,1fr));gap:12px}.panel{background:#fff;border-radius:8px;border:1px solid #dde1e6;border-top:5px solid;
padding:8px 10px}.panel h3{margin:0 0 4px;font-size:13px;display:flex;justify-content:space-between}
.panel h3 .st{font-size:11px;text-transform:uppercase;font-weight:700}svg{width:100%;height:auto;display:block}
.plot{fill:#fbfbfc;stroke:#e3e6ea}.tick{font-size:10px;fill:#666}.thr{font-size:10px}.empty text{fill:#999;
font-size:12px}.legend{font-size:11px;color:#444;display:flex;flex-wrap:wrap;gap:4px 12px;margin-top:2px}
.legend i{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}
.legend i.dash{height:0;border-top:2px dashed;background:none}
.status{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:8px}.tile{background:#fff;
border-radius:8px;padding:8px 10px;border-left:6px solid;font-size:13px}.tile b{display:block}
table{border-collapse:collapse;background:#fff;width:100%;max-width:1300px}td,th{border-bottom:1px solid #eee;
padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}.sev{font-weight:700}
"""


def render_dashboard(analysis: Analysis, store: SeriesStore, layout: Layout, alert_config: Any = None) -> str:
    s = analysis.to_dict()
    gauges = s["gauges"]
    verdict = s["verdict"]
    family = s["trainer"]
    x_range = (float(analysis.first_step), float(max(analysis.last_step, analysis.first_step + 1)))
    by_gauge: dict[str, list[dict[str, Any]]] = {}
    for f in s["findings"]:
        if f["severity"] != "info":
            by_gauge.setdefault(f["gauge"], []).append(f)
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>rlcluster dashboard · {_esc(analysis.source)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{_esc(layout.title)}<span class='badge' style='background:{STATUS_COLOR[verdict]}'>"
        f"{verdict.upper()}</span></h1><div class='meta'>{_esc(analysis.source)} · "
        f"{_esc(FAMILY_LABELS.get(family, family))} · {s['rows']} rows · steps "
        f"{analysis.first_step}–{analysis.last_step} · generated {_dt.datetime.now():%Y-%m-%d %H:%M}"
        "</div></header><main>",
    ]
    diagnoses = [f for f in s["findings"] if f["gauge"] == DIAGNOSIS_ID]
    if diagnoses:  # the named cross-gauge patterns lead the page
        out.append("<h2>Diagnoses</h2><table><tr><th>step</th><th>diagnosis</th><th>evidence, what to do</th></tr>")
        for f in diagnoses:
            c = SEVERITY_COLOR.get(f["severity"], "#888")
            out.append(f"<tr><td>{f['step']}</td><td class='sev' style='color:{c}'>{_rule_link(f['rule'], f['doc'])}"
                       f"</td><td>{html.escape(f['message'])}</td></tr>")
        out.append("</table>")
    out.append("<h2>Status at a glance</h2><div class='status'>")
    for gid, title in GAUGE_TITLES.items():
        g = gauges[gid]
        st = g["status"]
        detail = g.get("note", "") if st == "no-data" else _count(len(by_gauge.get(gid, [])), "finding")
        out.append(f"<div class='tile' style='border-color:{STATUS_COLOR[st]}'><b>{_esc(title)}</b>"
                   f"<span style='color:{STATUS_COLOR[st]}' class='sev'>{st.upper()}</span> · "
                   f"{_esc(detail)}</div>")
    out.append("</div>")
    for section in layout.sections:
        out.append(f"<h2>{_esc(section.name)}</h2><div class='guide'>{_md(section.guide)}</div>"
                   "<div class='grid'>")
        for p in section.panels:
            st = gauges[p.gauge]["status"]
            svg = _svg(p, store, thresholds(p, alert_config), by_gauge.get(p.gauge, []), x_range)
            out.append(f"<div class='panel' style='border-top-color:{STATUS_COLOR[st]}'><h3>{_esc(p.title)}"
                       f"<span class='st' style='color:{STATUS_COLOR[st]}'>{_esc(p.gauge)}: {st}</span></h3>"
                       f"{svg}</div>")
        out.append("</div>")
    out.append("<h2>Findings</h2>")
    if s["findings"]:
        out.append("<table><tr><th>step</th><th>severity</th><th>gauge / rule</th>"
                   "<th>what happened, what to do</th></tr>")
        for f in s["findings"]:
            c = SEVERITY_COLOR.get(f["severity"], "#888")
            out.append(f"<tr><td>{f['step']}</td><td class='sev' style='color:{c}'>{f['severity'].upper()}</td>"
                       f"<td>{_esc(f['gauge'])}/{_rule_link(f['rule'], f['doc'])}</td><td>{_esc(f['message'])}"
                       f"{_examples(f, '<br>')}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>No findings: every gauge stayed inside its thresholds.</p>")
    if s.get("alerts"):
        out.append("<h2>Alerts (rules of alerts.yaml)</h2><table><tr><th>step</th><th>severity</th><th>rule</th>"
                   "<th>title</th></tr>")
        for a in s["alerts"]:
            if a["kind"] != "firing":
                continue
            c = SEVERITY_COLOR.get(a["severity"], "#888")
            out.append(f"<tr><td>{a['step']}</td><td class='sev' style='color:{c}'>{a['severity'].upper()}</td>"
                       f"<td>{_rule_link(a['rule'], a['doc'])}</td><td>{_esc(a['title'])}</td></tr>")
        out.append("</table>")
    out.append("</main></body></html>")
    return "\n".join(out)


def build_dashboard(path: str, trainer: str | None = None, alerts: Any = None,
                    warn_sooner: int | None = None) -> tuple[str, Analysis]:
    """(HTML, analysis) for any log ``rlcluster analyze`` reads (``warn_sooner`` as in ``analyze_path``)."""
    from .alerts import load_config

    alert_config = alerts if alerts is not None else load_config()
    warn_sooner = resolve_warn_sooner(warn_sooner, alert_config)  # before a large log is read
    log = load_any(path)
    # The family is fixed up front, so the one analysis pass feeds every row to the collector (a cluster left to
    # detect the family itself would hold its first rows back, and they would be missing from the plots). It is
    # detected by the same rule as `rlcluster analyze`, so both name the same trainer.
    framework, rows = detect_framework_of(log.rows)  # verl's rows are drawn on verl's own keys
    profile = get_profile(framework)
    if trainer:
        family = canonical_family(trainer)
    elif profile is not None:
        family = profile.family
    else:  # detection reads the first rows: go on with the iterator that replays them, or they would be lost
        detected, rows = detect_trainer(rows, framework=framework)
        family = detected or "sft"
    layout = load_layout(framework if framework in FRAMEWORK_LAYOUT else family)
    collector = SeriesCollector(layout, profile if framework in FRAMEWORK_LAYOUT else None)
    analysis = analyze_stream(rows, family, source=str(path), source_format=log.source_format,
                              max_steps=planned_steps(log), alerts=alert_config, observer=collector,
                              warn_sooner=warn_sooner, framework=framework)
    if isinstance(log, StreamedLog):  # known once the rows are read (a printed log, a provenance wrapper)
        analysis.source_format = log.source_format
    if log.meta.get("rollouts") is not None:
        from .rollouts_offline import add_evidence

        add_evidence(analysis, log.meta["rollouts"])  # type: ignore[arg-type]
    return render_dashboard(analysis, collector.store, layout, alert_config), analysis
