"""The frontier as a picture: healthy runs warned against median delay, the product's ``warn_sooner`` dial, the
anchors and the oracle (a CUSUM that knows the true change, swept over its threshold), on seen seeds.

    python benchmarks/detection/frontier_plot.py --seeds 1000-1002 --dials 0 1 2 3

Writes ``frontier.svg`` beside this file (a plain SVG, no plotting library needed) and its points as
``frontier.json``, and prints them; ``--redraw`` redraws the picture from ``frontier.json`` alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from oracle import threshold_for

import bench
from bench import (
    HELD_OUT_SEEDS,
    NEXT_ROUND_SEEDS,
    aggregate,
    healthy_runs,
    make_specs,
    run_corpus,
    seed_range,
    target_runs,
)

HERE = Path(__file__).resolve().parent
SVG = HERE / "frontier.svg"


def _point(results: list[bench.Result], det: str) -> tuple[float, float]:
    t = aggregate(target_runs(results), det)
    h = aggregate(healthy_runs(results), det)
    return h.healthy_any_rate, t.median_delay


def oracle_curve(results: list[bench.Result], rates: Sequence[float]) -> list[tuple[float, float]]:
    healthy = [r.oracle.max_before for r in healthy_runs(results) if r.oracle is not None]
    out = []
    for rate in rates:
        h = threshold_for(healthy, rate)
        ds = []
        for r in target_runs(results):
            if r.oracle is None or r.onset_step is None:
                continue
            first = r.oracle.first_over(h)
            if first is not None:
                ds.append(bench.delay(first, r.onset_step, r.spec.n_steps))
        ds.sort()
        if ds:
            out.append((rate, ds[len(ds) // 2] if len(ds) % 2 else 0.5 * (ds[len(ds) // 2 - 1] + ds[len(ds) // 2])))
    return out


def _ticks(top: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at most ``top``: steps of 1, 2 or 5 x 10^k (never a 101 % tick)."""
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [k * step for k in range(int(top / step + 1e-9) + 1)]


def svg(series: dict[str, list[tuple[float, float]]], title: str) -> str:
    """The frontier: the plot area holds only the points and the target lines; the legend sits below the axis
    label (so it covers no point); ticks are round numbers inside the axis (a share axis stops at 100 %)."""
    w, m_l, m_r, top, plot_h = 640, 64, 24, 40, 300
    legend_y = top + plot_h + 56
    hgt = legend_y + 20 * ((len(series) + 1) // 2) + 8
    xmax = min(1.0, max(0.05, max((x for pts in series.values() for x, _ in pts if x == x), default=1.0)) * 1.05)
    ymax = max(0.05, max((y for pts in series.values() for _, y in pts if y == y), default=1.0)) * 1.1

    def sx(x: float) -> float:
        return m_l + (w - m_l - m_r) * x / xmax

    def sy(y: float) -> float:
        return top + plot_h - plot_h * y / ymax

    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{hgt}" font-family="sans-serif" '
             'font-size="13">', f'<rect width="{w}" height="{hgt}" fill="white"/>',
             f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    for x in _ticks(xmax):
        parts.append(f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{top + plot_h}" stroke="#eee"/>')
        parts.append(f'<text x="{sx(x):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{100 * x:.0f} %</text>')
    for y in _ticks(ymax):
        parts.append(f'<line x1="{m_l}" y1="{sy(y):.1f}" x2="{w - m_r}" y2="{sy(y):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{m_l - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    parts += [f'<rect x="{m_l}" y="{top}" width="{w - m_l - m_r}" height="{plot_h}" fill="none" stroke="#666"/>',
              f'<text x="{(m_l + w - m_r) / 2}" y="{top + plot_h + 38}" text-anchor="middle">healthy runs with any '
              'warn/stop</text>',
              f'<text x="16" y="{top + plot_h / 2}" transform="rotate(-90 16 {top + plot_h / 2})" '
              'text-anchor="middle">median delay (share of the run after onset)</text>']
    # the targets: 3 % healthy warned, 0.25 delay
    parts.append(f'<line x1="{sx(0.03):.1f}" y1="{top}" x2="{sx(0.03):.1f}" y2="{top + plot_h}" stroke="#999" '
                 'stroke-dasharray="4"/>')
    parts.append(f'<line x1="{m_l}" y1="{sy(0.25):.1f}" x2="{w - m_r}" y2="{sy(0.25):.1f}" stroke="#999" '
                 'stroke-dasharray="4"/>')
    for k, (name, pts) in enumerate(series.items()):
        c = colors[k % len(colors)]
        pts = [(x, y) for x, y in pts if x == x and y == y]
        if len(pts) > 1:
            parts.append('<polyline fill="none" stroke="{}" points="{}"/>'.format(
                c, " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)))
        for x, y in pts:
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{c}"/>')
        lx, ly = m_l + (k % 2) * 280, legend_y + 20 * (k // 2)
        parts.append(f'<rect x="{lx}" y="{ly - 10}" width="10" height="10" fill="{c}"/>')
        parts.append(f'<text x="{lx + 15}" y="{ly}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", default="1000-1002")
    ap.add_argument("--dials", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(SVG))
    ap.add_argument("--redraw", action="store_true", help="redraw --out from the points its last run saved beside it "
                    "(frontier.json): seconds, no corpus run")
    args = ap.parse_args(argv)
    if args.redraw:
        data = json.loads(Path(args.out).with_suffix(".json").read_text())
        Path(args.out).write_text(svg({k: [tuple(p) for p in v] for k, v in data["series"].items()}, data["title"]))
        return 0
    seeds = seed_range(args.seeds)
    if any(s in HELD_OUT_SEEDS or s in NEXT_ROUND_SEEDS for s in seeds):
        ap.error("seen seeds only")
    specs = make_specs(seeds, "tuning", noise_models=True)
    series: dict[str, list[tuple[float, float]]] = {"ours, warn_sooner 0..3": []}
    base: list[bench.Result] = []
    for k in args.dials:
        bench.WARN_SOONER = k
        bench.ORACLE = not base
        res = run_corpus(specs, workers=args.workers, progress=False,
                         detectors=("core", "seed", "zscore") if not base else ("core",))
        if not base:
            base = res
        series["ours, warn_sooner 0..3"].append(_point(res, "core"))
        rate, med = _point(res, "core")
        print(f"warn_sooner={k}: healthy warned {rate:.3f}, median delay {med:.3f}", file=sys.stderr)
    bench.WARN_SOONER = 0
    series["seed rules"] = [_point(base, "seed")]
    series["z-score |z|>3"] = [_point(base, "zscore")]
    series["oracle (knows the change)"] = oracle_curve(base, [0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5])
    for name, pts in series.items():
        print(name, [(round(x, 3), round(y, 3)) for x, y in pts if not (math.isnan(x) or math.isnan(y))])
    title = f"Detection frontier, seen seeds {args.seeds}"
    Path(args.out).write_text(svg(series, title))
    # the points themselves, so the picture can be redrawn (--redraw, make docs-build) without rerunning the corpus
    Path(args.out).with_suffix(".json").write_text(json.dumps({"title": title, "series": series}, indent=1) + "\n")
    print(f"written to {args.out} and {Path(args.out).with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
