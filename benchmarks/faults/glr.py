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
        sd = max(1.4826 * float(np.median(np.abs(pre - mu))), 0.5 * float(np.std(pre)))
        if not sd > 1e-9 * max(abs(mu), 1.0):
            continue  # constant through the warm-up: no noise model to test a shift against
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


def calibrate_per_metric(twins: Sequence[tuple[str, Sequence[Mapping[str, object]]]]) -> dict[tuple[str, str], float]:
    """(trainer base, metric) -> threshold: just above the largest statistic the healthy twins of that base reach."""
    out: dict[tuple[str, str], float] = {}
    for base, rows in twins:
        for key, (_, stats) in glr_paths(rows).items():
            finite = [v for v in stats if math.isfinite(v)]
            if finite:
                out[(base, key)] = max(out.get((base, key), 0.0), max(finite) * (1 + 1e-9))
    return out


def glr_findings(rows: Sequence[Mapping[str, object]], base: str, h: Mapping[tuple[str, str], float]
                 ) -> list[tuple[str, str, str, int]]:
    """(gauge, rule, severity, step) for the first crossing of its threshold per metric (a metric no twin logged
    has none: only a non-finite value alarms on it)."""
    out = []
    for key, (steps, stats) in glr_paths(rows).items():
        limit = h.get((base, key), math.inf)
        hit = next((s for s, g in zip(steps, stats, strict=True) if g > limit), None)
        if hit is not None:
            out.append((metric_gauge(key), f"glr:{key}", "warn", hit))
    return sorted(out, key=lambda f: f[3])
