"""The GLR anchor: a detector that knows the pre-change model only.

For every gauge metric a run logs (each metric credited to its gauge by ``anchors.metric_gauge``), the pre-change
model is the mean and robust spread of the metric's first ``WARMUP`` logged values -- no knowledge of what a fault
does, when, or how big. Each later value is standardised against it, and the generalised likelihood ratio for a
shift of the mean of unknown size and unknown start within the last ``WINDOW`` rows,
``max_k (sum_{k<i<=n} z_i)^2 / (2 (n - k))`` (Lorden / Siegmund-Venkatraman), is compared with one threshold for
all metrics. A non-finite value is off any Gaussian model: it counts as an alarm at once. The threshold is set on
the healthy twins (``calibrate``) so that the anchor warns on at most ``RATE`` of them, as the issue asks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from anchors import IGNORED, metric_gauge

WARMUP = 10
WINDOW = 30
RATE = 0.05
SKIP = IGNORED | {"total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"}


def _series(rows: Iterable[Mapping[str, object]]) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = {}
    for r in rows:
        step = r.get("step")
        if not isinstance(step, (int, float)) or "train_runtime" in r:
            continue
        for k, v in r.items():
            if k in SKIP or k.startswith("eval_") and k != "eval_loss" or not isinstance(v, (int, float)) \
                    or isinstance(v, bool) or metric_gauge(k) == "other":
                continue
            s = out.setdefault(k, ([], []))
            s[0].append(int(step))
            s[1].append(float(v))
    return out


def glr_paths(rows: Sequence[Mapping[str, object]]) -> dict[str, tuple[list[int], list[float]]]:
    """Per metric: the steps after warm-up and the GLR statistic at each (inf where the value is non-finite)."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for key, (steps, vals) in _series(rows).items():
        x = np.asarray(vals, dtype=float)
        if len(x) <= WARMUP + 1:
            continue
        pre = x[:WARMUP][np.isfinite(x[:WARMUP])]
        if len(pre) < WARMUP // 2:
            continue
        mu = float(np.median(pre))
        sd = 1.4826 * float(np.median(np.abs(pre - mu)))
        sd = max(sd, float(np.std(pre)) * 0.5, 1e-3 * max(abs(mu), 1e-6), 1e-12)
        stats: list[float] = []
        z_hist: list[float] = []
        for v in x[WARMUP:]:
            if not math.isfinite(v):
                stats.append(math.inf)
                continue
            z_hist.append((v - mu) / sd)
            tail = np.asarray(z_hist[-WINDOW:])
            csum = np.cumsum(tail[::-1])  # sums over the last m rows, m = 1..len
            m = np.arange(1, len(tail) + 1)
            stats.append(float(np.max(csum * csum / (2.0 * m))))
        out[key] = (steps[WARMUP:], stats)
    return out


def run_max(rows: Sequence[Mapping[str, object]]) -> float:
    """The largest GLR statistic anywhere in a run (for calibration on healthy twins)."""
    best = 0.0
    for _, stats in glr_paths(rows).values():
        if stats:
            best = max(best, max(stats))
    return best


def calibrate(twin_maxima: Sequence[float], rate: float = RATE) -> float:
    """The threshold at which at most ``rate`` of the twins warn: strictly above all but that share of maxima."""
    vals = sorted(v for v in twin_maxima if math.isfinite(v))
    if not vals:
        return math.inf
    allowed = int(math.floor(rate * len(twin_maxima)))
    return vals[-allowed - 1] * (1 + 1e-9) if allowed < len(vals) else 0.0


def glr_findings(rows: Sequence[Mapping[str, object]], h: float) -> list[tuple[str, str, str, int]]:
    """(gauge, rule, severity, step) for the first crossing of ``h`` per metric."""
    out = []
    for key, (steps, stats) in glr_paths(rows).items():
        hit = next((s for s, g in zip(steps, stats, strict=True) if g > h), None)
        if hit is not None:
            out.append((metric_gauge(key), f"glr:{key}", "warn", hit))
    return sorted(out, key=lambda f: f[3])
