"""Rules read against the noise their metric has (issue #28): healthy streams that the old rules misread as a
pathology stay quiet, and the pathology the rule is for still fires."""

from __future__ import annotations

import math
import random

import pytest

from wandb_rlcluster.core import analyze_rows

from .test_early_warning import N, build, grpo, ppo


def _warns(rows: list[dict[str, float]], trainer: str, rule: str, **kw: object) -> list[int]:
    cluster = analyze_rows(rows, trainer=trainer, **kw)  # type: ignore[arg-type]
    return [f.step for f in cluster.findings if f.rule == rule and f.severity in ("warn", "stop")]


def test_one_outlier_reward_row_is_not_a_volatile_reward():
    """A steady GRPO reward with one row 12 noise sigmas off (a Student-t(3) batch): the row-to-row changes are read
    clipped at 4 robust sigmas, so one row does not make the noise look twice as large for 30 rows."""
    for seed in range(6):
        def make(i: int, g: random.Random) -> dict[str, float]:
            row = grpo(i, g)
            if i == 200:
                row["reward"] += 0.6
            return row

        assert _warns(build(make, seed=seed), "grpo", "reward-volatile") == [], seed


def test_reward_that_turns_noisy_is_still_volatile():
    """The same reward whose row noise grows 4x from row 200 on, for good: reward-volatile fires after row 200."""
    for seed in range(3):
        rows = build(lambda i, g: dict(grpo(i, g), reward=0.3 + 0.3 * i / N + g.gauss(0, 0.05 if i < 200 else 0.2)),
                     seed=seed)
        fired = _warns(rows, "grpo", "reward-volatile")
        assert fired and fired[0] > 200, (seed, fired)


def _verifier(i: int, g: random.Random, n: int = 16) -> dict[str, float]:
    """A verifier reward without its spread logged: the mean of ``n`` 0/1 scores whose success rate climbs
    0.05 -> 0.5, its binomial noise growing 2.3x as it does."""
    p = 0.05 + 0.45 * i / N
    row = grpo(i, g)
    row.pop("reward_std")
    row["reward"] = sum(g.random() < p for _ in range(n)) / n
    return row


def test_a_learning_verifier_reward_is_not_volatile():
    """The reward's noise is read in units of the binomial noise its level gives (no reward_std logged)."""
    for seed in range(6):
        assert _warns(build(_verifier, seed=seed), "grpo", "reward-volatile") == [], seed


def _saturating_kl(i: int, g: random.Random, state: list[float], rho: float = 0.6) -> dict[str, float]:
    """A PPO per-sequence KL that saturates (4 (1 - exp(-i / 30))) under AR(1) noise: decelerating by construction."""
    state[0] = rho * state[0] + math.sqrt(1 - rho * rho) * g.gauss(0, 0.5)
    return dict(ppo(i, g), **{"objective/kl": 4.0 * (1 - math.exp(-i / 30)) + state[0]})


def test_a_saturating_kl_under_autocorrelated_noise_is_not_growing():
    """The slope test's t is deflated by sqrt((1 + rho) / (1 - rho)) with rho read on the KL's own warm-up: an
    AR(1) wander of a levelled KL is not "accelerating and on course to pass 6.0"."""
    for seed in range(8):
        state = [0.0]
        rows = build(lambda i, g: _saturating_kl(i, g, state), seed=seed)  # noqa: B023
        assert _warns(rows, "ppo", "kl-growing", max_steps=N) == [], seed


def test_a_kl_that_climbs_is_still_growing_under_autocorrelated_noise():
    """A per-token KL climbing steadily to the warn line from row 150 under the same AR(1) noise: still warned
    before it crosses 0.5."""
    for seed in range(3):
        state = [0.0]

        def make(i: int, g: random.Random) -> dict[str, float]:
            state[0] = 0.6 * state[0] + 0.8 * g.gauss(0, 0.01)  # noqa: B023
            return grpo(i, g, kl=0.05 + 0.6 * max(0, i - 150) / 150 + state[0])  # noqa: B023

        rows = build(make, seed=seed)
        fired = _warns(rows, "grpo", "kl-growing", max_steps=N)
        crossed = next(int(r["step"]) for r in rows if r["kl"] > 0.5)
        assert fired and 150 < fired[0] < crossed, (seed, fired, crossed)


def test_a_kl_estimate_scattered_around_zero_is_not_near_zero_or_noisy():
    """A per-token KL estimate that goes negative about half the time, scattered around a tiny positive level while
    the reward climbs (an RLOO-style estimator on a slowly moving policy): neither kl-near-zero nor kl-noisy."""
    for seed in range(6):
        rows = build(lambda i, g: grpo(i, g, kl=5e-5 + g.gauss(0, 2e-3)), seed=seed)
        assert _warns(rows, "grpo", "kl-near-zero") == [], seed
        assert _warns(rows, "grpo", "kl-noisy") == [], seed


def test_a_kl_pinned_at_zero_is_still_near_zero():
    """A KL pinned at 1e-5 (beta so high, or the reference updated with the policy) still warns."""
    rows = build(lambda i, g: grpo(i, g, kl=1e-5 * (1 + g.gauss(0, 0.1))))
    assert _warns(rows, "grpo", "kl-near-zero")


