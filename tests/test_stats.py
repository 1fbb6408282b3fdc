"""The streaming statistics agree with their batch definitions."""

from __future__ import annotations

import json
import math
import random
import statistics

import numpy as np
import pytest

from wandb_rlcluster.core.stats import (
    Baseline,
    Ewma,
    PeriodicFit,
    RollingCorrelation,
    RollingSlope,
    RollingWindow,
    RunningRegression,
    ShiftDetector,
    StepGaps,
    robust_z,
)


def test_rolling_window_matches_batch():
    rng = random.Random(0)
    w = RollingWindow(20)
    xs = [rng.gauss(3, 2) for _ in range(10_000)]
    for x in xs:
        w.push(x)
    tail = xs[-20:]
    assert len(w) == 20 and w.full
    assert math.isclose(w.mean(), statistics.fmean(tail), rel_tol=1e-9)
    assert math.isclose(w.var(), statistics.variance(tail), rel_tol=1e-6)
    assert w.median() == statistics.median(tail)
    assert w.min() == min(tail) and w.max() == max(tail)


def test_rolling_slope_matches_polyfit():
    w = RollingSlope(30)
    xs = np.arange(100.0)
    ys = 0.5 * xs + np.sin(xs)
    for x, y in zip(xs, ys, strict=True):
        w.push(float(x), float(y))
    expected = np.polyfit(xs[-30:], ys[-30:], 1)[0]
    assert math.isclose(w.slope(), expected, rel_tol=1e-9)


def test_running_regression_t_stat():
    rng = np.random.default_rng(1)
    flat, rising = RunningRegression(), RunningRegression()
    ys = []
    for i in range(200):
        flat.push(i, float(rng.normal()))
        ys.append(0.02 * i + float(rng.normal()))
        rising.push(i, ys[-1])
    assert abs(flat.t_stat()) < 3
    assert rising.t_stat() > 8
    assert math.isclose(rising.slope(), np.polyfit(np.arange(200), ys, 1)[0], rel_tol=1e-6)


def test_robust_z_ignores_one_outlier_in_history():
    w = RollingWindow(30)
    for i in range(29):
        w.push(1.0 + 0.01 * (i % 3))
    w.push(100.0)  # one wild point in the history does not inflate the scale
    assert robust_z(1.5, w) > 10
    assert abs(robust_z(1.01, w)) < 2


def test_ewma_converges_and_baseline_freezes():
    e = Ewma(0.2)
    for _ in range(200):
        e.push(5.0)
    assert math.isclose(e.mean, 5.0) and e.var < 1e-12
    b = Baseline(5)
    for x in [10, 1, 2, 3, 4, 100, 200]:
        b.push(float(x))
    assert b.ready and b.value == 3.0  # median of the first five; later values do not move it


def _gaps(steps: list[float]) -> list[float]:
    """The steps whose row follows a gap in the log."""
    g = StepGaps()
    return [s for s in steps if g.push(s)]


def test_step_gaps_find_a_gap_in_the_log_not_an_odd_first_row():
    """Baselines span steps (issue #37): a row hundreds of steps after the last is not early in the run."""
    assert _gaps([float(5 * i) for i in range(1, 400)]) == []  # every 5 steps
    assert _gaps([1.0] + [float(10 * i) for i in range(1, 100)]) == []  # logging_first_step: 1, 10, 20, ...
    assert _gaps([1.0, 2.0, 2.0, 3.0, 1.0, 2.0, 3.0]) == []  # a repeated step, a counter that restarted
    # TinyZero's notes: steps 2, 52, 92, 122 pasted as "part of the log", then 383-399 contiguous
    assert _gaps([2.0, 52.0, 92.0, 122.0, *map(float, range(383, 400))]) == [383.0]
    # a resumed run's jump after the interval is learned
    assert _gaps([*map(float, range(1, 31)), *map(float, range(500, 520))]) == [500.0]
    g = StepGaps()
    for s in (2.0, 52.0, 92.0, 122.0, 383.0):
        g.push(s)
    g2 = StepGaps()
    g2.load_state_dict(json.loads(json.dumps(g.state_dict())))
    assert g2.interval == g.interval == 40.0 and g2.push(1000.0)


