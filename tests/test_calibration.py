"""CI slice of the calibration harness (``benchmarks/calibration``): a reduced grid of healthy streams within every
rule's false-alarm budget, the noise models being what they say, and the harness able to fail and to time a change.

The full grid (12 noise models, 5 families, 30 seeds) is ``python benchmarks/calibration/harness.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from calibration import harness, noise, streams
from calibration.streams import Change

SLICE_MODELS = ("iid", "t3")


@pytest.fixture(scope="module")
def slice_outcomes() -> list[harness.Outcome]:
    return harness.run_all(harness.healthy_jobs(harness.SLICE_SEEDS, SLICE_MODELS), workers=1, progress=False)


def test_reduced_grid_within_budget(slice_outcomes: list[harness.Outcome]) -> None:
    """Every family under iid Gaussian and t(3)-outlier noise: no rule over its budget (at one or two runs a cell,
    any warning on these healthy streams is over)."""
    assert len(slice_outcomes) == len(SLICE_MODELS) * len(streams.FAMILIES) * len(harness.SLICE_SEEDS)
    table, over = harness.alarm_table(slice_outcomes, SLICE_MODELS)
    assert over == [], "\n".join(table)


def test_over_budget_is_a_binomial_excess() -> None:
    assert harness.over_budget(3, 30, 0.02)  # P(X >= 3 | 30, 2 %) = 2.2 %
    assert not harness.over_budget(2, 30, 0.02)  # 12 %: chance
    assert not harness.over_budget(0, 30, 0.02)
    assert harness.binom_tail(1, 10, 0.1) == pytest.approx(1 - 0.9 ** 10)


def test_a_real_change_reads_as_over_budget_and_is_timed() -> None:
    """The harness can fail: streams carrying a 10-sigma reward drop counted as healthy put the rule that caught it
    over budget; the rule warns within rows of the drop, and the clairvoyant CUSUM within two."""
    jobs = [harness.Job("grpo", "iid", s, 200, Change("rewards/accuracy_reward/mean", -1.0, 10.0, "abrupt", 100))
            for s in (0, 1)]
    outs = harness.run_all(jobs, workers=1, progress=False)
    for o in outs:
        assert o.cusum_row is not None and 100 <= o.cusum_row <= 102
        delays = [st - 1 - 100 for st in o.first.values() if st - 1 >= 100]
        assert delays and min(delays) <= 30
    assert any(harness.false_alarms(outs)[rid]["iid"].over for rid in {r for o in outs for r in o.first})


def test_noise_models_are_what_they_say() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    for rho in (0.5, 0.8, 0.95):
        x = noise.unit(f"ar1_{rho}", n, rng)
        assert np.corrcoef(x[:-1], x[1:])[0, 1] == pytest.approx(rho, abs=0.03)
        assert np.std(x) == pytest.approx(1.0, abs=0.1)
    b = noise.unit("band", n, rng)
    power = np.abs(np.fft.rfft(b)) ** 2
    f = np.fft.rfftfreq(n)
    assert power[(f >= 1 / 16) & (f <= 1 / 4)].sum() / power.sum() > 0.99
    t = noise.unit("t3", n, rng)
    assert np.mean(np.abs(t) > 5) > 0.002  # outliers a Gaussian does not make (P(|z| > 5) ~ 6e-7)
    d = noise.drift(200, -1.0, rng)
    assert d[0] == 0 and d[-1] < -0.9 * noise.DRIFT_SIGMAS and np.all(np.diff(d) <= 0)


def test_streams_keep_their_meaning() -> None:
    """Ratios stay shares, derived keys follow their parts, logging every 10 steps gives a tenth of the rows."""
    s = streams.make_stream("grpo", "binom_g8", 0, 120)
    rows = s.rows[:-1]
    for r in rows:
        assert 0.0 <= r["rewards/accuracy_reward/mean"] <= 1.0 and 0.0 <= r["frac_reward_zero_std"] <= 1.0
        assert r["reward"] == pytest.approx(r["rewards/accuracy_reward/mean"] + r["rewards/format_reward/mean"])
        assert (r["rewards/accuracy_reward/mean"] * 16) == pytest.approx(round(r["rewards/accuracy_reward/mean"] * 16))
    d = streams.make_stream("dpo", "ar1_0.8", 0, 120).rows[:-1]
    assert all(r["rewards/margins"] == pytest.approx(r["rewards/chosen"] - r["rewards/rejected"]) for r in d)
    ten = streams.make_stream("sft", "iid_every10", 0, 60).rows[:-1]
    assert len(ten) == 60 and [r["step"] for r in ten[:2]] == [10.0, 20.0]
