"""Score many: every detector reads every recorded run (faulty runs and their healthy twins) and is measured alike.

Detectors: ``ours`` (the instrument core, ``analyze_rows`` on the rows as the callback sees them: max_steps known,
the gold reward named), the seed post's rules, the W&B z-score trigger, the GLR anchor (pre-change model only,
threshold set on the twins), the clairvoyant oracle (a CUSUM that knows the healthy path -- the twin -- and the
faulty path after onset, threshold set on the twins), rldoctor 0.2.0 and rlwatch 0.5.1 (``peers.py``).

Measures, per cause and overall: recall (a warn/stop from one of the cause's expected gauges at or after onset),
early fires (any warn/stop before onset), median delay in steps after onset, warned before damage (the first
matching warning strictly before the damage step, over faulty runs whose damage showed) and the median lead in
steps, twins warned (any warn/stop on a healthy twin), and each detector's run time.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from anchors import zscore_findings
from causes import BASES, CAUSES, damage_step
from glr import calibrate_per_metric, glr_findings
from oracle import threshold_for
from record import RunMeta, load_meta, load_rows

from wandb_rlcluster.core import analyze_rows

from seed_rules import seed_findings

Alarm = tuple[str, str, str, int]  # (gauge, rule, severity, step)
ALARM = ("warn", "stop")
DETECTORS = ("ours", "seed", "zscore", "glr", "oracle", "rldoctor", "rlwatch")
LABELS = {"ours": "ours (rlcluster)", "seed": "seed rules", "zscore": "z-score", "glr": "GLR (pre-change only)",
          "oracle": "oracle (clairvoyant)", "rldoctor": "rldoctor 0.2.0", "rlwatch": "rlwatch 0.5.1"}
FAMILY = {"grpo": "grpo", "rloo": "grpo", "dpo": "dpo", "sft": "sft"}
ROLL = 5


@dataclass
class Run:
    meta: RunMeta
    rows: list[dict[str, Any]]
    path: Path
    alarms: dict[str, list[Alarm]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def load_runs(runs_dir: Path) -> list[Run]:
    out = []
    for mp in sorted(runs_dir.glob("*.json")):
        meta = load_meta(mp)
        jp = mp.with_suffix(".jsonl")
        if jp.exists():
            out.append(Run(meta, load_rows(jp), jp))
    return out


# -- the detectors on one run -------------------------------------------------------------------------------------


def ours(run: Run) -> list[Alarm]:
    params = {"reward": {"gold": ["gold"]}} if BASES[run.meta.base].gold else None
    c = analyze_rows(run.rows, trainer=FAMILY[run.meta.base], params=params, max_steps=run.meta.steps)
    return [(f.gauge, f.rule, f.severity, f.step) for f in c.findings]


def seed(run: Run) -> list[Alarm]:
    return [(f.gauge, f.rule, f.severity, f.step) for f in seed_findings(run.rows, FAMILY[run.meta.base])]


def zscore(run: Run) -> list[Alarm]:
    return [(f.gauge, f.rule, f.severity, f.step) for f in zscore_findings(run.rows)]


# -- the oracle: knows both paths ---------------------------------------------------------------------------------


def _train_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    keep = []
    for r in rows:
        if "loss" in r and "train_runtime" not in r:
            keep.append({k: float(v) for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return keep


def _smoothed(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """The run's mean path as the oracle knows it: a centred rolling mean of every series."""
    out = []
    for i in range(len(rows)):
        lo, hi = max(0, i - ROLL // 2), min(len(rows), i + ROLL // 2 + 1)
        d: dict[str, float] = {}
        for k in rows[i]:
            vals = [rows[j][k] for j in range(lo, hi) if k in rows[j] and math.isfinite(rows[j][k])]
            d[k] = sum(vals) / len(vals) if vals else math.nan
        out.append(d)
    return out


TERM_CLIP = 10.0
"""A row adds at most this much evidence per metric (heavy tails), but a shift of any size still counts in full."""


def _cusum_path(x: list[dict[str, float]], m0: list[dict[str, float]], m1: list[dict[str, float]],
                onset_row: int) -> tuple[list[int], list[float]]:
    """Page's CUSUM of the Gaussian log-likelihood ratio "on the faulty path m1" against "on the healthy path m0",
    summed over every metric the two paths separate, the noise scale of each the robust spread of the run's rows
    around its own mean path before onset."""
    from oracle import SKIP_KEYS

    n = min(len(x), len(m0), len(m1))
    if n < 5:
        return [], []
    own = _smoothed(x[:n])
    llr = [0.0] * n
    for k in x[0]:
        if k in SKIP_KEYS or k not in m0[0] or k not in m1[0]:
            continue
        res = sorted(abs(x[i][k] - own[i][k]) for i in range(min(onset_row, n))
                     if k in x[i] and math.isfinite(x[i][k]) and math.isfinite(own[i].get(k, math.nan)))
        s = 1.4826 * res[len(res) // 2] if len(res) >= 5 else 0.0
        if not s > 1e-12:
            continue
        for i in range(n):
            xi, a, b = x[i].get(k, math.nan), m0[i].get(k, math.nan), m1[i].get(k, math.nan)
            if not (math.isfinite(xi) and math.isfinite(a) and math.isfinite(b)):
                continue
            d = (b - a) / s
            llr[i] += max(-TERM_CLIP, min(TERM_CLIP, d * ((xi - a) / s - d / 2.0)))
    steps = [int(r.get("step", i)) for i, r in enumerate(x[:n])]
    out, acc = [], 0.0
    for v in llr:
        acc = max(0.0, acc + v)
        out.append(acc)
    return steps, out


# -- scoring -------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    hit: int | None  # first warn/stop from an expected gauge at or after onset
    rule: str | None
    early: bool
    any_alarm: bool


def outcome(alarms: Sequence[Alarm], onset: int | None, expected: Sequence[str]) -> Outcome:
    al = [a for a in alarms if a[2] in ALARM]
    if onset is None:
        return Outcome(None, None, False, bool(al))
    hits = sorted((s, f"{g}/{r}") for g, r, _, s in al if s >= onset and g in expected)
    return Outcome(hits[0][0] if hits else None, hits[0][1] if hits else None, any(s < onset for *_, s in al),
                   bool(al))


@dataclass
class Measures:
    runs: int = 0
    recalled: int = 0
    early: int = 0
    delays: list[int] = field(default_factory=list)
    with_damage: int = 0
    before_damage: int = 0
    leads: list[int] = field(default_factory=list)
    twins: int = 0
    twins_warned: int = 0

    def add(self, run: Run, o: Outcome) -> None:
        m = run.meta
        if m.cause is None:
            self.twins += 1
            self.twins_warned += o.any_alarm
            return
        self.runs += 1
        self.early += o.early
        if o.hit is not None:
            self.recalled += 1
            self.delays.append(o.hit - (m.onset or 0))
        if m.damage is not None:
            self.with_damage += 1
            if o.hit is not None and o.hit < m.damage:
                self.before_damage += 1
                self.leads.append(m.damage - o.hit)


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f} %" if b else "–"


def _med(xs: Sequence[int]) -> str:
    return f"{statistics.median(xs):g}" if xs else "–"


def run_detectors(runs: list[Run], peers: bool, progress: Callable[[str], None] = lambda s: None) -> list[str]:
    """Fill every run's alarms and seconds; returns notes (thresholds, peers missing)."""
    notes = []
    for name, fn in (("ours", ours), ("seed", seed), ("zscore", zscore)):
        progress(name)
        for r in runs:
            t0 = time.perf_counter()
            r.alarms[name] = fn(r)
            r.seconds[name] = time.perf_counter() - t0
    # GLR: threshold from the twins, then every run
    progress("glr")
    twins = [r for r in runs if r.meta.cause is None]
    t0 = time.perf_counter()
    seeds = sorted({r.meta.seed for r in runs})
    h = calibrate_per_metric([(r.meta.base, r.rows) for r in twins])
    cal_s = time.perf_counter() - t0
    for r in runs:
        t0 = time.perf_counter()
        r.alarms["glr"] = glr_findings(r.rows, r.meta.base, h)
        r.seconds["glr"] = time.perf_counter() - t0 + cal_s / max(1, len(runs))
    # the same thresholds set without the run's own seed: how far the in-sample figure flatters the anchor
    loso = sum(bool(glr_findings(t.rows, t.meta.base, calibrate_per_metric(
        [(r.meta.base, r.rows) for r in twins if r.meta.seed != t.meta.seed]))) for t in twins) if len(seeds) > 1 else 0
    notes.append(f"GLR: one threshold per (trainer, metric), just above the largest statistic any of the {len(twins)} "
                 f"twins reaches (in-sample, as the issue sets it: twins warned 0 by construction); set on the other "
                 f"seeds' twins only (leave one seed out) it warns on {loso} of {len(twins)} twins")
    progress("oracle")
    notes.append(_oracle(runs))
    if peers:
        from peers import run_peer

        for name in ("rldoctor", "rlwatch"):
            progress(name)
            res, note = run_peer(name, [r.path for r in runs])
            notes.append(f"{name}: {note}")
            for r in runs:
                rec = res.get(str(r.path))
                if rec is not None:
                    r.alarms[name] = [(f["gauge"], f["rule"], f["severity"], int(f["step"])) for f in rec["findings"]]
                    r.seconds[name] = rec["seconds"]
    return notes


def _oracle(runs: list[Run]) -> str:
    """The clairvoyant CUSUM: threshold on the twins (each against every fault of its base and seed), then fires."""
    by_key = {(r.meta.base, r.meta.seed, r.meta.cause): r for r in runs}
    paths: dict[str, tuple[list[int], list[float]]] = {}
    twin_max: list[float] = []
    t0 = time.perf_counter()
    for r in runs:
        twin = by_key.get((r.meta.base, r.meta.seed, None))
        if twin is None:
            continue
        x = _train_rows(r.rows)
        m0 = _smoothed(_train_rows(twin.rows))
        if r.meta.cause is None:
            worst = 0.0
            for (b, s, c), f in by_key.items():
                if b == r.meta.base and s == r.meta.seed and c is not None:
                    _, path = _cusum_path(x, m0, _smoothed(_train_rows(f.rows)), len(x))
                    worst = max([worst, *path])
            twin_max.append(worst)
        else:
            onset_row = next((i for i, row in enumerate(x) if row.get("step", 0) >= (r.meta.onset or 0)), len(x))
            paths[r.meta.name] = _cusum_path(x, m0, _smoothed(x), onset_row)
    twin_seeds = [r.meta.seed for r in runs if r.meta.cause is None and (r.meta.base, r.meta.seed, None) in by_key]
    # in-sample, as the detection benchmark's oracle: at most 5 % of the twins over it
    h = dict.fromkeys(twin_seeds, threshold_for(twin_max, 0.05) * (1 + 1e-9))
    per_run = (time.perf_counter() - t0) / max(1, len(runs))
    worst_of = dict(zip([r.meta.name for r in runs if r.meta.cause is None and r.meta.seed in h], twin_max,
                        strict=True))
    for r in runs:
        r.seconds["oracle"] = per_run
        if r.meta.cause is None:
            hit = worst_of.get(r.meta.name, 0.0) > h.get(r.meta.seed, math.inf)
            r.alarms["oracle"] = [("oracle", "cusum", "warn", 0)] if hit else []
            continue
        steps, s = paths.get(r.meta.name, ([], []))
        # the oracle fuses every metric the fault moves: its alarm counts for whichever gauge is expected
        first = next((st for st, v in zip(steps, s, strict=True) if v > h.get(r.meta.seed, math.inf)), None)
        gauge = r.meta.expected[0] if r.meta.expected else "oracle"
        r.alarms["oracle"] = [(gauge, "cusum", "warn", first)] if first is not None else []
    return f"oracle: threshold {max(h.values(), default=math.inf):.3g} (at most 5 % of the twins over it, in-sample)"


def measures(runs: list[Run], det: str, cause: str | None = None) -> Measures:
    m = Measures()
    for r in runs:
        if det not in r.alarms:
            continue
        if cause is not None and r.meta.cause not in (cause, None):
            continue
        if cause is not None and r.meta.cause is None and r.meta.base != CAUSES[cause].base:
            continue
        m.add(r, outcome(r.alarms[det], r.meta.onset, r.meta.expected))
    return m


def table(runs: list[Run], dets: Sequence[str]) -> list[str]:
    head = ("| detector | recall | early fires | median delay (steps) | warned before damage | median lead (steps) "
            "| twins warned | run time (s, all runs) |")
    out = [head, "|" + "---|" * 8]
    for d in dets:
        m = measures(runs, d)
        secs = sum(r.seconds.get(d, 0.0) for r in runs)
        out.append(f"| {LABELS[d]} | {_pct(m.recalled, m.runs)} ({m.recalled}/{m.runs}) | {_pct(m.early, m.runs)} "
                   f"| {_med(m.delays)} | {_pct(m.before_damage, m.with_damage)} ({m.before_damage}/{m.with_damage}) "
                   f"| {_med(m.leads)} | {_pct(m.twins_warned, m.twins)} ({m.twins_warned}/{m.twins}) | {secs:.2f} |")
    return out


def cause_table(runs: list[Run], dets: Sequence[str]) -> list[str]:
    out = ["| cause | trainer | runs | damage seen | damage rule on the twin | median onset -> damage | "
           + " | ".join(LABELS[d] for d in dets) + " |", "|" + "---|" * (6 + len(dets))]
    twins = {(r.meta.base, r.meta.seed): r for r in runs if r.meta.cause is None}
    for name, c in CAUSES.items():
        mine = [r for r in runs if r.meta.cause == name]
        if not mine:
            continue
        dmg = [r.meta.damage - (r.meta.onset or 0) for r in mine if r.meta.damage is not None]
        # the same damage rule read on the healthy twin (from the same onset): how often the harm is only noise
        on_twin = [damage_step(c, t.rows, r.meta.onset or 0, t.rows) is not None for r in mine
                   if (t := twins.get((r.meta.base, r.meta.seed))) is not None]
        cells = []
        for d in dets:
            m = measures(runs, d, name)
            cells.append(f"{m.recalled}/{m.runs}, {m.before_damage}/{m.with_damage} early-enough, d={_med(m.delays)}")
        out.append(f"| {name} | {BASES[c.base].kind} | {len(mine)} | {len(dmg)}/{len(mine)} | "
                   f"{sum(on_twin)}/{len(on_twin)} | {_med(dmg)} | "
                   + " | ".join(cells) + " |")
    return out


def misses(runs: list[Run], det: str = "ours") -> list[str]:
    """Per cause, where ours missed or was late, and what it did say (so the lead can act)."""
    out = []
    for name in CAUSES:
        mine = [r for r in runs if r.meta.cause == name and det in r.alarms]
        if not mine:
            continue
        lines = []
        for r in mine:
            o = outcome(r.alarms[det], r.meta.onset, r.meta.expected)
            late = r.meta.damage is not None and (o.hit is None or o.hit >= r.meta.damage)
            if o.hit is None or late:
                said = sorted({f"{g}/{rl}@{s}" for g, rl, sev, s in r.alarms[det] if sev in ALARM})[:6]
                lines.append(f"seed {r.meta.seed}: onset {r.meta.onset}, damage {r.meta.damage}, first expected "
                             f"warning {o.hit} ({o.rule}); warn/stop said: {', '.join(said) or 'nothing'}")
        if lines:
            out.append(f"- **{name}** ({CAUSES[name].what}; expected gauges {', '.join(CAUSES[name].expected)}):")
            out.extend(f"  - {x}" for x in lines)
    for r in runs:
        if r.meta.cause is None and det in r.alarms:
            said = sorted({f"{g}/{rl}@{s}" for g, rl, sev, s in r.alarms[det] if sev in ALARM})
            if said:
                out.append(f"- healthy twin **{r.meta.name}** warned: {', '.join(said[:6])}")
    return out or ["- none: ours warned from an expected gauge before the damage on every faulty run"]


# -- pictures --------------------------------------------------------------------------------------------------------

COLORS = {"ours": "#1f77b4", "seed": "#8c564b", "zscore": "#7f7f7f", "glr": "#2ca02c", "oracle": "#9467bd",
          "rldoctor": "#ff7f0e", "rlwatch": "#e377c2", "damage": "#d62728"}


def cause_svg(runs: list[Run], cause: str, dets: Sequence[str]) -> str:
    """Steps relative to onset (0); one lane for the damage and one per detector, a dot per seed where it first
    warned from an expected gauge (an open circle at the left edge: it warned before onset)."""
    mine = [r for r in runs if r.meta.cause == cause]
    lanes = ["damage", *dets]
    w, lane_h, left, top = 560, 22, 150, 34
    lo = -10
    hi = max([r.meta.steps - (r.meta.onset or 0) for r in mine] + [10])
    h = top + lane_h * len(lanes) + 30

    def x(v: float) -> float:
        return left + (min(max(v, lo), hi) - lo) / (hi - lo) * (w - left - 14)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="8" y="16" font-size="13">{escape(cause)}: {escape(CAUSES[cause].what)}</text>',
             f'<line x1="{x(0):.1f}" y1="{top - 8}" x2="{x(0):.1f}" y2="{h - 26}" stroke="black" '
             f'stroke-dasharray="4 3"/><text x="{x(0) + 3:.1f}" y="{top - 10}">onset</text>']
    for i, lane in enumerate(lanes):
        y = top + lane_h * i + lane_h / 2
        label = "damage" if lane == "damage" else LABELS[lane]
        parts.append(f'<text x="8" y="{y + 4:.1f}">{escape(label)}</text>')
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - 14}" y2="{y:.1f}" stroke="#ddd"/>')
        for j, r in enumerate(mine):
            onset = r.meta.onset or 0
            dy = (j - (len(mine) - 1) / 2) * 3
            if lane == "damage":
                if r.meta.damage is not None:
                    parts.append(f'<rect x="{x(r.meta.damage - onset) - 3:.1f}" y="{y + dy - 3:.1f}" width="6" '
                                 f'height="6" fill="{COLORS["damage"]}"/>')
                continue
            o = outcome(r.alarms.get(lane, []), r.meta.onset, r.meta.expected)
            if o.hit is not None:
                parts.append(f'<circle cx="{x(o.hit - onset):.1f}" cy="{y + dy:.1f}" r="3.5" '
                             f'fill="{COLORS[lane]}"/>')
            elif o.early:
                parts.append(f'<circle cx="{x(lo):.1f}" cy="{y + dy:.1f}" r="3.5" fill="none" '
                             f'stroke="{COLORS[lane]}"/>')
    for t in range(lo, hi + 1, 10):
        parts.append(f'<text x="{x(t) - 6:.1f}" y="{h - 12}">{t:+d}</text>')
    parts.append(f'<text x="{left}" y="{h - 1}">steps after onset (one mark per seed; a miss has no mark)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def overview_svg(runs: list[Run], dets: Sequence[str]) -> str:
    """Every cause on one picture: a band per cause, steps relative to onset (0), a red tick per seed at its damage
    and one lane per detector with a dot per seed where it first warned from an expected gauge (an open circle at
    the left edge: it warned before onset); a grey bar spans the median onset-to-damage interval."""
    causes = [c for c in CAUSES if any(r.meta.cause == c for r in runs)]
    lane_h, pad, left, top, w = 7, 8, 150, 40, 760
    band = lane_h * len(dets) + pad
    lo, hi = -5, max([r.meta.steps - (r.meta.onset or 0) for r in runs if r.meta.cause] + [10])
    h = top + band * len(causes) + 60

    def x(v: float) -> float:
        return left + (min(max(v, lo), hi) - lo) / (hi - lo) * (w - left - 14)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
             '<text x="8" y="16" font-size="13">Fault-injection benchmark: when each tool first warned, per cause '
             'and seed (steps after onset)</text>']
    for i, d in enumerate(dets):  # legend
        lx = 8 + i * 105
        parts.append(f'<circle cx="{lx + 4}" cy="28" r="3.5" fill="{COLORS[d]}"/>'
                     f'<text x="{lx + 11}" y="32">{escape(LABELS[d])}</text>')
    parts.append(f'<rect x="{8 + len(dets) * 105}" y="24" width="3" height="9" fill="{COLORS["damage"]}"/>'
                 f'<text x="{15 + len(dets) * 105}" y="32">damage</text>')
    for ci, cause in enumerate(causes):
        mine = [r for r in runs if r.meta.cause == cause]
        y0 = top + ci * band
        if ci % 2 == 0:
            parts.append(f'<rect x="0" y="{y0}" width="{w}" height="{band}" fill="#f6f6f6"/>')
        parts.append(f'<text x="8" y="{y0 + band / 2 + 4:.1f}">{escape(cause)}</text>')
        dmg = sorted(r.meta.damage - (r.meta.onset or 0) for r in mine if r.meta.damage is not None)
        if dmg:
            parts.append(f'<rect x="{x(0):.1f}" y="{y0 + 1}" width="{x(dmg[len(dmg) // 2]) - x(0):.1f}" '
                         f'height="{band - 2}" fill="#e8e8e8"/>')
        for r in mine:
            if r.meta.damage is not None:
                parts.append(f'<rect x="{x(r.meta.damage - (r.meta.onset or 0)) - 1:.1f}" y="{y0 + 1}" width="2" '
                             f'height="{band - 2}" fill="{COLORS["damage"]}" opacity="0.6"/>')
        for li, d in enumerate(dets):
            y = y0 + pad / 2 + lane_h * li + lane_h / 2
            for r in mine:
                o = outcome(r.alarms.get(d, []), r.meta.onset, r.meta.expected)
                if o.hit is not None:
                    parts.append(f'<circle cx="{x(o.hit - (r.meta.onset or 0)):.1f}" cy="{y:.1f}" r="2.4" '
                                 f'fill="{COLORS[d]}" opacity="0.75"/>')
                elif o.early:
                    parts.append(f'<circle cx="{x(lo):.1f}" cy="{y:.1f}" r="2.4" fill="none" stroke="{COLORS[d]}"/>')
    yb = top + band * len(causes)
    parts.append(f'<line x1="{x(0):.1f}" y1="{top}" x2="{x(0):.1f}" y2="{yb}" stroke="black" stroke-dasharray="4 3"/>')
    for t in range(0, hi + 1, 5):
        parts.append(f'<text x="{x(t) - 6:.1f}" y="{yb + 14}">{t:+d}</text>')
    lanes = escape(", ".join(LABELS[d] for d in dets))
    parts.append(f'<text x="8" y="{yb + 30}">steps after onset (dashed line); lanes top to bottom: {lanes}</text>')
    parts.append(f'<text x="8" y="{yb + 45}">grey: median onset to damage; red ticks: each seed\'s damage; '
                 'a miss has no mark</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def score_and_write(runs_dir: Path, results: Path, pictures: Path, peers: bool = True, command: str = "",
                    started: float | None = None) -> list[Run]:
    t_score = time.perf_counter()
    runs = load_runs(runs_dir)
    if not runs:
        raise SystemExit(f"no recorded runs under {runs_dir}: run benchmarks/faults/bench.py without --score-only")
    notes = run_detectors(runs, peers)
    dets = [d for d in DETECTORS if any(d in r.alarms for r in runs)]
    seeds = sorted({r.meta.seed for r in runs})
    faulty = [r for r in runs if r.meta.cause is not None]
    causes_seen = sorted({r.meta.cause for r in faulty if r.meta.cause})
    now = time.perf_counter()
    train_min = sum(r.meta.train_s for r in runs) / 60
    lines = ["# Fault-injection benchmark on real TRL training", "",
             f"Command: `{command}` -- this run {(now - (started or t_score)) / 60:.1f} min, of which scoring "
             f"{(now - t_score) / 60:.1f} min; recording the {len(runs)} runs took {train_min:.0f} min of training "
             "(one process, one thread) on a 2-core CPU shared with other jobs: timings are noisy.", "",
             f"{len(faulty)} faulty runs ({len(causes_seen)} causes x seeds {', '.join(map(str, seeds))}) and "
             f"{len(runs) - len(faulty)} healthy twins (same seed, no fault), real TRL trainers on the tiny local "
             "model; the fault is switched on at the onset step by a TrainerCallback. Damage is the step a user would "
             "see harm without any monitor, defined per cause in `causes.py` before any detector ran.", "",
             "## All detectors, one run", "", *table(runs, dets), "",
             "Seed rules fire on almost every row of every run (twins included), so their first expected warning "
             "after onset is the onset row itself: their recall and lead are those of a detector that is always on.",
             "",
             "Recall: a warn/stop from one of the cause's expected gauges at or after onset. Warned before damage: "
             "that warning strictly before the damage step, over the faulty runs whose damage showed. Lead: damage "
             "step minus warning step. Twins warned: any warn/stop on a healthy twin.", "",
             "## Per cause (recalled/runs, warned before damage/damage seen, median delay in steps)", "",
             *cause_table(runs, dets), "", "## Where ours missed or was late, and what it said instead", "",
             *misses(runs), "", "## Notes", "", *[f"- {n}" for n in notes], "",
             "## The causes", "", "| cause | base (twin) | mechanism switched on at onset | damage rule | "
             "expected gauges |", "|---|---|---|---|---|",
             *[f"| {n} | {c.base} | {c.what} | {c.damage_rule} | {', '.join(c.expected)} |" for n, c in CAUSES.items()],
             "", "Bases (`causes.BASES`): " + "; ".join(
                 f"{b}: TRL {v.kind}, {v.steps} steps, "
                 + ", ".join(f"{k}={x}" for k, x in v.overrides.items() if k != "reward_weights")
                 for b, v in BASES.items()) + ". GRPO/RLOO train on the proxy reward with the gold reward logged "
             "beside it at weight 0; every run starts from the same 120-step pretrained tiny policy for its seed.", "",
             "Pictures: `faults_overview.svg` (every cause on one picture) and `cause_<name>.svg` beside this file "
             "(onset, damage, when each tool warned, per seed).", ""]
    results.write_text("\n".join(lines), encoding="utf-8")
    for c in causes_seen:
        (pictures / f"cause_{c}.svg").write_text(cause_svg(runs, c, dets), encoding="utf-8")
    (pictures / "faults_overview.svg").write_text(overview_svg(runs, dets), encoding="utf-8")
    print("\n".join(lines))
    return runs