def test_a_baseline_closed_at_a_gap_keeps_the_start_and_a_restarted_ewma_forgets():
    b = Baseline(10)
    for x in (1.2, 1.3, 0.9, 0.8):
        b.push(x)
    b.close()
    b.push(0.005)
    assert b.ready and b.value == pytest.approx(1.05)
    empty = Baseline(10)
    empty.close()
    assert not empty.ready  # nothing collected: still open
    e = Ewma(0.2)
    for x in (1.2, 1.3, 0.9):
        e.push(x)
    e.restart()
    assert e.push(0.005) == 0.005


def _corr(xs: list[float], ys: list[float]) -> float:
    c = RollingCorrelation(len(xs))
    for x, y in zip(xs, ys, strict=True):
        c.push(x, y)
    return c.corr()


def test_rolling_correlation():
    xs = [float(i) for i in range(50)]
    assert math.isclose(_corr(xs, [2 * x + 1 for x in xs]), 1.0)
    assert math.isclose(_corr(xs, [-x for x in xs]), -1.0)
    assert _corr(xs, [1.0] * 50) == 0.0


def test_state_roundtrip():
    w = RollingWindow(5)
    for x in range(8):
        w.push(float(x))
    w2 = RollingWindow(1)
    w2.load_state_dict(w.state_dict())
    assert w2.values() == w.values() and w2.mean() == w.mean()


def test_periodic_fit_finds_a_repeating_swing_under_a_trend_and_not_in_noise():
    """PeriodicFit: a sinusoid on a quadratic trend is explained by its own period and amplitude; the trend alone
    leaves nothing to explain; white noise spreads over every period (its best share stays far below a swing's);
    the state round-trips, window size included."""
    rng = np.random.default_rng(0)
    xs = np.arange(32)
    fit = PeriodicFit(32)
    for v in 1.0 - 0.02 * xs + 0.0004 * xs**2 + 0.3 * np.sin(2 * np.pi * xs / 7.0) + 0.02 * rng.standard_normal(32):
        fit.push(float(v))
    share, amp, period = fit.compute()
    assert share > 0.9 and abs(amp - 0.3) < 0.05 and period == 7.0
    trend = PeriodicFit(32)
    for v in 1.0 - 0.02 * xs + 0.0004 * xs**2:
        trend.push(float(v))
    assert trend.compute()[0] == 0.0
    shares = []
    for _ in range(200):
        noise = PeriodicFit(32)
        for v in rng.standard_normal(32):
            noise.push(float(v))
        shares.append(noise.compute()[0])
    assert np.median(shares) < 0.3 and np.quantile(shares, 0.99) < 0.65
    short = PeriodicFit(20)
    assert max(short.periods) <= 20 / 2.5 and min(short.periods) == 3.5
    again = PeriodicFit(32)
    again.load_state_dict(json.loads(json.dumps(fit.state_dict())))
    assert again.compute() == fit.compute()
    resized = PeriodicFit(32)
    resized.load_state_dict(short.state_dict())
    assert resized.size == 20 and resized.periods == short.periods


def test_shift_detector_clips_an_outlier_row_and_its_clip_is_a_setting_not_state():
    """One row 10 sigmas out adds clip - k to the CUSUM; the row after it, out on the same side too, adds 2 clip - k
    (a collapse holds, an outlier does not). A checkpoint keeps the sums, not the clip: a resumed run takes the clip
    it is given now."""
    det = ShiftDetector(k=1.0, h=12.0, alpha=0.05, warmup=10, clip=4.0)
    g = random.Random(0)
    for _ in range(40):
        det.push(g.gauss(0.0, 1.0))
    sigma, before = det.sigma(), det.down
    det.push(det.ref - 10 * sigma)
    assert det.down - before == pytest.approx(3.0, abs=0.05)
    second = det.down
    det.push(det.ref - 10 * sigma)
    assert det.down - second == pytest.approx(7.0, abs=0.05)
    resumed = ShiftDetector(k=1.0, h=12.0, alpha=0.05, warmup=10, clip=2.0)
    resumed.load_state_dict(json.loads(json.dumps(det.state_dict())))
    assert resumed.clip == 2.0 and resumed.down == det.down and resumed.n == det.n
