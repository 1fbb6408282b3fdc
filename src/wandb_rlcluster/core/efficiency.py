"""Gauge 7: compute efficiency, throughput trend and memory trend."""

from __future__ import annotations

import math

from .gauge import Gauge, finite
from .keys import Row
from .rule import INSTRUMENTS, Example, Rule
from .stats import (
    Baseline,
    RollingWindow,
)
from .streams import after, ramp, sft

_LIVE_EFFICIENCY_KEYS = tuple((k, k.split("/", 1)[1]) for k in (
    "efficiency/tokens_per_s", "efficiency/steps_per_s", "efficiency/mem_frac", "efficiency/util",
    "efficiency/rss_gb"))


class EfficiencyGauge(Gauge):
    """Gauge 7 — compute efficiency: throughput trend, memory trend."""

    id = "efficiency"
    title = "Compute efficiency"
    inputs = ("step_time", "num_tokens", "train_samples_per_second", "efficiency/tokens_per_s",
              "efficiency/mem_frac", "efficiency/steps_per_s")
    outputs = ("samples_per_s", "tokens_per_s", "steps_per_s", "mem_frac", "util", "rss_gb", "step_time", "slowdown")
    defaults = {"slowdown": 1.5, "slowdown_for": 10, "min_step_s": 0.5, "mem_high": 0.88, "util_drop": 0.7}

    def setup(self) -> None:
        self.base = Baseline(10)
        self.win = RollingWindow(10)
        self.prev_tokens = math.nan
        self.prev_step = 0
        self.util_base = Baseline(5)
        self.skip = 3  # first steps include compilation and warm-up

    def observe(self, row: Row) -> None:
        v = row.values
        d = self.derived
        if row.kind == "summary":
            sps = v.get("train_samples_per_second")
            if sps is not None and finite(sps):
                d["samples_per_s"] = sps
            return
        st = v.get("step_time")
        tok = v.get("num_tokens")
        if tok is not None and finite(tok):
            if self.prev_tokens == self.prev_tokens and st and finite(st) and st > 0 and row.step > self.prev_step:
                d["tokens_per_s"] = (tok - self.prev_tokens) / ((row.step - self.prev_step) * st)
            self.prev_tokens, self.prev_step = tok, row.step
        for k, short in _LIVE_EFFICIENCY_KEYS:
            x = v.get(k)
            if x is not None and finite(x):
                d[short] = x
        sec = st if (st is not None and finite(st) and st > 0) else None
        if sec is None and d.get("steps_per_s"):
            sec = 1.0 / d["steps_per_s"]
        if sec is not None:
            if self.skip > 0:
                self.skip -= 1
            else:
                d["step_time"] = sec
                self.base.push(sec)
                self.win.push(sec)
                if self.base.ready and self.win.full:
                    slow = self.win.median() / max(self.base.value, 1e-12)
                    d["slowdown"] = slow
                    # a step of a fraction of a second is timed by the host's load (other jobs on a shared CPU), not by
                    # the run: its wall clock says nothing about the training's own throughput
                    timed = self.base.value >= self.p["min_step_s"]
                    self.check("throughput-declining", timed and slow > self.p["slowdown"], "warn", "step_time", sec,
                               lambda: f"steps now take {slow:.1f}x as long as at the start: throughput is "
                               "declining (memory fragmentation, growing sequence lengths, a straggler).",
                               for_=self.p["slowdown_for"])
        mem, util = d.get("mem_frac"), d.get("util")
        if mem is not None and "efficiency/mem_frac" in v:
            if util is not None:
                self.util_base.push(util)
            dropping = util is not None and self.util_base.ready and util < self.p["util_drop"] * self.util_base.value
            self.check("memory-pressure", mem > self.p["mem_high"] and dropping, "warn", "efficiency/mem_frac", mem,
                       lambda: f"device memory at {mem:.0%} while utilisation falls: the three-alarm fire "
                       "(allocator thrashing or swapping). " + self.fix("memory-pressure", sentence=True), for_=3)


#: The efficiency gauge's rules.
EFFICIENCY_RULES: tuple[Rule, ...] = (
    Rule(
        "efficiency", "throughput-declining", severities=("warn",),
        reads="step_time: median of the last 10 / its first 10 (after 3 warm-up rows)",
        test="ratio above a line, held `slowdown_for` rows; only where the first steps took `min_step_s` or more (a "
             "sub-second step is timed by the host's load, not the run)",
        params=("slowdown", "slowdown_for", "min_step_s"),
        means="steps take much longer than at the start",
        fix="look for memory fragmentation, growing lengths, a straggler",
        seed="throughput declining", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "step_time": 1.0 * (1 + 0.05 * g.normal()) * (1 + 1.5 * ramp(i, 60, 20))},
            lambda i, g: {**sft(i, g), "step_time": 1.0 * (1 + 0.05 * g.normal())}, 150, 60, 85, "step_time"),
    ),
    Rule(
        "efficiency", "memory-pressure", severities=("warn",),
        reads="efficiency/mem_frac and efficiency/util (live)",
        test="memory above a line while utilisation fell below `util_drop` x its start, held 3 rows",
        params=("mem_high", "util_drop"),
        means="the three-alarm fire: allocator thrashing or swapping",
        fix="reduce batch size or sequence length",
        seed="memory in the top 10–15 % while utilisation falls", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "efficiency/mem_frac": 0.7 + 0.25 * after(i, 60),
                                 "efficiency/util": 0.9 - 0.5 * after(i, 60)},
            lambda i, g: {**sft(i, g), "efficiency/mem_frac": 0.7, "efficiency/util": 0.9}, 100, 60, 62,
            "efficiency/mem_frac"),
    ),
)
