"""How big each recorded break was, in sigmas of its own run's noise, beside how many rows ours took to warn.

Issue 47 asks for a median delay of at most 2 rows on breaks of 5 sigma or more. A break's size is read on the
quantity its mechanism moves first (``PRIMARY``): the mean of the onset row and the two after it against the mean of
the 10 rows before onset, in units of those 10 rows' standard deviation. Delay: rows from onset to ours' first
warn/stop from one of the cause's expected gauges (``score.outcome``), as the benchmark scores it. Usage::

    python benchmarks/faults/break_sizes.py bench-out/faults-breaks/runs          # tuning seeds 0-2
    python benchmarks/faults/break_sizes.py bench-out/faults-breaks-fresh/runs    # the lead's fresh seeds, at the end
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (HERE, HERE.parents[1] / "benchmarks" / "detection"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from causes import BREAKS  # noqa: E402
from score import Run, load_runs, ours, outcome  # noqa: E402

PRIMARY = {
    "reward_rescaled": "reward",
    "reward_rubric_changed": "reward",
    "judge_noisy": "reward_std",
    "checkpoint_noise": "reward",
    "ref_swapped": "kl",
    "temperature_up": "entropy",
    "completion_cut": "completions/mean_length",
}
"""The logged quantity each break's mechanism moves first (what a person would look at to see it)."""
PRE, POST = 10, 3


def break_sigma(rows: Sequence[Mapping[str, Any]], key: str, onset: int) -> float | None:
    """|mean(onset .. onset+2) - mean(10 rows before onset)| / sd(those 10 rows); None when not measurable."""
    pts = [(int(r["step"]), float(r[key])) for r in rows if isinstance(r.get(key), (int, float)) and "step" in r]
    pre = [v for s, v in pts if onset - PRE <= s < onset and math.isfinite(v)]
    post = [v for s, v in pts if onset <= s < onset + POST and math.isfinite(v)]
    if len(pre) < 3 or not post:
        return None
    sd = statistics.stdev(pre)
    return abs(statistics.fmean(post) - statistics.fmean(pre)) / sd if sd > 0 else math.inf


def table(runs: list[Run]) -> list[str]:
    lines = ["| run | primary | break (sigma) | ours: first warning (rows after onset) | rule |",
             "|---|---|---:|---:|---|"]
    big: list[int | None] = []
    for run in runs:
        cause, onset = run.meta.cause, run.meta.onset
        if cause not in PRIMARY or onset is None:
            continue
        size = break_sigma(run.rows, PRIMARY[cause], onset)
        o = outcome(ours(run), onset, run.meta.expected)
        delay = None if o.hit is None else o.hit - onset
        if size is not None and size >= 5:
            big.append(delay)
        lines.append(f"| {run.meta.name} | `{PRIMARY[cause]}` | {'–' if size is None else f'{size:.1f}'} | "
                     f"{'missed' if delay is None else delay} | {o.rule or ''} |")
    caught = sorted(d for d in big if d is not None)
    median = statistics.median(caught) if caught else None
    lines += ["", f"Breaks of 5 sigma or more: {len(big)}; ours warned on {len(caught)} "
              f"({'median delay ' + str(median) + ' rows' if caught else 'none'}); missed {len(big) - len(caught)}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    runs_dir = Path(args[0]) if args else HERE.parents[1] / "bench-out" / "faults-breaks" / "runs"
    runs = [r for r in load_runs(runs_dir) if r.meta.cause in BREAKS]
    if not runs:
        print(f"no recorded break run in {runs_dir} (python benchmarks/faults/bench.py --causes breaks)")
        return 1
    print("\n".join(table(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
