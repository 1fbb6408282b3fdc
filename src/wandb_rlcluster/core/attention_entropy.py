"""Gauge 4: attention entropy of a probe batch (live runs only)."""

from __future__ import annotations

from .gauge import Gauge, finite
from .keys import Row
from .rule import INSTRUMENTS, Example, Rule
from .stats import (
    Baseline,
    RollingWindow,
    robust_z,
)
from .streams import live, ramp


class AttentionEntropyGauge(Gauge):
    """Gauge 4 — attention entropy of a probe batch (live runs only)."""

    id = "attention_entropy"
    title = "Attention entropy"
    inputs = ("attention_entropy/mean",)
    outputs = ("mean", "head_std", "max_possible", "vs_start", "vs_uniform")
    live_only = True
    defaults = {"collapse_ratio": 0.3, "saturation": 0.95, "jump_z": 8.0}

    def setup(self) -> None:
        self.base = Baseline(3)
        self.win = RollingWindow(20)

    def observe(self, row: Row) -> None:
        v = row.values
        h = v["attention_entropy/mean"]
        if not finite(h):
            return
        d = self.derived
        d["mean"] = h
        if "attention_entropy/head_std" in v:
            d["head_std"] = v["attention_entropy/head_std"]
        hmax = v.get("attention_entropy/max_possible")
        self.base.push(h)
        if self.base.ready:
            rel = h / max(self.base.value, 1e-12)
            d["vs_start"] = rel
            self.check("attention-collapse", rel < self.p["collapse_ratio"], "warn", "attention_entropy/mean", h,
                       lambda: f"attention entropy fell to {rel:.2f}x its start: heads are collapsing onto "
                       "single tokens.", for_=2)
        if hmax and finite(hmax) and hmax > 0:
            d["max_possible"] = hmax  # log n: the uniform ceiling, plotted beside the mean
            sat = h / hmax
            d["vs_uniform"] = sat
            self.check("attention-uniform", sat > self.p["saturation"], "warn", "attention_entropy/mean", h,
                       lambda: f"attention entropy is {sat:.0%} of log(n): attention is spreading uniformly "
                       "and carries no information.", for_=2)
        if len(self.win) >= 5:
            z = robust_z(h, self.win)
            self.check("attention-jump", abs(z) > self.p["jump_z"], "info", "attention_entropy/mean", h,
                       lambda: f"attention entropy jumped ({z:+.1f} robust sigmas): a phase change.", clear=2)
        self.win.push(h)


#: The attention-entropy gauge's rules (live).
ATTENTION_ENTROPY_RULES: tuple[Rule, ...] = (
    Rule(
        "attention_entropy", "attention-collapse", severities=("warn",),
        reads="attention_entropy/mean (live probe) / its first 3 probes",
        test="ratio below a line, held 2 probes",
        params=("collapse_ratio",),
        means="heads are collapsing onto single tokens",
        fix="lower the learning rate; check for degenerate inputs",
        seed="collapse toward 0", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 * (1 - 0.9 * ramp(i, 40, 20))}),
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 * (1 - 0.2 * i / 100)}), 100, 40, 60,
            "attention_entropy/mean"),
    ),
    Rule(
        "attention_entropy", "attention-uniform", severities=("warn",),
        reads="attention_entropy/mean / log n (attention_entropy/max_possible)",
        test="share above a line, held 2 probes",
        params=("saturation",),
        means="attention spreads uniformly and carries nothing",
        fix="lower the learning rate; check the attention mask",
        seed="unbounded rise toward log n", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 2.3 * ramp(i, 40, 20),
                                              "attention_entropy/max_possible": 4.5}),
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0, "attention_entropy/max_possible": 4.5}),
            100, 40, 65, "attention_entropy/mean"),
    ),
    Rule(
        "attention_entropy", "attention-jump", severities=("info",),
        reads="attention_entropy/mean",
        test="robust z vs the last 20 probes (info)",
        params=("jump_z",),
        means="a sudden phase change in attention",
        fix="read samples around that step",
        seed="sudden phase change", seed_source=INSTRUMENTS,
        example=Example(
            "sft",
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 0.01 * g.normal() + (1.0 if i == 60 else 0)}),
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 0.01 * g.normal()}), 100, 60, 60,
            "attention_entropy/mean"),
    ),
)
