"""The abrupt-break test (``core/breaks.py``) under the healthy noise grid: false alarms per model, and the delay on
graded abrupt changes against the clairvoyant CUSUM.

    PYTHONPATH=src python benchmarks/breaks/calibrate.py --seeds 100 --rows 2000      # false alarms
    PYTHONPATH=src python benchmarks/breaks/calibrate.py --delay --seeds 200          # delay per size

The noise processes are the calibration harness's (``benchmarks/calibration/noise.py``: iid, AR(1) 0.5/0.8/0.95,
2 % t(3) outliers, binomial group rates, band-passed, slow saturating drift, logged every 10 steps). A healthy
series is its unit noise laid on a slow healthy path (a rise of ``TREND`` sigmas over the run); a binomial one is a
success rate rising from 0.3 to 0.5 over prompts x completions. False alarms are counted per series row after the
test's warm-up; the budget is ``core.breaks.BREAK_ARL`` rows per false alarm per series.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from calibration.noise import BINOMIAL, EVERY, MODELS, drift, unit

from wandb_rlcluster.core.breaks import BREAK_ARL, DELAY, MIN_REF, BreakTest
from wandb_rlcluster.core.sequential import cusum_threshold

TREND = 2.0
WARM = DELAY + MIN_REF


def healthy(model: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """One healthy series of ``n`` logged rows under ``model`` (unit noise sigma)."""
    t = np.arange(n, dtype=float)
    if model in BINOMIAL:
        prompts, k = BINOMIAL[model]
        p = 0.3 + 0.2 * t / n
        return rng.binomial(prompts * k, p) / (prompts * k)
    every = EVERY.get(model, 1)
    x = unit(model, n * every, rng)
    if every > 1:
        x = x.reshape(n, every).mean(axis=1)
        x = x / x.std()
    if model == "drift":
        x = x + drift(n, 1.0, rng)
    return x + TREND * t / n


def false_alarms(model: str, seeds: int, n: int, arl: float) -> tuple[int, int, int]:
    """(false breaks, slow shifts, rows tested) over ``seeds`` healthy series (seeds 1000 + i): a false break is an
    abrupt one (what the watcher reports); a slow shift (decided over more than ``ABRUPT_ROWS`` rows) only rebases
    the test's reference and is counted apart."""
    fa = slow = rows = 0
    for s in range(seeds):
        rng = np.random.default_rng(1000 + s)
        x = healthy(model, n, rng)
        test = BreakTest(arl)
        for v in x.tolist():
            b = test.push(v)
            if b is not None:
                fa += b.abrupt
                slow += not b.abrupt
        rows += max(n - WARM, 0)
    return fa, slow, rows


def clairvoyant_delay(x: np.ndarray, onset: int, d: float, rho: float, arl: float) -> int:
    """Rows after ``onset`` to the alarm of the CUSUM that knows the noise (AR(1) ``rho``, unit marginal sd), the
    level before and the shift ``d`` with its direction, held to ``arl`` (one-sided: it knows the direction): Page's
    CUSUM on the true innovations, tuned to the shift they carry after the first row, d (1 - rho), unclipped."""
    su = math.sqrt(1.0 - rho * rho)
    k = abs(d) * (1.0 - rho) / su / 2.0
    h = cusum_threshold(arl, k)
    s = 0.0
    sign = 1.0 if d > 0 else -1.0
    for i in range(max(onset - 50, 1), len(x)):
        u = (x[i] - rho * x[i - 1]) / su * sign
        s = max(0.0, s + u - k)
        if s > h and i >= onset:
            return i - onset
        if s > h:
            s = 0.0  # an alarm before the change: start over (the clairvoyant's own false alarm)
    return -1


RHO = {"iid": 0.0, "ar1_0.5": 0.5, "ar1_0.8": 0.8, "ar1_0.95": 0.95, "t3": 0.0}


def delays(model: str, sizes: list[float], seeds: int, arl: float) -> list[tuple[float, float, float, float, float]]:
    """Per size (noise sigmas, both directions alternately): (size, recall within 100 rows, median delay, median
    clairvoyant delay, share decided within 3 rows)."""
    out = []
    n, onset = 400, 250
    for d in sizes:
        got, ours, oracle, fast = 0, [], [], 0
        for s in range(seeds):
            rng = np.random.default_rng(5000 + s)
            sign = 1.0 if s % 2 else -1.0
            x = healthy(model, n, rng) - TREND * np.arange(n) / n
            x[onset:] += sign * d
            test = BreakTest(arl)
            first = -1
            for i, v in enumerate(x.tolist()):
                b = test.push(v)
                if b is not None and b.abrupt and i >= onset and b.sign == sign:
                    first = i - onset
                    break
            if 0 <= first <= 100:
                got += 1
                ours.append(first)
                fast += first <= 2
            c = clairvoyant_delay(x, onset, sign * d, RHO.get(model, 0.0), arl)
            if c >= 0:
                oracle.append(c)
        out.append((d, got / seeds, float(np.median(ours)) if ours else math.nan,
                    float(np.median(oracle)) if oracle else math.nan, fast / seeds))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--arl", type=float, default=BREAK_ARL)
    ap.add_argument("--delay", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    models = a.models.split(",")
    if a.delay:
        print("| model | size (sigma) | recall <= 100 rows | median delay (rows after onset) | clairvoyant CUSUM | "
              "decided within 2 rows after onset |")
        print("|---|---|---|---|---|---|")
        for m in models:
            for d, rec, med, orc, fast in delays(m, [1, 2, 3, 5, 7, 10], a.seeds, a.arl):
                print(f"| {m} | {d:g} | {rec:.0%} | {med:g} | {orc:g} | {fast:.0%} |")
        return
    print(f"budget: {a.arl:,.0f} rows per false alarm per series; {a.seeds} seeds x {a.rows} rows per model")
    print("| model | false breaks | rows tested | rows per false break | slow shifts (rebased, unreported) | s |")
    print("|---|---|---|---|---|---|")
    for m in models:
        t0 = time.time()
        fa, slow, rows = false_alarms(m, a.seeds, a.rows, a.arl)
        per = f"{rows / fa:,.0f}" if fa else f"> {rows:,}"
        print(f"| {m} | {fa} | {rows:,} | {per} | {slow} | {time.time() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
