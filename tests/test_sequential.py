"""The sequential-test engine (core/sequential.py): thresholds from a false-alarm budget hold under the null, by
simulation, and a known shift is found within the delay the theory gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wandb_rlcluster.core.sequential import (
    Ar1,
    Cusum,
    MultiCusum,
    ar1_inflation,
    arl_for,
    bounded_mean_sd,
    cusum_threshold,
    siegmund_arl,
)


def _ar1_noise(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    e = rng.standard_normal(n)
    x = np.empty(n)
    prev = 0.0
    for i, v in enumerate(e):
        prev = rho * prev + math.sqrt(1.0 - rho * rho) * v
        x[i] = prev
    return x


def _run_length(chart: Cusum | MultiCusum, z: np.ndarray, rho: float) -> int:
    for i, v in enumerate(z.tolist()):
        if chart.push(v, rho):
            return i + 1
    return len(z)


@pytest.mark.parametrize(("k", "rho"), [(0.25, 0.0), (0.5, 0.0), (1.0, 0.0), (0.5, 0.3), (0.5, 0.6), (1.0, 0.6)])
def test_cusum_arl_under_the_null_is_the_budget(k: float, rho: float) -> None:
    """200 rows to a false alarm declared: the mean run length over 300 simulated null runs (i.i.d. or AR(1)
    noise, the latter prewhitened with its known rho) is within 25 % of it (Siegmund's approximation is within
    about 10 %; 300 runs of a roughly geometric length have a standard error of about 6 %)."""
    rng = np.random.default_rng(int(100 * k + 10 * rho))
    lengths = [_run_length(Cusum(k, 200.0), _ar1_noise(rng, 4000, rho), rho) for _ in range(300)]
    assert 150 <= float(np.mean(lengths)) <= 250


def test_ignoring_autocorrelation_spends_the_budget_early() -> None:
    """The mechanism the AR(1) model fixes: an AR(1) noise with rho 0.6 read as independent fires several times as
    often as budgeted."""
    rng = np.random.default_rng(7)
    lengths = [_run_length(Cusum(0.5, 200.0), _ar1_noise(rng, 4000, 0.6), 0.0) for _ in range(200)]
    assert float(np.mean(lengths)) < 80


def test_cusum_delay_on_a_known_shift() -> None:
    """A 1-sigma shift from row 0, chart tuned for it (k = 0.5) at a budget of 500 rows: the mean delay is close to
    Lorden's (h + 1.166) / (d - k) and far under a fixed 20-row window."""
    rng = np.random.default_rng(3)
    h = cusum_threshold(500.0, 0.5)
    delays = [_run_length(Cusum(0.5, 500.0), rng.standard_normal(500) + 1.0, 0.0) for _ in range(300)]
    theory = (h + 1.166) / 0.5
    assert 0.8 * theory <= float(np.mean(delays)) <= 1.2 * theory
    assert float(np.mean(delays)) < 20


def test_multicusum_keeps_its_budget_and_catches_every_size() -> None:
    """The bank of three charts at a share of the budget each: its ARL0 is at least the budget (Bonferroni is
    conservative), and a small and a large shift are both found sooner than by the chart tuned for the other."""
    rng = np.random.default_rng(11)
    null = [_run_length(MultiCusum(arl=200.0), rng.standard_normal(5000), 0.0) for _ in range(200)]
    assert float(np.mean(null)) >= 180
    big = [_run_length(MultiCusum(arl=500.0), rng.standard_normal(200) + 3.0, 0.0) for _ in range(200)]
    big_small_k = [_run_length(Cusum(0.25, 500.0), rng.standard_normal(200) + 3.0, 0.0) for _ in range(200)]
    assert float(np.mean(big)) < float(np.mean(big_small_k))
    small = [_run_length(MultiCusum(arl=500.0), rng.standard_normal(2000) + 0.5, 0.0) for _ in range(200)]
    small_big_k = [_run_length(Cusum(1.0, 500.0), rng.standard_normal(2000) + 0.5, 0.0) for _ in range(200)]
    assert float(np.mean(small)) < float(np.mean(small_big_k))


