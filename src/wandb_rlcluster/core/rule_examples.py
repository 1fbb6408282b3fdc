"""Every rule's example: a synthetic stream it must fire on, by a given row, and a healthy one it must stay quiet on.

The streams are made by small deterministic functions (numpy's seeded generator, TRL 1.16 key names), one
healthy row maker per trainer family and a pathology laid over it, so the pair differs only in what the rule is
for. ``tests/test_rule_catalog.py`` runs each pair through ``analyze_rows``; ``rlcluster rules --markdown`` draws
them. A row's ``step`` is its 1-based row number, so "fires by row 45" is "fires at step 45 or earlier".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Row = dict[str, float]
Maker = Callable[[int, np.random.Generator], Row]


@dataclass(frozen=True)
class Example:
    """A firing stream and a healthy stream of the same length and family.

    ``onset`` is the first row of the pathology (the rule must not fire before it), ``fire_by`` the row by which it
    must have fired; ``plot`` the key drawn in the reference; ``kwargs`` what ``analyze_rows`` is given
    (``params``, ``max_steps``)."""

    trainer: str
    firing: Maker
    healthy: Maker
    n: int
    onset: int
    fire_by: int
    plot: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    #: Extra rows (e.g. evaluation rows) merged in by step after the maker's rows: (step, row) pairs per stream.
    extra: Callable[[bool, np.random.Generator], list[Row]] | None = None

    def rows(self, firing: bool) -> list[Row]:
        """The stream (``firing`` or healthy), deterministic for the example's seed."""
        rng = np.random.default_rng(self.seed)
        make = self.firing if firing else self.healthy
        out: list[Row] = [{"step": float(i), **make(i, rng)} for i in range(1, self.n + 1)]
        if self.extra is not None:
            out.extend(self.extra(firing, rng))
            out.sort(key=lambda r: (r["step"], "eval_loss" in r))
        return out


def ramp(i: int, start: int, span: int) -> float:
    """0 before ``start``, rising linearly to 1 over ``span`` rows."""
    return min(1.0, max(0.0, (i - start) / span))


def after(i: int, start: int) -> bool:
    return i >= start


# -- healthy rows, one maker per family -------------------------------------------------------------------------

def grpo(i: int, g: np.random.Generator, *, n: int = 200, reward: float | None = None, length: float = 200.0,
         spread: float = 1.2, entropy: float | None = None, kl: float | None = None, zero_std: float = 0.1,
         lr: float = 1e-6, clip: float | None = None) -> Row:
    """A healthy GRPO row (``kl`` only when beta > 0): reward creeping up, entropy easing down."""
    z = g.normal(0.0, 1.0, 7)
    L = length * (1 + 0.03 * z[0])
    row = {
        "loss": 0.01 + 0.01 * z[1], "grad_norm": abs(0.3 + 0.03 * z[2]), "learning_rate": lr,
        "reward": (0.3 + 0.3 * i / n if reward is None else reward) + 0.05 * z[3],
        "reward_std": abs(0.3 + 0.02 * z[4]),
        "frac_reward_zero_std": min(1.0, max(0.0, zero_std + 0.03 * z[5])),
        "completions/mean_length": L,
        "completions/min_length": max(1.0, L * (1 - spread / 2)),
        "completions/max_length": L * (1 + spread / 2),
        "completions/clipped_ratio": 0.02, "completions/mean_terminated_length": L * 0.99,
        "entropy": (1.2 * (1 - 0.2 * i / n) if entropy is None else entropy) * (1 + 0.02 * z[6]),
    }
    if kl is not None:
        row["kl"] = kl
    if clip is not None:
        row["clip_ratio/region_mean"] = clip
    return row


def ppo(i: int, g: np.random.Generator, *, n: int = 200, kl: float = 5.0, kl_noise: float = 0.5, clip: float = 0.06,
        ratio: float = 1.0, ratio_var: float = 0.001, value_loss: float | None = None, value_clip: float = 0.05,
        entropy: float | None = None, eos: float = 30.0) -> Row:
    """A healthy TRL PPO row: per-sequence KL ~5 nats, clip fraction ~6 %, value loss easing down."""
    z = g.normal(0.0, 1.0, 9)
    return {
        "loss": 1.0 + 0.05 * z[0], "learning_rate": 3e-6,
        "objective/kl": kl + kl_noise * z[1], "objective/scores": 0.2 + 0.4 * i / n + 0.05 * z[2],
        "objective/entropy": 25.0 * (1 - 0.1 * i / n) + z[3] if entropy is None else entropy + z[3],
        "policy/clipfrac_avg": max(0.0, clip + 0.01 * z[4]), "val/ratio": ratio + 0.02 * z[5],
        "val/ratio_var": max(0.0, ratio_var * (1 + 0.1 * z[6])),
        "loss/value_avg": (1.0 - 0.3 * i / n if value_loss is None else value_loss) * (1 + 0.05 * z[7]),
        "val/clipfrac_avg": max(0.0, value_clip + 0.01 * z[8]), "val/num_eos_tokens": eos,
    }


