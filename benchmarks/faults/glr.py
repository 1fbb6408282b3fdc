"""The GLR anchor: a detector that knows the pre-change model only.

For every gauge metric a run logs (each metric credited to its gauge by ``anchors.metric_gauge``), the pre-change
model is the median and robust spread of the metric's first ``WARMUP`` logged values -- no knowledge of what a fault
does, when, or how big. Each later value is standardised against it, and the generalised likelihood ratio for a
shift of the mean of unknown size and unknown start within the last ``WINDOW`` rows,
``max_k (sum_{k<i<=n} z_i)^2 / (2 (n - k))`` (Lorden / Siegmund-Venkatraman), is the statistic; it is computed by
``benchmarks/detection/glr_anchor.py``, which the synthetic benchmark uses too. A non-finite value is off any
Gaussian model: it counts as an alarm at once. Each (trainer, metric) gets its threshold from the healthy twins
(``calibrate_per_metric``): just above the largest statistic any twin reaches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from anchors import metric_gauge
from glr_anchor import WARMUP, glr_statistic, metric_series


def glr_paths(rows: Sequence[Mapping[str, object]]) -> dict[str, tuple[list[int], list[float]]]:
    """Per metric: the steps after warm-up and the GLR statistic at each (inf where the value is non-finite), as
    ``benchmarks/detection/glr_anchor.py`` computes it for the synthetic corpus."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for key, (steps, x) in metric_series(rows).items():
        stat = glr_statistic(x)
        if stat is not None:
            out[key] = (steps[WARMUP:].tolist(), stat.tolist())
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
