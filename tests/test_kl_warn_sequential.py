"""kl-warn decides by a CUSUM of (kl - 0.5) in the run's own row noise (issue #28): the seed's 0.5 line stays, the
evidence is a sequential test with its threshold from the ARL0 budget, not a fixed 3-row hold."""

from __future__ import annotations

import random

from wandb_rlcluster.core import analyze_rows
from wandb_rlcluster.core.sequential import Cusum, arl_for, cusum_threshold

N, ONSET = 300, 150


def rows(kl_at, seed: int, rho: float = 0.0, sd: float = 0.02) -> list[dict[str, float]]:
    g = random.Random(seed)
    out, e = [], 0.0
    for i in range(1, N + 1):
        e = rho * e + (1 - rho * rho) ** 0.5 * g.gauss(0, sd)
        out.append({"step": float(i), "loss": 0.01, "reward": 0.3 + 0.3 * i / N + g.gauss(0, 0.05),
                    "reward_std": 0.3, "completions/mean_length": 200.0, "kl": kl_at(i) + e})
    return out


def kl_warns(rs: list[dict[str, float]]) -> list[int]:
    return [f.step for f in analyze_rows(rs, trainer="grpo").findings if f.rule == "kl-warn"]


def test_threshold_comes_from_the_budget():
    c = Cusum(k=0.5, arl=arl_for(0))
    assert abs(c.h - cusum_threshold(2000.0, 0.5)) < 1e-9
    assert cusum_threshold(arl_for(1), 0.5) < c.h  # warn_sooner: a larger false-alarm budget, a lower threshold


def test_a_kl_far_past_the_line_is_warned_before_the_three_row_hold():
    for seed in range(5):
        got = kl_warns(rows(lambda i: 0.2 if i < ONSET else 0.9, seed))
        assert got and ONSET <= got[0] <= ONSET + 1, (seed, got)  # the hold alone needs rows 150-152


def test_quiet_on_healthy_kl_below_the_line_white_and_ar1():
    for rho in (0.0, 0.5):
        for seed in range(5):
            assert not kl_warns(rows(lambda i: 0.3, seed, rho=rho, sd=0.08)), (rho, seed)


def test_one_outlier_row_past_the_line_is_not_a_warning():
    for seed in range(5):
        assert not kl_warns(rows(lambda i: 2.0 if i == ONSET else 0.2, seed)), seed
