"""The GLR anchor on the synthetic corpus: a detector that knows the pre-change model only (issue #38).

The statistic the fault benchmark's anchor uses too (``benchmarks/faults/glr.py`` calls this module): for every
metric a run logs that some gauge reads (``anchors.metric_gauge``), the pre-change model is the median and robust
spread of its first ``WARMUP`` logged values; each later value is standardised against it, and the generalised
likelihood ratio for a mean shift of unknown size that began within the last ``WINDOW`` rows,
``max_m (sum of the last m z)^2 / (2 m)``, is the statistic. It knows nothing of what a pathology does, when, or how
big; a non-finite value is an alarm at once.

Here it is computed over arrays and, like the oracle, kept threshold-free: a run's trace is each metric's largest
statistic before onset (any gauge's alarm there is an early fire) and the steps at which each expected gauge's
metric's running maximum rose after it. A metric's scale differs by orders of magnitude between families and
metrics (a healthy reward that climbs is a "shift" from its first ten values), so ``thresholds`` sets one per
(family, metric), the same quantile of the healthy runs' largest values for each, the quantile chosen so that the
anchor warns on the healthy runs as often as the product does; ``bench.py`` reads its recall and delay there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from anchors import IGNORED, metric_gauge

WARMUP = 10
WINDOW = 30
SKIP = IGNORED | {"total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"}


def metric_series(rows: Sequence[Mapping[str, object]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    cols: dict[str, tuple[list[int], list[float]]] = {}
    for r in rows:
        step = r.get("step")
        if not isinstance(step, (int, float)) or "train_runtime" in r:
            continue
        for k, v in r.items():
            if k in SKIP or k.startswith("eval_") and k != "eval_loss" or not isinstance(v, (int, float)) \
                    or isinstance(v, bool) or metric_gauge(k) == "other":
                continue
            s = cols.setdefault(k, ([], []))
            s[0].append(int(step))
            s[1].append(float(v))
    return {k: (np.asarray(s, dtype=np.int64), np.asarray(v, dtype=float)) for k, (s, v) in cols.items()}


def glr_statistic(x: np.ndarray) -> np.ndarray | None:
    """The GLR statistic at every value after the warm-up (inf at a non-finite value), or None when the warm-up
    gives no noise model (too few finite values, or a constant)."""
    if len(x) <= WARMUP + 1:
        return None
    pre = x[:WARMUP][np.isfinite(x[:WARMUP])]
    if len(pre) < WARMUP // 2:
        return None
    mu = float(np.median(pre))
    sd = max(1.4826 * float(np.median(np.abs(pre - mu))), 0.5 * float(np.std(pre)))
    if not sd > 1e-9 * max(abs(mu), 1.0):
        return None
    post = x[WARMUP:]
    finite = np.isfinite(post)
    z = (post[finite] - mu) / sd  # the finite values in order: a non-finite one is skipped by the windows
    n = len(z)
    stat_finite = np.empty(n)
    if n:
        c = np.concatenate(([0.0], np.cumsum(z)))
        best = np.zeros(n)
        for m in range(1, WINDOW + 1):  # windows of the last m values, m <= values so far
            idx = np.arange(m - 1, n)
            s = c[idx + 1] - c[idx + 1 - m]
            np.maximum.at(best, idx, s * s / (2.0 * m))
        stat_finite = best
    out = np.full(len(post), math.inf)
    out[finite] = stat_finite
    return out


@dataclass
class GlrTrace:
    """What the threshold-free anchor saw on one run, per metric: its largest statistic before onset (the whole run
    when healthy), and, for the metrics of the gauges the pathology should move, the steps after onset at which that
    metric's running maximum rose."""

    family: str
    before: dict[str, float]
    rises: dict[str, list[tuple[int, float]]]

    def first_over(self, h: Mapping[str, float]) -> int | None:
        """The first step after onset at which an expected metric's statistic passed its threshold."""
        hits = [next((s for s, g in r if g > h.get(k, math.inf)), None) for k, r in self.rises.items()]
        found = [s for s in hits if s is not None]
        return min(found) if found else None

    def early(self, h: Mapping[str, float]) -> bool:
        return any(v > h.get(k, math.inf) for k, v in self.before.items())


def trace(rows: Sequence[Mapping[str, object]], family: str, onset_step: int | None,
          expected: Sequence[str] = ()) -> GlrTrace | None:
    """The GLR anchor's threshold-free trace of one run (None when no metric has a pre-change model)."""
    before: dict[str, float] = {}
    rises: dict[str, list[tuple[int, float]]] = {}
    for key, (steps, x) in metric_series(rows).items():
        stat = glr_statistic(x)
        if stat is None:
            continue
        st = steps[WARMUP:]
        pre = stat if onset_step is None else stat[st < onset_step]
        before[key] = float(pre.max()) if len(pre) else 0.0
        if onset_step is not None and metric_gauge(key) in expected:
            keep = st >= onset_step
            best, out = -math.inf, []
            for s, g in zip(st[keep].tolist(), stat[keep].tolist(), strict=True):
                if g > best:
                    best = g
                    out.append((int(s), float(g)))
            rises[key] = out
    return GlrTrace(family, before, rises) if before else None


def thresholds(healthy: Sequence[GlrTrace], rate: float) -> dict[tuple[str, str], float]:
    """One threshold per (family, metric): the same upper quantile of that metric's largest statistic on the family's
    healthy runs, the quantile chosen (by bisection) so that the anchor warns on ``rate`` of the healthy runs."""
    per: dict[tuple[str, str], list[float]] = {}
    for t in healthy:
        for k, v in t.before.items():
            per.setdefault((t.family, k), []).append(v)
    sorted_per = {k: np.sort(np.asarray(v)) for k, v in per.items()}

    def at(q: float) -> dict[tuple[str, str], float]:
        return {k: float(np.quantile(v, q)) * (1 + 1e-9) for k, v in sorted_per.items()}

    def warned(h: Mapping[tuple[str, str], float]) -> float:
        return sum(any(v > h[(t.family, k)] for k, v in t.before.items()) for t in healthy) / max(1, len(healthy))

    lo, hi = 0.0, 1.0  # warned(at(1.0)) == 0: the largest value of every metric is the threshold
    for _ in range(40):
        mid = (lo + hi) / 2
        if warned(at(mid)) > rate:
            lo = mid
        else:
            hi = mid
    return at(hi)


def for_family(h: Mapping[tuple[str, str], float], family: str) -> dict[str, float]:
    return {k: v for (f, k), v in h.items() if f == family}