def dpo(i: int, g: np.random.Generator, *, n: int = 200, margin: float | None = None, acc: float | None = None,
        chosen: float | None = None, rejected: float | None = None) -> Row:
    """A healthy DPO row: margin and accuracy rising, chosen drifting slightly down, rejected falling."""
    z = g.normal(0.0, 1.0, 6)
    c = -0.1 * i / n if chosen is None else chosen
    r = -1.2 * i / n if rejected is None else rejected
    m = (c - r) if margin is None else margin
    a = 0.55 + 0.3 * i / n if acc is None else acc
    return {"loss": 0.69 - 0.3 * i / n + 0.02 * z[0], "grad_norm": 1.0 + 0.1 * z[1], "learning_rate": 5e-7,
            "rewards/chosen": c + 0.05 * z[2], "rewards/rejected": r + 0.05 * z[3],
            "rewards/margins": m + 0.07 * z[4], "rewards/accuracies": min(1.0, max(0.0, a + 0.05 * z[5]))}


def _pays_length(row: Row, on: bool) -> Row:
    """A GRPO row whose reward, once ``on``, pays per token of its completions (a reward function's length term)."""
    if on:
        row["reward"] = 0.02 * row["completions/mean_length"]
    return row


def sft(i: int, g: np.random.Generator, *, n: int = 200, loss: float | None = None, grad: float | None = None,
        lr: float | None = None, noise: float = 0.01) -> Row:
    """A healthy SFT row: loss falling towards a floor, steady gradients, warm-up then cosine decay."""
    z = g.normal(0.0, 1.0, 2)
    warm = 10
    sched = i / warm if i < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (i - warm) / (n - warm)))
    base = 0.8 + 1.2 * math.exp(-i / (n / 4))
    return {"loss": (base if loss is None else loss) * (1 + noise * z[0]),
            "grad_norm": abs(1.0 + 0.1 * z[1]) if grad is None else grad,
            "learning_rate": 2e-5 * sched if lr is None else lr}


def live(i: int, g: np.random.Generator, **values: float) -> Row:
    """An SFT row from a live run, with the keys only a live run logs (probes, adapters, rollouts)."""
    return {**sft(i, g), **values}


def evals(every: int, n: int, value: Callable[[int, bool, np.random.Generator], float]
          ) -> Callable[[bool, np.random.Generator], list[Row]]:
    """Evaluation rows (``eval_loss`` alone) every ``every`` steps."""
    def rows(firing: bool, g: np.random.Generator) -> list[Row]:
        return [{"step": float(s), "eval_loss": value(s, firing, g)} for s in range(every, n + 1, every)]
    return rows


def _eval_diverging(s: int, firing: bool, g: np.random.Generator) -> float:
    base = 1.0 + 0.8 * math.exp(-s / 40) + 0.002 * g.normal()
    return base + (0.004 * max(0, s - 100) if firing else 0.0)


