"""NaN/Inf in a gauge's metric, shared by the loss and gradient gauges: one bad value is a skipped fp16 step,
repeats are a warning, a run of them a stop."""

from __future__ import annotations

from .gauge import Gauge, finite

NAN = float("nan")
LOWER_LR = "Lower the learning rate (or tighten max_grad_norm) and resume from the last good checkpoint."
"""The fix of a persistent NaN/Inf (loss or gradient norm)."""


class NonFiniteGauge(Gauge):
    """A gauge that tracks NaN/Inf per metric (``NonFiniteTracker``): the row of the last one, per metric prefix."""

    nonfinite_rows: dict[str, int]


class NonFiniteTracker:
    """Shared NaN/Inf logic: one isolated bad value is ``info`` (fp16/bf16 dynamic loss scaling skips a step and
    logs its NaN/Inf norm, then carries on), a second within ``nonfinite_window`` logged rows a warning, a run of
    them a stop."""

    @staticmethod
    def check(gauge: NonFiniteGauge, key: str, value: float, prefix: str) -> bool:
        bad = not finite(value)
        last = gauge.nonfinite_rows.get(prefix) if bad else None
        repeated = last is not None and gauge.rows_seen - last <= gauge.p["nonfinite_window"]
        if bad:
            gauge.nonfinite_rows[prefix] = gauge.rows_seen
        # message closures only for a rule that holds this row (a quiet rule never reads one)
        gauge.check(
            f"{prefix}-nonfinite", bad, "info", key, value,
            (lambda: f"{key} is {value} at step {gauge.step}. One bad step is usually a skipped fp16 "
             "loss-scale step; if it repeats, the run has diverged.") if bad else "",
        )
        gauge.check(
            f"{prefix}-nonfinite-repeated", repeated, "warn", key, value,
            (lambda: f"{key} is {value} at step {gauge.step}, again within {gauge.p['nonfinite_window']} logged "
             "steps of the last one: more than a skipped loss-scale step. Watch for divergence; lower the LR or "
             "enable gradient clipping.") if repeated else "", clear=gauge.p["nonfinite_window"],
        )
        gauge.check(
            f"{prefix}-nonfinite-persistent", bad, "stop", key, value,
            lambda: f"{key} has been NaN/Inf for {gauge.p['nonfinite_for']} logged steps: the weights are "
            "probably corrupted. Stop, lower the learning rate or enable gradient clipping, and resume "
            "from the last good checkpoint.",
            for_=gauge.p["nonfinite_for"],
        )
        return bad