def test_threshold_inverts_the_arl_approximation() -> None:
    for k in (0.1, 0.5, 1.0, 2.0):
        for arl in (50.0, 500.0, 5000.0):
            assert siegmund_arl(cusum_threshold(arl, k), k) == pytest.approx(arl, rel=1e-6)


def test_ar1_estimate_ignores_a_trend() -> None:
    """rho from the differences, under a steep linear trend: over 30 series of 300 rows the estimates average within
    0.08 of 0 and of 0.5 (one series' estimate has a standard error of about 0.1 at 300 rows, and at 0 the clip to
    [0, 0.9] biases the mean up by about 0.04); a trend alone is not autocorrelated noise."""
    rng = np.random.default_rng(5)
    for rho in (0.0, 0.5):
        estimates = []
        for _ in range(30):
            est = Ar1(300, prior=0.0)
            for i, v in enumerate(_ar1_noise(rng, 302, rho).tolist()):
                est.push(v + 0.05 * i)
            estimates.append(est.rho)
            assert est.inflation() == pytest.approx(ar1_inflation(est.rho))
        assert abs(float(np.mean(estimates)) - rho) < 0.08


def test_ar1_upper_bound_covers_rho_early():
    """40 rows of AR(1) noise with rho 0.6: the point estimate is often far under 0.6; the upper bound (one standard
    error up) is at or above 0.6 in most series, and on white noise it stays under 0.6 in most."""
    rng = np.random.default_rng(9)
    for rho, above in ((0.6, True), (0.0, False)):
        hits = 0
        for _ in range(40):
            est = Ar1(40)
            for v in _ar1_noise(rng, 42, rho).tolist():
                est.push(v)
            hits += est.upper() >= 0.6 - 1e-9
        assert (hits >= 28) if above else (hits <= 12), (rho, hits)


def test_ar1_is_read_on_the_warm_up_then_frozen() -> None:
    est = Ar1(20)
    assert est.prior == 40.0  # shrunk by default: 20 rows read at 20 / 60 of their estimate
    rng = np.random.default_rng(2)
    for v in rng.standard_normal(25).tolist():
        est.push(v)
    frozen = est.rho
    for v in np.cumsum(rng.standard_normal(200)).tolist():  # a random walk afterwards: not its warm-up noise
        est.push(v)
    assert est.rho == frozen
    state = est.state_dict()
    again = Ar1(99, prior=0.0)
    again.load_state_dict(state)
    assert again.rho == frozen and again.size == 20


def test_bounded_mean_noise_grows_with_the_success_rate() -> None:
    """A verifier reward's row noise at 0.5 success is 5/3 of that at 0.1 (sqrt(0.25 / 0.09)); a reward in [-1, 1]
    uses its span."""
    assert bounded_mean_sd(0.5, 16) / bounded_mean_sd(0.1, 16) == pytest.approx(5.0 / 3.0)
    assert bounded_mean_sd(0.0, 16, -1.0, 1.0) == pytest.approx(2.0 * 0.5 / 4.0)
    assert bounded_mean_sd(1.0, 16) == 0.0


def test_warn_sooner_is_a_larger_budget() -> None:
    assert arl_for(0) > arl_for(1) > arl_for(2) > arl_for(3)
    assert cusum_threshold(arl_for(1), 0.5) < cusum_threshold(arl_for(0), 0.5)


def test_cusum_checkpoint_round_trip() -> None:
    a = Cusum(0.5, 300.0)
    rng = np.random.default_rng(4)
    z = (rng.standard_normal(60) + 0.3).tolist()
    for v in z[:30]:
        a.push(v, 0.4)
    b = Cusum(0.5, 300.0)
    b.load_state_dict(a.state_dict())
    for v in z[30:]:
        assert a.push(v, 0.4) == b.push(v, 0.4)
    assert a.s == b.s and a.since == b.since


