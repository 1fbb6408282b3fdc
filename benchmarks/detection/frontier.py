"""What the delay target costs: the detectors' trade between speed and false alarms, on seen seeds.

    python benchmarks/detection/frontier.py                 # seeds 1000-1049 (seen), writes FRONTIER.md
    python benchmarks/detection/frontier.py --seeds 0-9 --shifts 0 1 --out -

Two families of operating points, on the same corpus runs as ``bench.py``:

* **ours, warn_sooner=k**: every warn rule fires ``k`` logged rows sooner than its hold (at least 1 row; stop rules
  keep theirs), for ``k`` in ``--shifts``: the product's own dial (``RLClusterCallback(warn_sooner=k)``,
  ``rlcluster analyze --warn-sooner k``). The crudest way to be faster: it shows what one row of hold buys in delay
  and what it costs in false alarms.
* **z-score held for h rows**: the benchmark's generic anchor (|z| > threshold against the previous 30 values of
  every raw metric) alarming only once that has held ``h`` rows, for the thresholds in ``--z`` and holds in
  ``--z-holds``: the generic detector held to a false-alarm budget, as a user would have to.

Median delay is taken over the runs a detector caught, so a detector that catches only abrupt changes has a
small one; *caught within a quarter* (runs caught at delay <= 0.25, over all trend + spread runs) compares
operating points fairly. The issue's targets (recall >= 0.95 with median delay <= 0.25) need at least 47.5 %.
Seen seeds only: the held-out seeds are for the verdict.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from anchors import zscore_findings

from wandb_rlcluster.core.cluster import WARN_SOONER_MAX

import bench
from bench import (
    HELD_OUT_SEEDS,
    TARGETS,
    aggregate,
    healthy_runs,
    make_specs,
    run_corpus,
    seed_range,
    target_runs,
)

HERE = Path(__file__).resolve().parent
FRONTIER = HERE / "FRONTIER.md"

def _z_detector(threshold: float, hold: int) -> Callable[[bench.SyntheticRun, str], list[bench.Alarm]]:
    def detect(run: bench.SyntheticRun, trainer: str) -> list[bench.Alarm]:
        return [(f.gauge, f.rule, f.severity, f.step) for f in zscore_findings(run.rows, threshold=threshold,
                                                                               hold=hold)]
    return detect


def _row(label: str, results: list[bench.Result], detector: str) -> list[str]:
    t = aggregate(target_runs(results), detector)
    h = aggregate(healthy_runs(results), detector)
    a = aggregate(results, detector)  # early fires over every pathological run, as bench.py counts them
    quarter = sum(d <= TARGETS["delay"] for d in t.delays) / t.n if t.n else float("nan")
    delay = f"{statistics.median(t.delays):.3f}" if t.delays else "–"
    return [label, f"{t.recall:.1%}", f"{h.healthy_any_rate:.1%}", delay, f"{quarter:.1%}", f"{a.early_rate:.1%}"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", default="1000-1049", help="a seen seed range (default 1000-1049)")
    ap.add_argument("--shifts", type=int, nargs="+", default=[0, 1, 2],
                    help=f"warn_sooner values: rows taken off every warn rule's hold (0 to {WARN_SOONER_MAX})")
    ap.add_argument("--z", type=float, nargs="+", default=[3.0, 4.0], help="z-score thresholds")
    ap.add_argument("--z-holds", type=int, nargs="+", default=[1, 2, 3, 5], help="z-score holds (rows)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(FRONTIER), help="Markdown output, or - for standard output only")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    seeds = seed_range(args.seeds)
    if any(s in HELD_OUT_SEEDS for s in seeds):
        ap.error("--seeds overlaps the held-out seeds: the frontier is read on seen seeds only")
    if any(not 0 <= k <= WARN_SOONER_MAX for k in args.shifts):
        ap.error(f"--shifts are rows taken off every warn hold, 0 to {WARN_SOONER_MAX}")
    t0 = time.perf_counter()
    specs = make_specs(seeds, "tuning")
    # forked workers inherit bench.WARN_SOONER and the detectors; spawned ones (Windows) would not: score in this
    # process there
    workers = args.workers if sys.platform != "win32" else 1
    z_names = [(f"z{th:g}h{h}", th, h) for th in args.z for h in args.z_holds]
    rows: list[list[str]] = []
    try:
        for name, th, h in z_names:
            bench.DETECTOR_FNS[name] = _z_detector(th, h)
        for i, k in enumerate(sorted(set(args.shifts))):
            bench.WARN_SOONER = k
            dets = ["core"] + ([n for n, _, _ in z_names] if i == 0 else [])
            print(f"warn_sooner={k}: {len(specs)} runs", file=sys.stderr)
            results = run_corpus(specs, workers=workers, progress=not args.no_progress, detectors=dets)
            rows.append(_row(f"ours, warn_sooner={k} (every warn hold {k} row{'s' if k != 1 else ''} shorter)" if k
                             else "ours (as shipped)", results, "core"))
            if i == 0:
                rows += [_row(f"z-score > {th:g}, held {h} row{'s' if h > 1 else ''}", results, n)
                         for n, th, h in z_names]
    finally:
        bench.WARN_SOONER = 0
        for name, _, _ in z_names:
            bench.DETECTOR_FNS.pop(name, None)
    head = ["operating point", "recall (trend + spread)", "healthy runs warned", "median delay",
            "caught within a quarter", "early fires (all pathologies)"]
    lines = ["## Detection frontier: speed against false alarms", "",
             f"Generated by `python benchmarks/detection/frontier.py --seeds {args.seeds}` (seen seeds, "
             f"{len(specs)} runs, {time.perf_counter() - t0:.0f} s on {workers} workers); do not edit by hand.",
             "", "*Caught within a quarter*: trend + spread runs caught at a delay of at most "
             f"{TARGETS['delay']} of the run after onset, over all of them. The issue's targets together "
             f"(recall {TARGETS['recall']:.0%}, median delay {TARGETS['delay']}) need "
             f"{TARGETS['recall'] / 2:.1%} at least, with at most {TARGETS['healthy_any']:.0%} of healthy runs "
             "warned.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    md = "\n".join(lines) + "\n"
    print(md)
    if args.out != "-":
        Path(args.out).write_text(md, encoding="utf-8")
        print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
