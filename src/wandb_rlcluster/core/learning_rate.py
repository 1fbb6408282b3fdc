"""Gauge 3: the learning-rate schedule, warm-up, peak, decay, LR stuck at zero, a peak never reached."""

from __future__ import annotations

import math

from .gauge import Gauge, finite
from .keys import Row
from .rule import INSTRUMENTS, Example, Rule
from .streams import sft


class LearningRateGauge(Gauge):
    """Gauge 3 — the schedule: warm-up, peak, decay, LR stuck at zero, and a peak never reached.

    "Peak never reached" is read from the schedule's shape: a learning rate that has only risen by
    half-way through the planned steps (or, offline, over the whole log) is still warming up, so
    the run trains at a fraction of the configured rate (warm-up longer than the run).
    """

    id = "learning_rate"
    title = "Learning-rate dynamics"
    inputs = ("learning_rate",)
    outputs = ("learning_rate", "peak", "phase", "frac_at_zero")
    defaults = {"zero_frac": 1e-3, "zero_for": 10, "end_frac": 0.9, "warmup_frac": 0.5, "rising_share": 0.8,
                "min_rows": 10}

    def setup(self) -> None:
        self.peak = 0.0
        self.peak_step = 0
        self.prev = math.nan
        self.zero_rows = 0
        self.first_lr = math.nan
        self.rises = 0
        self.falls = 0

    def observe(self, row: Row) -> None:
        lr = row.values["learning_rate"]
        if not finite(lr):
            return
        d = self.derived
        d["learning_rate"] = lr
        if lr > self.peak:
            self.peak, self.peak_step = lr, row.step
        d["peak"] = self.peak
        prev = self.prev
        if prev == prev:
            rising, falling = lr > prev * (1 + 1e-9), lr < prev * (1 - 1e-9)
            self.rises += rising
            self.falls += falling
            d["phase"] = 0.0 if rising else (2.0 if falling else 1.0)
        else:
            self.first_lr = lr
        self.prev = lr
        near_zero = self.peak > 0 and lr <= self.p["zero_frac"] * self.peak
        if near_zero:
            self.zero_rows += 1
        d["frac_at_zero"] = self.zero_rows / self.rows_seen
        early = self.max_steps <= 0 or row.step < self.p["end_frac"] * self.max_steps
        self.check(
            "lr-zero-early", near_zero and early and self.max_steps > 0, "warn", "learning_rate", lr,
            lambda: f"learning rate is ~0 ({lr:.2g}, peak {self.peak:.2g}) at step {row.step} of "
            f"{self.max_steps}: the schedule ended early and the remaining steps learn nothing.",
            for_=self.p["zero_for"],
        )
        if self.max_steps > 0:
            late = row.step >= self.p["warmup_frac"] * self.max_steps
            self.check("lr-peak-not-reached", late and self._still_warming(), "warn", "learning_rate", lr,
                       lambda: f"the learning rate is still rising at step {row.step} of {self.max_steps} "
                       f"({lr:.2g}, up from {self.first_lr:.2g}): warm-up is longer than most of the run, so the "
                       "configured peak is reached late or never. " + self.fix("lr-peak-not-reached", sentence=True))

    def _still_warming(self) -> bool:
        n = self.rises + self.falls
        return (self.rows_seen >= self.p["min_rows"] and self.falls == 0
                and self.rises >= self.p["rising_share"] * max(1, self.rows_seen - 1) and n > 0)

    def finish(self) -> None:
        frac = self.zero_rows / max(1, self.rows_seen)
        if self.max_steps <= 0 and self.rows_seen >= 20:
            self.check(
                "lr-zero-long", frac > 0.2, "warn", "learning_rate", self.derived.get("learning_rate"),
                f"learning rate was ~0 for {frac:.0%} of the logged steps: the schedule spent a large "
                "part of the run not learning.",
            )
        if self.max_steps <= 0:
            lr = self.derived.get("learning_rate", math.nan)
            self.check("lr-peak-not-reached", self._still_warming(), "warn", "learning_rate", lr,
                       f"the learning rate rose on every logged step from {self.first_lr:.2g} to {lr:.2g} and never "
                       "levelled off or decayed: warm-up outlasted the run, which never trained at its configured "
                       "peak. " + self.fix("lr-peak-not-reached", sentence=True))


#: The learning-rate gauge's rules.
LEARNING_RATE_RULES: tuple[Rule, ...] = (
    Rule(
        "learning_rate", "lr-zero-early", severities=("warn",),
        reads="learning_rate vs its peak, with the planned max_steps",
        test="LR <= `zero_frac` x peak before `end_frac` of the run, held `zero_for` rows",
        params=("zero_frac", "end_frac", "zero_for"),
        means="the schedule ended early; the remaining steps learn nothing",
        fix="fix the scheduler's total steps",
        seed="LR ≈ 0 well before the end", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, lr=0.0 if i >= 60 else None), sft, 200, 60, 69, "learning_rate",
            {"max_steps": 200}),
    ),
    Rule(
        "learning_rate", "lr-zero-long", severities=("warn",),
        reads="share of logged rows with LR ~0 (end of a log without max_steps)",
        test="share above 20 % at the end of the log",
        params=("zero_frac",),
        means="the schedule spent a large part of the run at ~0",
        fix="fix the scheduler's total steps",
        seed="LR ≈ 0 well before the end", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, lr=0.0 if i >= 100 else None), sft, 200, 100, 200, "learning_rate"),
    ),
    Rule(
        "learning_rate", "lr-peak-not-reached", severities=("warn",),
        reads="the schedule's shape: rises and falls of learning_rate",
        test="still only rising past `warmup_frac` of the planned steps (or at the end of the log)",
        params=("warmup_frac", "rising_share", "min_rows"),
        means="warm-up outlasts most of the run",
        fix="shorten warmup_steps / warmup_ratio",
        seed="peak never reached", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, lr=2e-5 * i / 1000), sft, 200, 100, 100, "learning_rate", {"max_steps": 200}),
    ),
)
