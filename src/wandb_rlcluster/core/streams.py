"""The row makers of the rules' example streams (``Rule.example``, ``core/rule.py``).

The streams are made by small deterministic functions (numpy's seeded generator, TRL 1.16 key names), one
healthy row maker per trainer family and a pathology laid over it, so the pair differs only in what the rule is
for. The makers and helpers two or more gauge modules share are here; a pathology one rule alone needs is declared
beside that rule. ``tests/test_rule_catalog.py`` runs each pair through ``analyze_rows``; ``rlcluster rules
--markdown`` draws them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .rule import Maker, Row


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


# -- shared by several gauges' examples --------------------------------------------------------------------------

def _gold(i: int, onset: int, n: int, falls: bool, g: np.random.Generator) -> float:
    """A gold reward rising with the proxy, or from ``onset`` falling."""
    return 0.2 + 0.3 * min(i, onset if falls else i) / n - (0.3 * ramp(i, onset, 100) if falls else 0.0) \
        + 0.03 * g.normal()


def with_gold(falls: bool, onset: int = 100) -> Maker:
    """A GRPO run whose proxy reward rises steadily, with a gold reward that rises too or, from ``onset``, falls."""
    def make(i: int, g: np.random.Generator) -> Row:
        return {**grpo(i, g, reward=0.3 + 0.5 * i / 200), "rewards/gold/mean": _gold(i, onset, 200, falls, g)}
    return make


def reward_components(i: int, g: np.random.Generator, *, fmt: float, acc: float, fmt_std: float = 0.3) -> Row:
    """Two reward functions' means and stds (``rewards/fmt/*``, ``rewards/acc/*``) at the levels given."""
    z = g.normal(0.0, 1.0, 2)
    return {"rewards/fmt/mean": fmt + 0.04 * z[0], "rewards/fmt/std": fmt_std,
            "rewards/acc/mean": acc + 0.04 * z[1], "rewards/acc/std": 0.4}


GOLD = {"params": {"reward": {"gold": ["gold"]}}}
"""``analyze_rows`` kwargs naming the gold reward function (``rewards/gold/mean``)."""