def _entropy_run(level: float, seed: int, n: int = 60) -> list[dict[str, float]]:
    """A GRPO run whose entropy falls to ~0.35x its start while the reward sits at ``level`` (flat, noisy)."""
    import numpy as np

    g = np.random.default_rng(seed)
    rows = []
    for i in range(1, n + 1):
        ent = 0.16 * (1 - 0.65 * min(1.0, i / 30)) * (1 + 0.05 * g.normal())
        rows.append({"step": float(i), "reward": float(np.clip(level + 0.04 * g.normal(), 0, 1)),
                     "reward_std": 0.2, "entropy": ent, "kl": 0.01, "completions/mean_length": 200.0,
                     "frac_reward_zero_std": 0.7 if level > 0.5 else 0.1})
    return rows


def test_entropy_falling_at_a_saturated_reward_is_sharpening_but_at_a_flat_low_one_is_collapse():
    """A reward near its ceiling has stopped rising because little is left to learn: entropy falling there is not
    mode collapse (real healthy GRPO runs at 0.85-0.93 do this); the same fall with a flat reward at 0.3 is."""

    for seed in range(5):
        high = analyze_rows(_entropy_run(0.9, seed), trainer="grpo")
        assert not [f for f in high.findings if f.rule.startswith("entropy-collapse")], seed
        low = analyze_rows(_entropy_run(0.3, seed), trainer="grpo")
        assert [f for f in low.findings if f.rule == "entropy-collapse" and f.severity == "warn"], seed


def _ar1_rows(make_row, rho: float, sd: float, key: str, seed: int, outliers: float = 0.01):
    """Rows from ``make_row`` with ``key``'s noise replaced by AR(1) noise (coefficient ``rho``, sd ``sd``) plus
    Student-t(3) outliers three times as large on ``outliers`` of the rows: the benchmark's ar1_t3 model."""
    state = [0.0]

    def make(i: int, g: random.Random) -> dict[str, float]:
        row = make_row(i, g)
        state[0] = rho * state[0] + math.sqrt(1 - rho * rho) * g.gauss(0, sd)
        t3 = g.gauss(0, 1) / math.sqrt(g.gammavariate(1.5, 2.0) / 3.0)
        row[key] = row[key] * (1.0 + state[0] + (3 * sd * t3 if g.random() < outliers else 0.0))
        return row

    return build(make, seed=seed)


def test_autocorrelated_length_noise_is_not_a_length_change():
    """Completion length under AR(1) noise (rho 0.6, 12 % sd) with outliers: the smoothed level wanders further than
    independent rows would let it, and the level tests read that (DiffNoise.level_se): no length warning."""
    for seed in range(4):
        rows = _ar1_rows(grpo, 0.6, 0.2, "completions/mean_length", seed)
        assert _warns(rows, "grpo", "length-grew") == [], seed
        assert _warns(rows, "grpo", "length-trend-up") == [], seed


def test_a_length_that_really_grows_under_autocorrelated_noise_still_warns():
    """The same noise with the length growing 2.5x over the second half: length-grew (or its trend) still fires."""
    for seed in range(3):
        def make(i: int, g: random.Random) -> dict[str, float]:
            row = grpo(i, g)
            row["completions/mean_length"] *= 1.0 + 1.5 * max(0.0, (i - N / 2) / (N / 2))
            return row

        rows = _ar1_rows(make, 0.6, 0.2, "completions/mean_length", seed)
        fired = _warns(rows, "grpo", "length-grew") + _warns(rows, "grpo", "length-trend-up")
        assert fired and min(fired) > N / 2, (seed, fired)


@pytest.mark.slow
def test_a_slow_verifier_reward_early_in_a_long_run_is_not_a_plateau():
    """A verifier reward climbing 0.15 -> 0.45 over a planned 700 rows, 16 completions a step (binomial noise ~0.1):
    at row 80 its whole-run t is often under 1, but the slope's upper bound still adds several noise sigmas by the
    end of the run: no plateau while it learns. The same reward flat at 0.15 for 700 rows is one."""
    n = 700

    def verifier(p_of_i) -> list[dict[str, float]]:
        def make(i: int, g: random.Random) -> dict[str, float]:
            row = grpo(i, g)
            row.pop("reward_std")
            row["reward"] = sum(g.random() < p_of_i(i) for _ in range(16)) / 16
            return row

        return build(make, n=n, seed=seed)

    for seed in range(4):
        learning = verifier(lambda i: 0.15 + 0.3 * (1 - math.exp(-i / 500)) / (1 - math.exp(-n / 500)))
        assert _warns(learning, "grpo", "reward-plateau", max_steps=n) == [], seed
        flat = verifier(lambda i: 0.15)
        assert _warns(flat, "grpo", "reward-plateau", max_steps=n), seed


def test_a_noisy_small_entropy_is_not_a_collapse_until_its_fall_stands_out():
    """A per-step entropy of 0.04 measured on a small batch swings +-25 % from row to row. Drifting down to 0.8x its
    start while the reward has not risen yet, its smoothed value dips under the 0.7x line by chance: the fall must
    stand `collapse_se` standard errors of the smoothed level (DiffNoise.level_se) out of that noise first. The same
    entropy falling to 0.3x is a collapse."""
    def run(end: float, seed: int) -> list[dict[str, float]]:
        def make(i: int, g: random.Random) -> dict[str, float]:
            row = grpo(i, g, reward=0.3)
            row["entropy"] = 0.04 * (1.0 - (1.0 - end) * i / N) * (1.0 + g.gauss(0, 0.25))
            return row

        return build(make, seed=seed)

    for seed in range(4):
        assert _warns(run(0.8, seed), "grpo", "entropy-collapse") == [], seed
        assert _warns(run(0.3, seed), "grpo", "entropy-collapse"), seed
