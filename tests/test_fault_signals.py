"""The signals the fault-injection benchmark on real TRL training taught (benchmarks/faults/), each by meaning:
a lasting jump of the train loss, a reward that starts paying for length, a KL and grad-norm spike of one row
(not a warning), a DPO chosen reward that settles, and a wall clock on a sub-second step.

Streams are built here with seeded noise; every assertion holds for any seed the loops draw.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from wandb_rlcluster.core import analyze_rows

Row = dict[str, float]


def _warned(rows: list[Row], rule: str, trainer: str) -> list[int]:
    c = analyze_rows(rows, trainer=trainer)
    return [int(f.step) for f in c.findings if f.rule == rule and f.severity in ("warn", "stop")]


def _sft(n: int, seed: int, jump_at: int | None = None, jump_rows: int = 10_000, factor: float = 1.6) -> list[Row]:
    """A falling SFT loss with ~10 % batch noise; from ``jump_at`` (for ``jump_rows`` rows) ``factor`` x higher."""
    g = random.Random(seed)
    rows = []
    for i in range(1, n + 1):
        level = 1.0 + 3.0 * math.exp(-i / 30)
        if jump_at is not None and jump_at <= i < jump_at + jump_rows:
            level *= factor
        rows.append({"step": float(i), "loss": level * (1 + 0.1 * g.gauss(0, 1)), "grad_norm": 1.0,
                     "learning_rate": 2e-5})
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_a_lasting_jump_of_the_sft_loss_warns_after_it_and_a_falling_loss_does_not(seed):
    hits = _warned(_sft(120, seed, jump_at=60), "loss-shift-up", "sft")
    assert hits and 60 <= hits[0] <= 75
    assert _warned(_sft(120, seed), "loss-shift-up", "sft") == []


@pytest.mark.parametrize("seed", range(5))
def test_one_or_two_bad_batches_are_not_a_loss_shift(seed):
    for rows in (1, 2):
        assert _warned(_sft(120, seed, jump_at=60, jump_rows=rows, factor=3.0), "loss-shift-up", "sft") == []


def test_an_rl_surrogate_loss_is_not_read_for_a_shift():
    rows = _sft(120, 0, jump_at=60)
    assert _warned(rows, "loss-shift-up", "grpo") == []


def _grpo(n: int, seed: int, pays_from: int | None = None) -> list[Row]:
    """A GRPO run whose reward, from ``pays_from``, pays per character of the completion (plus the task part)."""
    g = random.Random(seed)
    rows = []
    for i in range(1, n + 1):
        length = 7.0 * (1 + 0.08 * g.gauss(0, 1)) * (1 + (0.3 * (i - pays_from) / n if pays_from and i >= pays_from
                                                          else 0.0))
        task = 0.4 + 0.2 * i / n + 0.05 * g.gauss(0, 1)
        reward = task + (0.5 * length if pays_from is not None and i >= pays_from else 0.0)
        rows.append({"step": float(i), "loss": 0.01 * g.gauss(0, 1), "grad_norm": 1.0 + 0.1 * g.gauss(0, 1),
                     "reward": reward, "reward_std": 0.15, "completions/mean_length": length,
                     "kl": 0.1 + 0.01 * g.gauss(0, 1), "entropy": 0.45})
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_a_reward_that_starts_paying_for_length_warns_before_the_length_has_grown(seed):
    hits = _warned(_grpo(60, seed, pays_from=25), "reward-pays-length", "grpo")
    assert hits and 25 <= hits[0] <= 35
    assert _warned(_grpo(60, seed), "reward-pays-length", "grpo") == []


def _kl_rows(seed: int, spike_at: int, grad_jump: float) -> list[Row]:
    g = random.Random(seed)
    rows = []
    for i in range(1, 61):
        kl = 1.1 if i == spike_at else 0.1 + 0.02 * g.gauss(0, 1)
        grad = grad_jump if i == spike_at else 0.2 + 0.02 * g.gauss(0, 1)
        rows.append({"step": float(i), "loss": 0.01, "grad_norm": grad, "reward": 0.5 + 0.05 * g.gauss(0, 1),
                     "reward_std": 0.2, "kl": kl, "completions/mean_length": 7.0, "entropy": 0.45})
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_one_row_of_kl_and_grad_norm_spiking_together_that_is_gone_the_next_row_is_not_a_warning(seed):
    """A real healthy Qwen3.5-9B GRPO run logged grad_norm 6.8 (~50x its median) and KL 1.11 on one row, both back
    the next: the same shape as the row before a learning-rate spike's damage, so one row cannot tell them apart."""
    assert _warned(_kl_rows(seed, 30, grad_jump=6.8), "kl-warn", "grpo") == []


def _dpo(seed: int, chosen: Callable[[int], float]) -> list[Row]:
    """A DPO run on an easy preference: accuracy 1, rejected easing down, chosen as given."""
    g = random.Random(seed)
    rows = []
    for i in range(1, 121):
        c = chosen(i) + 0.15 * g.gauss(0, 1)
        r = -0.6 * min(1.0, i / 20) + 0.1 * g.gauss(0, 1)
        rows.append({"step": float(i), "loss": 0.69 * math.exp(-i / 10), "grad_norm": 1.0, "learning_rate": 5e-6,
                     "rewards/chosen": c, "rewards/rejected": r, "rewards/margins": c - r, "rewards/accuracies": 1.0})
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_a_chosen_climb_that_has_settled_is_the_pair_learned_and_one_that_keeps_its_pace_is_a_runaway(seed):
    settling = _dpo(seed, lambda i: 3.5 * (1 - math.exp(-i / 8)))  # fast at first, then flattening
    assert _warned(settling, "chosen-reward-runaway", "dpo") == []
    late = _dpo(seed, lambda i: 3.5 * max(0.0, i - 40) / 80)  # flat, then a steady climb from row 40
    hits = _warned(late, "chosen-reward-runaway", "dpo")
    assert hits and hits[0] > 40


def test_a_sub_second_step_slowed_by_the_host_is_not_declining_throughput_and_a_slow_step_is():
    g = random.Random(0)
    for base, warns in ((0.15, False), (2.0, True)):
        rows = [{"step": float(i), "loss": 1.0, "step_time": base * (1 + 0.1 * g.gauss(0, 1)) * (3.0 if i > 30 else 1)}
                for i in range(1, 61)]
        assert bool(_warned(rows, "throughput-declining", "sft")) is warns
