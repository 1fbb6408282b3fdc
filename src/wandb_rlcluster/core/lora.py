"""Gauge 6: LoRA adapters, ‖B·A‖, effective rank, change since start (live runs only)."""

from __future__ import annotations

from .gauge import Gauge, finite
from .keys import Row
from .rule import INSTRUMENTS, Example, Rule
from .stats import (
    Baseline,
)
from .streams import after, live, ramp


class LoraGauge(Gauge):
    """Gauge 6 — LoRA adapters: ‖B·A‖, effective rank, change since start (live runs only)."""

    id = "lora"
    title = "LoRA adapter diagnostics"
    inputs = ("lora/norm_mean",)
    outputs = ("norm_mean", "effective_rank", "rank", "rel_change", "norm_cv", "norm_vs_start")
    live_only = True
    defaults = {"norm_explosion": 10.0, "rank_collapse": 0.1, "layer_cv": 2.0}

    def setup(self) -> None:
        self.base = Baseline(2)

    def observe(self, row: Row) -> None:
        v = row.values
        n = v["lora/norm_mean"]
        if not finite(n):
            return
        d = self.derived
        d["norm_mean"] = n
        for k in ("lora/effective_rank", "lora/rank", "lora/rel_change", "lora/norm_cv"):
            if k in v and finite(v[k]):
                d[k.split("/", 1)[1]] = v[k]
        self.base.push(n)
        if self.base.ready and self.base.value > 0:
            ratio = n / self.base.value
            d["norm_vs_start"] = ratio
            self.check("lora-norm-explosion", ratio > self.p["norm_explosion"], "warn", "lora/norm_mean", n,
                       lambda: f"mean LoRA update norm ‖B·A‖ grew {ratio:.0f}x since the first probes: "
                       "adapters are blowing up (LR too high for the adapter).", for_=2)
        er, r = d.get("effective_rank"), d.get("rank")
        if er is not None and r and n > 1e-8:
            self.check("lora-rank-collapse", er < max(1.0, self.p["rank_collapse"] * r) and r >= 4, "info",
                       "lora/effective_rank", er,
                       lambda: f"effective rank {er:.1f} of configured rank {r:.0f}: the adapter uses few "
                       f"directions; {self.fix('lora-rank-collapse')}.", for_=2)
        cv = d.get("norm_cv")
        if cv is not None:
            self.check("lora-layer-imbalance", cv > self.p["layer_cv"], "info", "lora/norm_cv", cv,
                       lambda: f"per-layer LoRA norms vary widely (CV {cv:.1f}).", for_=2)


#: The LoRA gauge's rules (live).
LORA_RULES: tuple[Rule, ...] = (
    Rule(
        "lora", "lora-norm-explosion", severities=("warn",),
        reads="lora/norm_mean (‖B·A‖) / its first 2 probes",
        test="ratio above a line, held 2",
        params=("norm_explosion",),
        means="adapters are blowing up",
        fix="lower the adapter's learning rate",
        seed="norm explosion", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1 * (1 + i / 100) * (1 + 20 * ramp(i, 60, 10))}),
            lambda i, g: live(i, g, **{"lora/norm_mean": 0.1 * (1 + i / 100)}), 100, 60, 70, "lora/norm_mean"),
    ),
    Rule(
        "lora", "lora-rank-collapse", severities=("info",),
        reads="lora/effective_rank vs lora/rank",
        test="below `rank_collapse` x rank, held 2 (info)",
        params=("rank_collapse",),
        means="the adapter uses few directions",
        fix="a smaller rank would do",
        seed="effective rank ≪ configured rank or = configured rank", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/rank": 16.0,
                                              "lora/effective_rank": 12.0 - 11.0 * after(i, 60)}),
            lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/rank": 16.0, "lora/effective_rank": 12.0}),
            100, 60, 61, "lora/effective_rank"),
    ),
    Rule(
        "lora", "lora-layer-imbalance", severities=("info",),
        reads="lora/norm_cv (cross-layer coefficient of variation)",
        test="level above a line, held 2 (info)",
        params=("layer_cv",),
        means="per-layer adapter norms vary widely",
        fix="check per-layer targets and ranks",
        seed="large cross-layer variance", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/norm_cv": 0.5 + 2.5 * after(i, 60)}),
            lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/norm_cv": 0.5}), 100, 60, 61, "lora/norm_cv"),
    ),
)