def test_noise_rise_threshold_keeps_its_budget_by_simulation() -> None:
    """NoiseRiseCusum's threshold comes from the Brook-Evans Markov chain: on N(0, 1) rows its simulated ARL0 is
    within 25 % of the budget, and a noise 3x as large is found within a dozen rows."""
    from wandb_rlcluster.core.sequential import NoiseRiseCusum, noise_rise_arl

    rng = np.random.default_rng(7)
    arl = 500.0
    lengths = []
    for _ in range(300):
        c = NoiseRiseCusum(2.0, arl)
        z = rng.standard_normal(20 * int(arl))
        lengths.append(next((i + 1 for i, v in enumerate(z.tolist()) if c.push(v)), len(z)))
    assert 0.75 * arl <= float(np.mean(lengths)) <= 1.25 * arl
    assert abs(noise_rise_arl(c.h, 2.0, 9.0) - arl) / arl < 0.01
    delays = []
    for _ in range(100):
        c = NoiseRiseCusum(2.0, arl)
        z = 3.0 * rng.standard_normal(200)
        delays.append(next(i + 1 for i, v in enumerate(z.tolist()) if c.push(v)))
    assert float(np.median(delays)) <= 12


def test_one_outlier_adds_bounded_evidence_to_the_noise_test() -> None:
    """A 30-sigma row counts as a 3-sigma one (z^2 clipped at 9): it cannot cross the threshold alone."""
    from wandb_rlcluster.core.sequential import NoiseRiseCusum

    c = NoiseRiseCusum(1.8, 20000.0)
    assert not c.push(30.0)
    assert c.s <= c.a * 9.0


def test_diff_noise_reads_autocorrelation_and_widens_its_level_error() -> None:
    """DiffNoise under AR(1) noise (rho 0.6, 1 % Student-t outliers): rho is read near its value, and the standard
    error of a smoothed level is wider than the independent-rows formula by about the theory's factor."""
    from wandb_rlcluster.core.sequential import ewma_var_factor
    from wandb_rlcluster.core.stats import DiffNoise

    rng = np.random.default_rng(3)
    rhos, ratios = [], []
    for _ in range(40):
        x = _ar1_noise(rng, 300, 0.6)
        out = rng.random(300) < 0.01
        x[out] += 3.0 * rng.standard_t(3, out.sum())
        dn = DiffNoise(20)
        for v in x.tolist():
            dn.push(v)
        rhos.append(dn.rho)
        iid = dn.sigma() * math.sqrt(ewma_var_factor(0.2))
        ratios.append(dn.level_se(0.2) / iid)
    assert 0.35 <= float(np.median(rhos)) <= 0.7
    assert float(np.median(ratios)) > 1.8  # sqrt(1 / 0.5) * sqrt(1.4 / 0.6) ~ 2.2 at rho 0.5
    white = DiffNoise(20)
    for v in rng.standard_normal(300).tolist():
        white.push(v)
    assert white.rho < 0.2


def test_ar1_lower_bound_reads_zero_on_white_noise_and_most_of_a_real_rho() -> None:
    """Ar1.lower: white noise gives 0 (a test does not spend delay on a chance rho); rho 0.6 gives a clear part of it,
    never more than the shrunk estimate."""
    rng = np.random.default_rng(11)
    white, red = [], []
    for _ in range(40):
        a, b = Ar1(), Ar1()
        for v in rng.standard_normal(300).tolist():
            a.push(v)
        for v in _ar1_noise(rng, 300, 0.6).tolist():
            b.push(v)
        white.append(a.lower())
        red.append((b.lower(), b.rho))
    assert float(np.median(white)) == 0.0
    assert float(np.median([lo for lo, _ in red])) > 0.25
    assert all(lo <= rho for lo, rho in red)
