"""The abrupt-break test (core/breaks.py) on streams, and the watcher through the analyzer (issue #47)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wandb_rlcluster.core import analyze_rows
from wandb_rlcluster.core.breaks import BREAK_ARL, BreakTest, jump_threshold
from wandb_rlcluster.core.streams import grpo


def _first_break(x: np.ndarray, after: int = 0) -> tuple[int, object] | None:
    """The first abrupt break (decided within ``ABRUPT_ROWS`` of its onset: what the watcher reports; a slow shift
    only rebases the test's reference)."""
    test = BreakTest()
    for i, v in enumerate(x.tolist()):
        b = test.push(v)
        if b is not None and b.abrupt and i >= after:
            return i, b
    return None


def _ar1(n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(n)
    out[0] = rng.standard_normal()
    s = np.sqrt(1.0 - rho * rho)
    for i in range(1, n):
        out[i] = rho * out[i - 1] + s * rng.standard_normal()
    return out


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize(("noise", "within"), [(0.05, 5), (0.0375, 2)])
def test_a_45_percent_drop_on_a_noisy_reward_is_decided_within_3_rows(seed, noise, within):
    """A reward at 0.5 with 7.5 % row noise (the drop is 6 sigma) is decided by the second row after the one it fell
    on (the third row of the break); with 10 % noise (4.5 sigma), by the fifth."""
    rng = np.random.default_rng(seed)
    x = 0.5 + noise * rng.standard_normal(200)
    x[120:] -= 0.45 * 0.5
    found = _first_break(x)
    assert found is not None
    row, b = found
    assert 120 <= row <= 120 + within and b.sign == -1 and 120 <= b.onset <= 123  # push rows count from 1
    assert b.share == pytest.approx(-0.45, abs=0.15) and b.sigmas < -3


@pytest.mark.parametrize("size", [5.0, 20.0, 1000.0])
def test_an_isolated_spike_is_not_a_break(size):
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(300)
        x[150] += size if seed % 2 else -size
        assert _first_break(x) is None, (size, seed)


def test_two_outliers_in_a_row_are_not_a_break_but_three_rows_that_hold_are():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(300)
    x[150:152] -= 8.0
    assert _first_break(x) is None
    x[152] -= 8.0  # the third row holds: a break (or three rows out of a healthy noise: far past the budget)
    found = _first_break(x)
    assert found is not None and found[0] == 152


@pytest.mark.parametrize("seed", range(8))
def test_a_healthy_ar1_095_series_of_2000_rows_does_not_break(seed):
    """At the declared budget (one false break per 200,000 rows), 2,000 rows of strongly autocorrelated noise with a
    trend under it fire about once in a hundred series: eight seeds see none."""
    rng = np.random.default_rng(100 + seed)
    x = _ar1(2000, 0.95, rng) + np.linspace(0.0, 2.0, 2000)
    assert _first_break(x) is None


def test_a_break_under_autocorrelated_noise_is_still_decided_in_rows():
    rng = np.random.default_rng(7)
    x = _ar1(400, 0.95, rng)
    x[250:] += 5.0
    found = _first_break(x, after=250)
    assert found is not None and found[0] <= 252 and found[1].sign == 1


def test_the_budget_sets_the_thresholds():
    assert jump_threshold(BREAK_ARL) > jump_threshold(1_000.0) > 3.0
    assert BreakTest(1_000.0).hs[0] < BreakTest(BREAK_ARL).hs[0]


def test_a_resumed_test_decides_as_an_unbroken_one():
    rng = np.random.default_rng(11)
    x = rng.standard_normal(300)
    x[200:] += 6.0
    whole = BreakTest()
    first = [i for i, v in enumerate(x.tolist()) if whole.push(v) is not None]
    a = BreakTest()
    for v in x[:180].tolist():
        assert a.push(v) is None
    b = BreakTest()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    resumed = [180 + i for i, v in enumerate(x[180:].tolist()) if b.push(v) is not None]
    assert first == resumed and first


# -- through the analyzer ---------------------------------------------------------------------------------------------

def _run(fall: float, policy_moves: bool, seed: int = 0, gold: bool = False) -> list[dict[str, float]]:
    g = np.random.default_rng(seed)
    rows = []
    for i in range(1, 201):
        r = grpo(i, g)
        r["reward"] = 0.3 + 0.3 * i / 200 + 0.03 * float(g.normal())  # 6 % noise at row 120: the fall is 7 sigma
        if gold:
            r["rewards/gold/mean"] = r["reward"]
        if i >= 120:
            r["reward"] *= 1.0 - fall
            if policy_moves:
                r["entropy"] *= 0.5
                r["completions/mean_length"] *= 1.6
        rows.append({"step": float(i), **r})
    return rows


def _breaks(cluster, rule: str = "abrupt-break"):
    return [f for f in cluster.findings if f.gauge == "breaks" and f.rule.split(":")[0] == rule]


def test_a_reward_that_falls_45_percent_and_stays_is_warned_within_3_rows_with_what_broke_it():
    cluster = analyze_rows(_run(0.45, policy_moves=False), trainer="grpo")
    found = [f for f in _breaks(cluster) if f.rule == "abrupt-break:reward"]
    assert found and found[0].severity == "warn" and 120 <= found[0].step <= 122
    text = found[0].message
    assert "at step 120" in text and "%" in text and "sigma" in text
    assert "did not move" in text and "reward function" in text  # the policy's quantities held: the score changed


def test_a_break_with_the_policy_moving_says_the_policy_changed():
    cluster = analyze_rows(_run(0.45, policy_moves=True), trainer="grpo")
    reward = [f for f in _breaks(cluster) if f.rule == "abrupt-break:reward"]
    assert reward and 120 <= reward[0].step <= 122
    assert "restore" in reward[0].message or any(
        f.rule in ("abrupt-break:entropy", "abrupt-break:length") for f in _breaks(cluster))
    assert {f.rule for f in _breaks(cluster)} >= {"abrupt-break:entropy", "abrupt-break:length"}


def test_a_healthy_run_has_no_break_and_a_reward_rising_at_once_is_left_to_reward_shift_up():
    healthy = analyze_rows(_run(0.0, policy_moves=False, seed=4), trainer="grpo")
    assert not _breaks(healthy) and not _breaks(healthy, "abrupt-shift")
    up = analyze_rows(_run(-0.8, policy_moves=False, seed=4), trainer="grpo")
    assert not [f for f in _breaks(up) if f.rule.endswith(":reward")]
    assert not [f for f in _breaks(up, "abrupt-shift") if f.rule.endswith(":reward")]


def test_a_proxy_that_parts_from_its_gold_at_once_is_a_split():
    params = {"reward": {"gold": ["gold"]}}
    cluster = analyze_rows(_run(0.7, policy_moves=False, gold=True), trainer="grpo", params=params)
    split = _breaks(cluster, "proxy-gold-split")
    assert split and split[0].severity == "warn" and 120 <= split[0].step <= 122
    assert "gold" in split[0].message
    together = analyze_rows([{**r, "rewards/gold/mean": r["reward"]} for r in _run(0.7, policy_moves=False)],
                            trainer="grpo", params=params)
    assert not _breaks(together, "proxy-gold-split")
    assert [f for f in _breaks(together) if f.rule == "abrupt-break:gold"]
