"""Sanity of values: a logged number outside its mathematical range is a logging bug, not a reading.

An entropy cannot be negative, a clipped share cannot pass 1, a probability ratio cannot be 0 or less. A value
like that says the metric is logged with the wrong sign, under another definition (a sum where a mean is meant, a
log-probability where an entropy is), or in other units (a percentage where a share is) -- and every rule that
reads it judges a wrong number, so "ok" would be silently wrong. Each gauge checks the keys it reads
(``Gauge.update``), once per key: the finding ``value-out-of-range`` (warn) names the key, the value, the range
and the likely bug.

Deliberately not checked: the KL estimate. GRPO's per-token k3 estimate is never negative, but RLOO logs a
sequence-level k1 estimate under the same ``kl`` key (the two share the ``grpo`` family here), and that one is
negative on about half the rows of a healthy run; ``kl-negative`` judges its average instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .rule import ANY_GAUGE, Example, Rule
from .streams import ppo

RULE = "value-out-of-range"
"""The finding's rule id."""

TOLERANCE = 1e-6
"""Float noise allowed past a bound (a share of 1.0000001 is rounding, not a bug)."""


@dataclass(frozen=True)
class ValueRange:
    """Where a key's values must lie, which gauge reads it, and what a value outside says."""

    gauge: str
    low: float
    high: float = math.inf
    #: The low bound itself is outside the range (a probability ratio of exactly 0 is impossible).
    low_open: bool = False
    what: str = ""
    bug: str = ""

    def bounds(self) -> tuple[float, float, bool]:
        """(lowest, highest, low bound open) with float noise allowed past a closed bound: what a gauge compares."""
        lo = self.low if self.low_open else self.low - TOLERANCE
        hi = self.high + TOLERANCE * max(1.0, abs(self.high)) if self.high < math.inf else math.inf
        return lo, hi, self.low_open

    def holds(self, x: float) -> bool:
        lo, hi, open_low = self.bounds()
        return not (x < lo or x > hi or (open_low and x <= lo))

    def text(self) -> str:
        lo = "(" if self.low_open else "["
        hi = "inf)" if self.high == math.inf else f"{self.high:g}]"
        return f"{lo}{self.low:g}, {hi}"


_ENTROPY = ("an entropy", "a sign or definition bug: the value is negated, or it is a log-probability (or a sum of "
            "them) logged under the entropy's name")
_SHARE = ("a share", "a units or definition bug: a percentage (x100) or a count logged where a share of 0-1 is "
          "meant")
_NONNEG = ("a size", "a sign bug, or a difference logged where the quantity itself is meant")