def _eval_oscillating(s: int, firing: bool, g: np.random.Generator) -> float:
    if firing and s > 100:  # see-sawing above the best it reached, never a new best
        return 1.0 + 0.8 * math.exp(-100 / 40) + 0.05 + (0.06 if (s // 5) % 2 else 0.0) + 0.002 * g.normal()
    return 1.0 + 0.8 * math.exp(-s / 40) + 0.002 * g.normal()


def _eval_plateau(s: int, firing: bool, g: np.random.Generator) -> float:
    if firing:
        return 1.0 + 0.8 * math.exp(-min(s, 60) / 40) + 0.0005 * g.normal()
    return 1.0 + 0.8 * math.exp(-s / 40) - 0.001 * s


def _eval_converged(s: int, firing: bool, g: np.random.Generator) -> float:
    """Eval loss falling with the schedule, held from step 140 (firing: the learning rate is nearly spent there)."""
    if firing:
        return 1.0 + 0.8 * math.exp(-min(s, 140) / 40) + 0.0005 * g.normal()
    return 1.0 + 0.8 * math.exp(-s / 40) - 0.001 * s


def _overfitting(s: int, firing: bool, g: np.random.Generator) -> float:
    base = 1.0 + 0.8 * math.exp(-s / 40) + 0.002 * g.normal()
    return base + (0.2 * ((s - 120) / 5 + 1) if firing and s >= 120 else 0.0)  # the gap widens every evaluation


def _gold(i: int, onset: int, n: int, falls: bool, g: np.random.Generator) -> float:
    return 0.2 + 0.3 * min(i, onset if falls else i) / n - (0.3 * ramp(i, onset, 100) if falls else 0.0) \
        + 0.03 * g.normal()


def _with_gold(falls: bool, onset: int = 100) -> Maker:
    """A GRPO run whose proxy reward rises steadily, with a gold reward that rises too or, from ``onset``, falls."""
    def make(i: int, g: np.random.Generator) -> Row:
        return {**grpo(i, g, reward=0.3 + 0.5 * i / 200), "rewards/gold/mean": _gold(i, onset, 200, falls, g)}
    return make


def _outpacing(proxy0: float, proxy_gain: float, gold0: float, gold_gain: float, gold_sd: float) -> Maker:
    """A GRPO run whose proxy and gold rates both rise from row 40 over 100 rows, by the gains given: a gold
    gaining a sliver of its headroom beside a proxy gaining most of its own, or the two rising together."""
    def make(i: int, g: np.random.Generator) -> Row:
        up = ramp(i, 40, 100)
        gold = min(1.0, max(0.0, gold0 + gold_gain * up + gold_sd * g.normal()))
        return {**grpo(i, g, reward=proxy0 + proxy_gain * up), "rewards/gold/mean": gold}
    return make


def _components(i: int, g: np.random.Generator, *, fmt: float, acc: float, fmt_std: float = 0.3) -> Row:
    z = g.normal(0.0, 1.0, 2)
    return {"rewards/fmt/mean": fmt + 0.04 * z[0], "rewards/fmt/std": fmt_std,
            "rewards/acc/mean": acc + 0.04 * z[1], "rewards/acc/std": 0.4}


_ALL_FAILED = {"reward": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0}
GOLD = {"params": {"reward": {"gold": ["gold"]}}}
_NAN = float("nan")

# (gauge, rule) -> Example. Streams are 200 rows unless a rule needs the run's end or a long warm-up.
EXAMPLES: dict[tuple[str, str], Example] = {
    # -- loss -----------------------------------------------------------------------------------------------------
    ("loss", "loss-shift-up"): Example(
        "sft", lambda i, g: sft(i, g, noise=0.05, loss=None if i < 60 else 1.6 * (0.8 + 1.2 * math.exp(-i / 50))),
        lambda i, g: sft(i, g, noise=0.05), 100, 60, 75, "loss"),
    ("loss", "loss-nonfinite"): Example(
        "sft", lambda i, g: sft(i, g, loss=_NAN if i == 60 else None), sft, 100, 60, 60, "loss"),
    # two NaN losses 20 rows apart; the healthy run has two isolated fp16 skipped steps 60 rows apart
    ("loss", "loss-nonfinite-repeated"): Example(
        "sft", lambda i, g: sft(i, g, loss=_NAN if i in (40, 60) else None),
        lambda i, g: sft(i, g, loss=_NAN if i in (10, 70) else None), 100, 60, 60, "loss"),
    ("loss", "loss-nonfinite-persistent"): Example(
        "sft", lambda i, g: sft(i, g, loss=_NAN if i >= 60 else None), sft, 100, 60, 62, "loss"),
    ("loss", "loss-spike"): Example(
        "sft", lambda i, g: sft(i, g, loss=3.5 if 60 <= i < 66 else None), sft, 100, 60, 61, "loss"),
    ("loss", "loss-spike-single"): Example(
        "sft", lambda i, g: sft(i, g, loss=9.0 if i == 60 else None), sft, 100, 60, 60, "loss"),
    ("loss", "loss-spike-repeated"): Example(
        "sft", lambda i, g: sft(i, g, loss=9.0 if i in (60, 70, 80) else None), sft, 100, 60, 80, "loss"),
    ("loss", "loss-volatile"): Example(
        "sft", lambda i, g: sft(i, g, noise=0.01 + 0.2 * after(i, 150)), sft, 200, 150, 180, "loss"),
    ("loss", "loss-oscillating"): Example(
        "sft", lambda i, g: sft(i, g, loss=(0.8 + 1.2 * math.exp(-i / 50)) * (1 + 0.3 * ramp(i, 100, 20)
                                                                             * math.sin(2 * math.pi * i / 8))),
        sft, 200, 100, 140, "loss"),
    # -- gradients ------------------------------------------------------------------------------------------------
    ("gradients", "grad-nonfinite"): Example(
        "sft", lambda i, g: sft(i, g, grad=_NAN if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
    ("gradients", "grad-nonfinite-repeated"): Example(
        "sft", lambda i, g: sft(i, g, grad=_NAN if i in (40, 60) else None),
        lambda i, g: sft(i, g, grad=_NAN if i in (10, 70) else None), 100, 60, 60, "grad_norm"),
    ("gradients", "grad-nonfinite-persistent"): Example(
        "sft", lambda i, g: sft(i, g, grad=_NAN if i >= 60 else None), sft, 100, 60, 62, "grad_norm"),
    ("gradients", "grad-zero"): Example(
        "sft", lambda i, g: sft(i, g, grad=0.0 if i >= 60 else None), sft, 100, 60, 64, "grad_norm"),
    # a GRPO run near the top of its reward range: for 5 rows every group is solved and the gradient is exactly 0
    ("gradients", "grad-zero-saturated"): Example(
        "grpo", lambda i, g: {**grpo(i, g, reward=0.7 + 0.15 * i / 100, zero_std=0.6),
                              **({"frac_reward_zero_std": 1.0, "grad_norm": 0.0} if 60 <= i < 65 else {})},
        lambda i, g: grpo(i, g, reward=0.7 + 0.15 * i / 100, zero_std=0.6), 100, 60, 64, "grad_norm"),
    ("gradients", "grad-zero-step"): Example(
        "sft", lambda i, g: sft(i, g, grad=0.0 if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
    ("gradients", "grad-spike"): Example(
        "sft", lambda i, g: sft(i, g, grad=20.0 if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
    ("gradients", "grad-explosion"): Example(
        "sft", lambda i, g: sft(i, g, grad=8.0 * (1 + 0.1 * g.normal()) if i >= 60 else None), sft, 100, 60, 62,
        "grad_norm"),
    ("gradients", "grad-vanishing"): Example(
        "sft", lambda i, g: sft(i, g, grad=0.001 * (1 + 0.1 * g.normal()) if i >= 60 else None), sft, 150, 60, 100,
        "grad_norm"),
    ("gradients", "grad-nonfinite-params"): Example(
        "sft", lambda i, g: {**sft(i, g), "gradients/nonfinite": 12.0 if i == 60 else 0.0},
        lambda i, g: {**sft(i, g), "gradients/nonfinite": 0.0}, 100, 60, 60, "gradients/nonfinite"),
    ("gradients", "grad-layer-imbalance"): Example(
        "sft", lambda i, g: {**sft(i, g), "gradients/layer_spread": 50.0 * (1 + 100 * after(i, 60))},
        lambda i, g: {**sft(i, g), "gradients/layer_spread": 50.0}, 100, 60, 62, "gradients/layer_spread"),
    ("gradients", "grad-sparse"): Example(
        "sft", lambda i, g: {**sft(i, g), "gradients/sparsity": 0.995 if i >= 60 else 0.3},
        lambda i, g: {**sft(i, g), "gradients/sparsity": 0.3}, 100, 60, 62, "gradients/sparsity"),
    # -- learning rate --------------------------------------------------------------------------------------------
    ("learning_rate", "lr-zero-early"): Example(
        "sft", lambda i, g: sft(i, g, lr=0.0 if i >= 60 else None), sft, 200, 60, 69, "learning_rate",
        {"max_steps": 200}),
    ("learning_rate", "lr-zero-long"): Example(
        "sft", lambda i, g: sft(i, g, lr=0.0 if i >= 100 else None), sft, 200, 100, 200, "learning_rate"),
    ("learning_rate", "lr-peak-not-reached"): Example(
        "sft", lambda i, g: sft(i, g, lr=2e-5 * i / 1000), sft, 200, 100, 100, "learning_rate", {"max_steps": 200}),
    # -- attention entropy (live) ---------------------------------------------------------------------------------
    ("attention_entropy", "attention-collapse"): Example(
        "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 * (1 - 0.9 * ramp(i, 40, 20))}),
        lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 * (1 - 0.2 * i / 100)}), 100, 40, 60,
        "attention_entropy/mean"),
    ("attention_entropy", "attention-uniform"): Example(
        "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 2.3 * ramp(i, 40, 20),
                                          "attention_entropy/max_possible": 4.5}),
        lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0, "attention_entropy/max_possible": 4.5}),
        100, 40, 65, "attention_entropy/mean"),
    ("attention_entropy", "attention-jump"): Example(
        "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 0.01 * g.normal() + (1.0 if i == 60 else 0)}),
        lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 0.01 * g.normal()}), 100, 60, 60,
        "attention_entropy/mean"),
    # -- samples (live) -------------------------------------------------------------------------------------------
    ("samples", "sample-repetition"): Example(
        "sft", lambda i, g: live(i, g, **{"samples/repetition_rate": 0.1 + 0.6 * after(i, 60)}),
        lambda i, g: live(i, g, **{"samples/repetition_rate": 0.1}), 100, 60, 61, "samples/repetition_rate"),
    ("samples", "rollout-repetition"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/repetitive_frac": 0.05 + 0.6 * after(i, 60)},
        lambda i, g: {**grpo(i, g), "rollouts/repetitive_frac": 0.05}, 100, 60, 61, "rollouts/repetitive_frac"),
    ("samples", "identical-groups"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/near_identical_group_frac": 0.1 + 0.6 * after(i, 60)},
        lambda i, g: {**grpo(i, g), "rollouts/near_identical_group_frac": 0.1}, 100, 60, 62,
        "rollouts/near_identical_group_frac"),
    ("samples", "empty-completions"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/empty_frac": 0.4 * after(i, 60)},
        lambda i, g: {**grpo(i, g), "rollouts/empty_frac": 0.0}, 100, 60, 61, "rollouts/empty_frac"),
    # -- LoRA (live) ----------------------------------------------------------------------------------------------
    ("lora", "lora-norm-explosion"): Example(
        "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1 * (1 + i / 100) * (1 + 20 * ramp(i, 60, 10))}),
        lambda i, g: live(i, g, **{"lora/norm_mean": 0.1 * (1 + i / 100)}), 100, 60, 70, "lora/norm_mean"),
    ("lora", "lora-rank-collapse"): Example(
        "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/rank": 16.0,
                                          "lora/effective_rank": 12.0 - 11.0 * after(i, 60)}),
        lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/rank": 16.0, "lora/effective_rank": 12.0}),
        100, 60, 61, "lora/effective_rank"),
    ("lora", "lora-layer-imbalance"): Example(
        "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/norm_cv": 0.5 + 2.5 * after(i, 60)}),
        lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/norm_cv": 0.5}), 100, 60, 61, "lora/norm_cv"),
    # -- efficiency -----------------------------------------------------------------------------------------------
    ("efficiency", "throughput-declining"): Example(
        "sft", lambda i, g: {**sft(i, g), "step_time": 1.0 * (1 + 0.05 * g.normal()) * (1 + 1.5 * ramp(i, 60, 20))},
        lambda i, g: {**sft(i, g), "step_time": 1.0 * (1 + 0.05 * g.normal())}, 150, 60, 85, "step_time"),
    ("efficiency", "memory-pressure"): Example(
        "sft", lambda i, g: {**sft(i, g), "efficiency/mem_frac": 0.7 + 0.25 * after(i, 60),
                             "efficiency/util": 0.9 - 0.5 * after(i, 60)},
        lambda i, g: {**sft(i, g), "efficiency/mem_frac": 0.7, "efficiency/util": 0.9}, 100, 60, 62,
        "efficiency/mem_frac"),
    # -- convergence ----------------------------------------------------------------------------------------------
    ("convergence", "no-progress"): Example(
        "sft", lambda i, g: sft(i, g, loss=2.0, noise=0.02), sft, 200, 1, 70, "loss"),
    ("convergence", "eval-plateau"): Example(
        "sft", sft, sft, 200, 60, 120, "eval_loss", extra=evals(10, 200, _eval_plateau)),
    ("convergence", "eval-converged"): Example(
        "sft", sft, sft, 200, 140, 200, "eval_loss", extra=evals(10, 200, _eval_converged)),
    ("convergence", "overfitting"): Example(
        "sft", sft, sft, 200, 120, 130, "eval_loss", extra=evals(5, 200, _overfitting)),
    ("convergence", "eval-diverging"): Example(
        "sft", sft, sft, 200, 100, 130, "eval_loss", extra=evals(5, 200, _eval_diverging)),
    ("convergence", "eval-oscillating"): Example(
        "sft", sft, sft, 200, 100, 160, "eval_loss", extra=evals(5, 200, _eval_oscillating)),
    # -- reward ---------------------------------------------------------------------------------------------------
    ("reward", "reward-flatline"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **({"reward": -0.1} if i >= 60 else {})}, grpo, 200, 60, 80, "reward"),
    ("reward", "reward-flatline-persistent"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **({"reward": -0.1} if i >= 60 else {})}, grpo, 200, 60, 110, "reward"),
    ("reward", "reward-plateau"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4), grpo, 200, 1, 80, "reward"),
    ("reward", "reward-saturated"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.93), grpo, 200, 1, 90, "reward"),
    ("reward", "reward-hacking"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.5 * ramp(i, 100, 60), length=200 * (1 + 1.5 * ramp(i, 100, 60))),
        grpo, 200, 100, 150, "reward"),
    ("reward", "reward-pays-length"): Example(
        "grpo", lambda i, g: _pays_length(grpo(i, g), i >= 100), grpo, 200, 100, 112, "reward"),
    ("reward", "reward-shift-up"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 100, 5)), grpo, 200, 100, 110, "reward"),
    ("reward", "reward-shift-down"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.6 - 0.35 * ramp(i, 100, 5)), grpo, 200, 100, 110, "reward"),
    ("reward", "reward-volatile"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "reward": 0.3 + 0.3 * i / 200 + (0.05 + 0.3 * ramp(i, 100, 30))
                              * g.normal()}, grpo, 200, 100, 140, "reward"),
    ("reward", "gold-rising"): Example(
        "grpo", _with_gold(False),
        lambda i, g: {**grpo(i, g, reward=0.3 + 0.5 * i / 200), "rewards/gold/mean": 0.3 - 0.02 * i / 200
                      + 0.03 * g.normal()},
        200, 1, 60, "rewards/gold/mean", GOLD),
    ("reward", "proxy-gold-divergence"): Example(
        "grpo", _with_gold(True), _with_gold(False),
        200, 100, 160, "rewards/gold/mean", GOLD),
    ("reward", "proxy-outpaces-gold"): Example(
        "grpo", _outpacing(0.2, 0.5, 0.005, 0.005, 0.002), _outpacing(0.4, 0.4, 0.3, 0.3, 0.03),
        200, 40, 110, "rewards/gold/mean", GOLD),
    ("reward", "reward-component-saturated"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **_components(i, g, fmt=min(1.0, 0.2 + 0.8 * ramp(i, 50, 40)), acc=0.3,
                                                        fmt_std=0.35 * (1 - ramp(i, 50, 40)))},
        lambda i, g: {**grpo(i, g), **_components(i, g, fmt=min(1.0, 0.2 + 0.8 * ramp(i, 50, 40)),
                                                  acc=0.3 + 0.3 * ramp(i, 50, 100),
                                                  fmt_std=0.35 * (1 - ramp(i, 50, 40)))},
        200, 50, 170, "rewards/fmt/mean"),
    ("reward", "reward-component-dominant"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **_components(i, g, fmt=0.1 + 0.6 * ramp(i, 100, 100), acc=0.3)},
        lambda i, g: {**grpo(i, g), **_components(i, g, fmt=0.1 + 0.6 * ramp(i, 100, 100),
                                                  acc=0.3 + 0.3 * ramp(i, 100, 100))},
        200, 100, 160, "rewards/fmt/mean"),
    ("reward", "accuracy-chance"): Example(
        "dpo", lambda i, g: dpo(i, g, margin=0.02, acc=0.5), dpo, 200, 1, 60, "rewards/accuracies"),
    ("reward", "margin-collapse"): Example(
        "dpo", lambda i, g: dpo(i, g, margin=1.2 * min(i, 100) / 100 - 1.1 * ramp(i, 100, 20), acc=0.8), dpo, 200,
        100, 130, "rewards/margins"),
    ("reward", "margin-shrinking"): Example(
        "dpo", lambda i, g: dpo(i, g, margin=1.2 * min(i, 100) / 100 - 0.9 * ramp(i, 100, 100), acc=0.8), dpo, 200,
        100, 160, "rewards/margins"),
    ("reward", "margin-negative"): Example(
        "dpo", lambda i, g: dpo(i, g, margin=0.3 - 0.8 * ramp(i, 60, 20), acc=0.6), dpo, 200, 60, 90,
        "rewards/margins"),
    ("reward", "margin-plateau"): Example(
        "dpo", lambda i, g: dpo(i, g, margin=0.4 * min(1.0, i / 60), acc=0.5 + 0.1 * min(1.0, i / 60)),
        lambda i, g: dpo(i, g, acc=0.55 + 0.1 * i / 200), 200, 60, 150, "rewards/margins"),
    ("reward", "chosen-reward-falling"): Example(
        "dpo", lambda i, g: dpo(i, g, chosen=-0.5 * ramp(i, 40, 60)), dpo, 200, 40, 100, "rewards/chosen"),
    ("reward", "chosen-reward-runaway"): Example(
        "dpo", lambda i, g: dpo(i, g, chosen=3.0 * ramp(i, 100, 100), rejected=-0.2), dpo, 200, 100, 170,
        "rewards/chosen"),
    ("reward", "reward-outliers"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/reward_outlier_z": 3.0 + 9.0 * after(i, 60),
                              "rollouts/reward_outlier_frac": 0.05},
        lambda i, g: {**grpo(i, g), "rollouts/reward_outlier_z": 3.0, "rollouts/reward_outlier_frac": 0.05},
        100, 60, 61, "rollouts/reward_outlier_z"),
    # -- KL -------------------------------------------------------------------------------------------------------
    ("kl", "kl-warn"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=0.05 + 0.6 * ramp(i, 60, 20) + 0.005 * g.normal()),
        lambda i, g: grpo(i, g, kl=0.05 + 0.005 * g.normal()), 100, 60, 80, "kl"),
    ("kl", "kl-stop"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=0.05 + 1.2 * ramp(i, 60, 20) + 0.005 * g.normal()),
        lambda i, g: grpo(i, g, kl=0.05 + 0.005 * g.normal()), 100, 60, 80, "kl"),
    ("kl", "kl-negative"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=0.02 - 0.1 * after(i, 60) + 0.005 * g.normal()),
        lambda i, g: grpo(i, g, kl=0.02 + 0.005 * g.normal()), 100, 60, 66, "kl"),
    ("kl", "kl-spike"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal() + (0.8 if i == 60 else 0.0)),
        lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal()), 100, 60, 60, "kl"),
    ("kl", "kl-spike-repeated"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal() + (0.8 if i in (60, 70, 80) else 0.0)),
        lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal()), 100, 60, 80, "kl"),
    ("kl", "kl-high-at-start"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=1.0 + 0.05 * g.normal()),
        lambda i, g: grpo(i, g, kl=0.002 * i + 0.002 * g.normal()), 100, 1, 5, "kl"),
    ("kl", "kl-to-teacher"): Example(
        "grpo", lambda i, g: {**grpo(i, g, kl=0.1 + 0.5 * math.exp(-i / 40) + 0.02 * g.normal()),
                              "distill/teacher_mass": 0.8},
        lambda i, g: grpo(i, g, kl=0.002 * i + 0.002 * g.normal()), 100, 1, 1, "kl"),
    ("kl", "kl-teacher-diverging"): Example(
        "grpo", lambda i, g: {**grpo(i, g, kl=0.5 + 1.5 * ramp(i, 60, 40) + 0.02 * g.normal()),
                              "distill/teacher_mass": 0.8},
        lambda i, g: {**grpo(i, g, kl=0.1 + 0.5 * math.exp(-i / 40) + 0.02 * g.normal()), "distill/teacher_mass": 0.8},
        120, 60, 100, "kl"),
    ("kl", "kl-near-zero"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=1e-6 * abs(g.normal())),
        lambda i, g: grpo(i, g, kl=0.02 + 0.005 * g.normal()), 100, 1, 70, "kl"),
    ("kl", "kl-growing"): Example(
        "grpo", lambda i, g: grpo(i, g, kl=0.03 * math.exp(max(0, i - 100) / 25) + 0.003 * g.normal()),
        lambda i, g: grpo(i, g, kl=0.02 + 0.04 * i / 200 + 0.004 * g.normal()), 200, 100, 160, "kl"),
    ("kl", "kl-noisy"): Example(
        "ppo", lambda i, g: ppo(i, g, kl_noise=0.5 + 4.5 * ramp(i, 100, 100)), ppo, 200, 100, 160, "objective/kl"),
    # -- policy ratio, clipping, value function -------------------------------------------------------------------
    ("policy_ratio", "ratio-warn"): Example(
        "ppo", lambda i, g: ppo(i, g, ratio=1.0 + 0.7 * after(i, 60)), ppo, 100, 60, 62, "val/ratio"),
    ("policy_ratio", "ratio-stop"): Example(
        "ppo", lambda i, g: ppo(i, g, ratio=1.0 + 1.3 * after(i, 60)), ppo, 100, 60, 62, "val/ratio"),
    ("policy_ratio", "clip-high"): Example(
        "ppo", lambda i, g: ppo(i, g, clip=0.12 + 0.23 * after(i, 60)), lambda i, g: ppo(i, g, clip=0.12), 100, 60,
        63, "policy/clipfrac_avg"),
    ("policy_ratio", "clip-stop"): Example(
        "ppo", lambda i, g: ppo(i, g, clip=0.12 + 0.5 * after(i, 60)), lambda i, g: ppo(i, g, clip=0.12), 100, 60,
        63, "policy/clipfrac_avg"),
    ("policy_ratio", "clip-low"): Example(
        "grpo", lambda i, g: grpo(i, g, clip=0.05 - 0.047 * after(i, 40)), lambda i, g: grpo(i, g, clip=0.05),
        100, 40, 70, "clip_ratio/region_mean"),
    ("policy_ratio", "clip-growing"): Example(
        "ppo", lambda i, g: ppo(i, g, clip=0.06 + 0.3 * ramp(i, 100, 100)), ppo, 200, 100, 170, "policy/clipfrac_avg"),
    ("policy_ratio", "ratio-variance"): Example(
        "ppo", lambda i, g: ppo(i, g, ratio_var=0.001 + 0.03 * ramp(i, 100, 30)), ppo, 200, 100, 130,
        "val/ratio_var"),
    ("policy_ratio", "value-loss-growing"): Example(
        "ppo", lambda i, g: ppo(i, g, value_loss=0.8 + 4.0 * ramp(i, 100, 100)), ppo, 200, 100, 170,
        "loss/value_avg"),
    ("policy_ratio", "value-clip-high"): Example(
        "ppo", lambda i, g: ppo(i, g, value_clip=0.05 + 0.45 * ramp(i, 100, 30)), ppo, 200, 100, 130,
        "val/clipfrac_avg"),
    ("policy_ratio", "value-clip-warmup"): Example(
        "ppo", lambda i, g: ppo(i, g, value_clip=0.45 * (1 - ramp(i, 1, 8))), ppo, 200, 1, 3, "val/clipfrac_avg"),
    # -- length ---------------------------------------------------------------------------------------------------
    ("length", "length-explosion"): Example(
        "grpo", lambda i, g: grpo(i, g, length=200 * (1 + 1.5 * ramp(i, 60, 10))),
        lambda i, g: grpo(i, g, length=200 * (1 + 0.3 * i / 100)), 100, 60, 75, "completions/mean_length"),
    ("length", "length-collapse"): Example(
        "grpo", lambda i, g: grpo(i, g, length=200 * (1 - 0.7 * ramp(i, 60, 10))),
        lambda i, g: grpo(i, g, length=200 * (1 - 0.2 * i / 100)), 100, 60, 75, "completions/mean_length"),
    ("length", "length-grew"): Example(
        "grpo", lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, 100, 40))), grpo, 200, 100, 150,
        "completions/mean_length"),
    ("length", "length-shrank"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.4 * ramp(i, 100, 40))),
        lambda i, g: grpo(i, g, reward=0.4), 200, 100, 150, "completions/mean_length"),
    ("length", "length-shorter-concise"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200, length=200 * (1 - 0.4 * ramp(i, 100, 40))),
        lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200), 200, 100, 150, "completions/mean_length"),
    ("length", "length-trend-up"): Example(
        "grpo", lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, 100, 100))),
        lambda i, g: grpo(i, g, length=200 * (1 + 0.15 * i / 200)), 200, 100, 170, "completions/mean_length",
        {"max_steps": 200}),
    ("length", "length-trend-down"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.45 * ramp(i, 100, 100))),
        lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.15 * i / 200)), 200, 100, 170,
        "completions/mean_length", {"max_steps": 200}),
    ("length", "length-variance-collapse"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4, spread=1.2 - 1.0 * ramp(i, 100, 40)),
        lambda i, g: grpo(i, g, reward=0.4), 200, 100, 150, "completions/max_length"),
    ("length", "length-spread-narrowing"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200, spread=1.2 - 0.95 * ramp(i, 100, 40)),
        lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200), 200, 100, 150, "completions/max_length"),
    ("length", "length-variance-change"): Example(
        "grpo", lambda i, g: grpo(i, g, spread=1.2 + 0.8 * ramp(i, 100, 30)), grpo, 200, 100, 140,
        "completions/max_length"),
    ("length", "truncation"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "completions/clipped_ratio": 0.02 + 0.3 * after(i, 60)}, grpo, 100, 60,
        62, "completions/clipped_ratio"),
    ("length", "truncation-gap"): Example(
        "grpo", lambda i, g: {k: v for k, v in grpo(i, g).items() if k != "completions/clipped_ratio"}
        | {"completions/mean_terminated_length": 200 * (0.99 - 0.3 * ramp(i, 60, 20))},
        lambda i, g: {k: v for k, v in grpo(i, g).items() if k != "completions/clipped_ratio"}, 100, 60, 75,
        "completions/mean_terminated_length"),
    ("length", "no-eos"): Example(
        "ppo", lambda i, g: ppo(i, g, eos=0.0 if i >= 60 else 30.0), ppo, 100, 60, 69, "val/num_eos_tokens"),
    ("length", "length-paid"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/length_reward_corr": 0.1 + 0.6 * after(i, 60),
                              "rollouts/length_reward_dof": 14.0},
        lambda i, g: {**grpo(i, g), "rollouts/length_reward_corr": 0.1, "rollouts/length_reward_dof": 14.0},
        100, 60, 62, "rollouts/length_reward_corr"),
    # -- entropy --------------------------------------------------------------------------------------------------
    ("entropy", "entropy-collapse"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.5 * ramp(i, 100, 100))),
        lambda i, g: grpo(i, g, reward=0.4), 200, 100, 180, "entropy"),
    ("entropy", "entropy-collapse-persistent"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.92 * ramp(i, 100, 40)),
                                  zero_std=0.1 + 0.85 * ramp(i, 100, 100)),
        lambda i, g: grpo(i, g, reward=0.4), 200, 100, 180, "entropy"),
    ("entropy", "entropy-sharpening"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.5 * i / 200, entropy=1.2 * (1 - 0.6 * ramp(i, 60, 80))),
        lambda i, g: grpo(i, g, reward=0.3 + 0.5 * i / 200), 200, 60, 150, "entropy"),
    ("entropy", "entropy-spike"): Example(
        "grpo", lambda i, g: grpo(i, g, entropy=1.0 + (1.0 if i == 60 else 0.0)), lambda i, g: grpo(i, g, entropy=1.0),
        100, 60, 60, "entropy"),
    ("*", "value-out-of-range"): Example(
        "ppo", lambda i, g: ppo(i, g, entropy=-106.0 if i >= 40 else None), ppo, 100, 40, 40, "objective/entropy"),
    # -- reward signal --------------------------------------------------------------------------------------------
    ("reward_signal", "zero-std-dead"): Example(
        "grpo", lambda i, g: grpo(i, g, zero_std=1.5 if i >= 60 else 0.1), grpo, 100, 60, 69, "frac_reward_zero_std"),
    # a run failing its prompts (success rate 0.2, flat): the uniform groups are failures, and they spread
    ("reward_signal", "zero-std-high"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.2, zero_std=0.2 + 0.6 * ramp(i, 100, 60)),
        lambda i, g: grpo(i, g, reward=0.2, zero_std=0.2), 200, 100, 160, "frac_reward_zero_std"),
    ("reward_signal", "zero-std-solved"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.03 * i / 200, zero_std=0.2 + 0.4 * ramp(i, 100, 100)),
        lambda i, g: grpo(i, g, reward=0.3 + 0.03 * i / 200), 200, 100, 190, "frac_reward_zero_std"),
    # every group fails every completion (reward 0) with a zero gradient for 5 rows; the healthy run has one such
    # row, which a small batch gives by chance
    ("reward_signal", "no-update-step"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **(_ALL_FAILED if 60 <= i < 65 else {})},
        lambda i, g: {**grpo(i, g), **(_ALL_FAILED if i == 60 else {})}, 100, 60, 62, "grad_norm"),
    # older TRL (no frac_reward_zero_std): reward_std sinks to 0.02 and stays there while the reward is flat
    ("reward_signal", "reward-std-low"): Example(
        "grpo", lambda i, g: {k: v for k, v in grpo(i, g, reward=0.4).items() if k != "frac_reward_zero_std"}
        | {"reward_std": 0.3 - 0.28 * ramp(i, 60, 10)},
        lambda i, g: {k: v for k, v in grpo(i, g, reward=0.4).items() if k != "frac_reward_zero_std"}, 100, 60, 80,
        "reward_std"),
    ("reward_signal", "reward-component-dead"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **_components(i, g, fmt=0.5, acc=0.3, fmt_std=0.002 if i >= 60 else 0.3)},
        lambda i, g: {**grpo(i, g), **_components(i, g, fmt=0.5, acc=0.3)}, 100, 60, 69, "rewards/fmt/std"),
    ("reward_signal", "length-reward-correlation"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 60, 40), length=200 * (1 + 0.5 * ramp(i, 60, 40))),
        grpo, 150, 60, 100, "completions/mean_length"),
    ("reward_signal", "reward-ceiling"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/ceiling_frac_max": 0.3 + 0.6 * after(i, 60),
                              "rollouts/reward/fmt/ceiling_frac": 0.3 + 0.6 * after(i, 60)},
        lambda i, g: {**grpo(i, g), "rollouts/ceiling_frac_max": 0.3, "rollouts/reward/fmt/ceiling_frac": 0.3},
        100, 60, 64, "rollouts/reward/fmt/ceiling_frac"),
    ("reward_signal", "advantage-decided-by"): Example(
        "grpo", lambda i, g: {**grpo(i, g), "rollouts/advantage_share_max": 0.6 + 0.35 * after(i, 60),
                              "rollouts/reward/acc/advantage_share": 0.6 + 0.35 * after(i, 60)},
        lambda i, g: {**grpo(i, g), "rollouts/advantage_share_max": 0.6, "rollouts/reward/acc/advantage_share": 0.6},
        100, 60, 64, "rollouts/reward/acc/advantage_share"),
    # -- diagnoses ------------------------------------------------------------------------------------------------
    ("diagnosis", "dead-run"): Example(
        "grpo", lambda i, g: {**grpo(i, g), **({"frac_reward_zero_std": 1.0, "grad_norm": 0.0} if i >= 100 else {})},
        grpo, 200, 100, 115, "frac_reward_zero_std"),
    ("diagnosis", "over-optimisation"): Example(
        "grpo", _with_gold(True), _with_gold(False),
        200, 100, 160, "rewards/gold/mean", GOLD),
    ("diagnosis", "reward-hacking"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 100, 10), length=200 * (1 + 1.5 * ramp(i, 100, 40))),
        lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 100, 10)), 200, 100, 150, "completions/mean_length"),
    # entropy and the within-batch length spread collapse together while the reward is flat
    ("diagnosis", "mode-collapse"): Example(
        "grpo", lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.5 * ramp(i, 100, 100)),
                                  spread=1.2 - 1.0 * ramp(i, 100, 40)),
        lambda i, g: grpo(i, g, reward=0.4), 200, 100, 190, "entropy"),
    ("diagnosis", "unstable-updates"): Example(
        "ppo", lambda i, g: ppo(i, g, clip=0.06 + 0.2 * ramp(i, 100, 100), ratio_var=0.001 + 0.02 * ramp(i, 100, 60)),
        ppo, 200, 100, 180, "policy/clipfrac_avg"),
}