RANGES: dict[str, ValueRange] = {
    "entropy": ValueRange("entropy", 0.0, what=_ENTROPY[0], bug=_ENTROPY[1]),
    "objective/entropy": ValueRange("entropy", 0.0, what=_ENTROPY[0], bug=_ENTROPY[1]),
    "policy/entropy_avg": ValueRange("entropy", 0.0, what=_ENTROPY[0], bug=_ENTROPY[1]),
    "policy/clipfrac_avg": ValueRange("policy_ratio", 0.0, 1.0, what="a clipped share", bug=_SHARE[1]),
    "clip_ratio/region_mean": ValueRange("policy_ratio", 0.0, 1.0, what="a clipped share", bug=_SHARE[1]),
    "clip_ratio/low_mean": ValueRange("policy_ratio", 0.0, 1.0, what="a clipped share", bug=_SHARE[1]),
    "clip_ratio/high_mean": ValueRange("policy_ratio", 0.0, 1.0, what="a clipped share", bug=_SHARE[1]),
    "val/clipfrac_avg": ValueRange("policy_ratio", 0.0, 1.0, what="a clipped share", bug=_SHARE[1]),
    "val/ratio": ValueRange("policy_ratio", 0.0, low_open=True, what="a probability ratio",
                            bug="a definition bug: a log-ratio or a difference of probabilities logged where the "
                            "ratio pi_new / pi_old is meant"),
    "val/ratio_var": ValueRange("policy_ratio", 0.0, what="a variance", bug=_NONNEG[1]),
    "loss/value_avg": ValueRange("policy_ratio", 0.0, what="a squared-error loss", bug=_NONNEG[1]),
    "frac_reward_zero_std": ValueRange("reward_signal", 0.0, 1.0, what="a share of groups", bug=_SHARE[1]),
    "reward_std": ValueRange("reward_signal", 0.0, what="a standard deviation",
                             bug="a sign or definition bug: a variance's square root cannot be negative"),
    "completions/clipped_ratio": ValueRange("length", 0.0, 1.0, what="a share of completions", bug=_SHARE[1]),
    "completions/mean_length": ValueRange("length", 0.0, what="a length in tokens", bug=_NONNEG[1]),
    "completions/min_length": ValueRange("length", 0.0, what="a length in tokens", bug=_NONNEG[1]),
    "completions/max_length": ValueRange("length", 0.0, what="a length in tokens", bug=_NONNEG[1]),
    "completions/mean_terminated_length": ValueRange("length", 0.0, what="a length in tokens", bug=_NONNEG[1]),
    "val/num_eos_tokens": ValueRange("length", 0.0, what="a count", bug=_NONNEG[1]),
    "rewards/accuracies": ValueRange("reward", 0.0, 1.0, what="an accuracy", bug=_SHARE[1]),
    "accuracy": ValueRange("reward", 0.0, 1.0, what="an accuracy", bug=_SHARE[1]),
    "grad_norm": ValueRange("gradients", 0.0, what="a norm", bug=_NONNEG[1]),
    "gradients/sparsity": ValueRange("gradients", 0.0, 1.0, what="a share of entries", bug=_SHARE[1]),
    "gradients/nonfinite": ValueRange("gradients", 0.0, what="a count", bug=_NONNEG[1]),
    "learning_rate": ValueRange("learning_rate", 0.0, what="a learning rate", bug=_NONNEG[1]),
    "efficiency/mem_frac": ValueRange("efficiency", 0.0, 1.0, what="a share of device memory", bug=_SHARE[1]),
    "num_tokens": ValueRange("efficiency", 0.0, what="a count", bug=_NONNEG[1]),
    "step_time": ValueRange("efficiency", 0.0, what="a duration", bug=_NONNEG[1]),
    "attention_entropy/mean": ValueRange("attention_entropy", 0.0, what=_ENTROPY[0], bug=_ENTROPY[1]),
    "samples/repetition_rate": ValueRange("samples", 0.0, 1.0, what="a share of n-grams", bug=_SHARE[1]),
    "rollouts/repetitive_frac": ValueRange("samples", 0.0, 1.0, what="a share of completions", bug=_SHARE[1]),
    "rollouts/near_identical_group_frac": ValueRange("samples", 0.0, 1.0, what="a share of groups", bug=_SHARE[1]),
    "rollouts/empty_frac": ValueRange("samples", 0.0, 1.0, what="a share of completions", bug=_SHARE[1]),
}
"""Canonical key -> its range and the gauge that checks it (the gauge must read rows that carry the key)."""


def ranges_for(gauge_id: str) -> tuple[tuple[str, ValueRange], ...]:
    """The keys ``gauge_id`` checks, with their ranges."""
    return tuple((k, r) for k, r in RANGES.items() if r.gauge == gauge_id)


def message(key: str, value: float, rng: ValueRange) -> str:
    """What the finding says: the key, the value, the range, and the likely logging bug."""
    side = "below" if value < rng.low or (rng.low_open and value <= rng.low) else "above"
    return (f"{key} = {value:.6g} is {side} its possible range {rng.text()}: {rng.what} cannot be that, so the value "
            f"is logged wrongly -- likely {rng.bug}. Every rule reading {key} judges a wrong number until the "
            "logging is fixed (reported once per key).")


def _ranged_keys() -> str:
    """``[0, 1]: a, b; [0, inf): c`` -- the keys ``value-out-of-range`` checks, by range."""
    by_range: dict[str, list[str]] = {}
    for key, rng in RANGES.items():
        by_range.setdefault(rng.text(), []).append(key)
    return "; ".join(f"{text}: {', '.join(keys)}" for text, keys in by_range.items())


#: The range rule, which every gauge raises on the keys it reads (``Gauge.update``; ``core/catalog.py`` collects it).
RULES: tuple[Rule, ...] = (
    Rule(
        ANY_GAUGE, RULE, severities=("warn",),
        reads="the gauge reading each key with a mathematical range (core/sanity.py): " + _ranged_keys(),
        test="one value outside its range beyond float noise, reported once per key",
        means="a logging bug (sign, definition or units): every rule reading the key judges a wrong number",
        fix="fix the logging of the key named in the message",
        origin="an entropy cannot be negative, a share cannot pass 1",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, entropy=-106.0 if i >= 40 else None), ppo, 100, 40, 40, "objective/entropy"),
    ),
)
