"""Sequential change detection with thresholds from a declared false-alarm budget (issue #28).

A rule that waits ``k`` rows in a row has a false-alarm rate nobody chose: it depends on the noise's tails, its
autocorrelation and the run's length. The tests here decide from evidence accumulated row by row, and their
thresholds come from a budget, the *average run length to a false alarm* (ARL0, in logged rows) under the
metric's noise model:

* noise models: ``Ar1`` (the lag-1 autocorrelation of a series' noise, estimated from its first differences so
  that a trend does not count as correlation), ``ar1_inflation`` (how much an AR(1) noise overstates a mean's or a
  slope's t-statistic), ``bounded_mean_sd`` (the row noise of a mean of scores bounded in [0, 1]: binomial,
  from the level and the batch);
* tests: ``Cusum`` (Page's one-sided CUSUM for a shift of known size, threshold from Siegmund's ARL
  approximation) and ``MultiCusum`` (a bank of CUSUMs for a shift of unknown size, the discrete form of a GLR
  test, each at a share of the budget);
* the budget: ``arl_for`` (the ARL0 a rule is held to, ``warn_sooner`` dividing it: the one user dial means a
  larger false-alarm budget).

Pure Python, O(1) per row, checkpointable like the rest of ``core.stats``.
"""

from __future__ import annotations

import math
from typing import Any

from .fields import slot_names

BASE_ARL = 2000.0
"""Rows to a false alarm per warn test on stationary noise: a 2,000-row healthy run sees about one per test at
most, and most healthy runs are shorter."""
SOONER_FACTOR = 4.0
"""Each step of ``warn_sooner`` divides the ARL0 by this (0: 2,000 rows, 1: 500, 2: 125, 3: 31)."""
MAX_RHO = 0.9
"""An AR(1) coefficient is capped here: beyond it a series is a random walk to the tests, not noise."""


def arl_for(warn_sooner: int = 0, base: float = BASE_ARL) -> float:
    """The ARL0 (rows to a false alarm) a warn test is held to under the user's ``warn_sooner`` dial."""
    return base / SOONER_FACTOR ** max(int(warn_sooner), 0)


def siegmund_arl(h: float, k: float) -> float:
    """Siegmund's approximation of a one-sided CUSUM's ARL0 on N(0, 1) rows, reference ``k`` and threshold ``h``
    (``s = max(0, s + z - k)``, alarm when ``s > h``): exp(2kb) - 2kb - 1 over 2k^2, with b = h + 1.166."""
    b = h + 1.166
    if k <= 1e-9:
        return b * b
    x = 2.0 * k * b
    return (math.exp(x) - x - 1.0) / (2.0 * k * k) if x < 700 else math.inf


def cusum_threshold(arl: float, k: float) -> float:
    """The threshold ``h`` at which a one-sided CUSUM with reference ``k`` has ARL0 ``arl`` (bisection on
    ``siegmund_arl``, which increases with ``h``)."""
    lo, hi = 0.0, 1.0
    while siegmund_arl(hi, k) < arl:
        hi *= 2.0
        if hi > 1e6:
            return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if siegmund_arl(mid, k) < arl:
            lo = mid
        else:
            hi = mid
    return hi


def ar1_var_factor(rho: float) -> float:
    """How much AR(1) noise with coefficient ``rho`` inflates the variance of a mean (or a least-squares slope) over
    many rows, against independent rows: (1 + rho) / (1 - rho), ``rho`` clipped to [0, ``MAX_RHO``]."""
    r = min(max(rho, 0.0), MAX_RHO)
    return (1.0 + r) / (1.0 - r)


def ar1_inflation(rho: float) -> float:
    """How many times an AR(1) noise with coefficient ``rho`` overstates a t-statistic that treats its rows as
    independent (of a mean or a least-squares slope over many rows): sqrt((1 + rho) / (1 - rho))."""
    return math.sqrt(ar1_var_factor(rho))


def ewma_var_factor(alpha: float, rho: float = 0.0) -> float:
    """The stationary variance of an EWMA(``alpha``) of AR(1) noise (coefficient ``rho``), in units of the noise's
    variance: alpha / (2 - alpha) (1 + rho (1 - alpha)) / (1 - rho (1 - alpha))."""
    lam = (1.0 - alpha) * min(max(rho, 0.0), MAX_RHO)
    return alpha / (2.0 - alpha) * (1.0 + lam) / (1.0 - lam)


def bounded_mean_sd(level: float, n: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """The row-to-row noise of a mean of ``n`` scores bounded in [``lo``, ``hi``] at mean ``level``: at most the
    binomial sd, (hi - lo) sqrt(p (1 - p) / n) with p the level's place in the range. A verifier reward's noise grows
    like this as its success rate climbs from 0.1 to 0.5: learning, not instability."""
    span = hi - lo
    if span <= 0 or n <= 0:
        return math.nan
    p = min(max((level - lo) / span, 0.0), 1.0)
    return span * math.sqrt(p * (1.0 - p) / n)


class Ar1:
    """The AR(1) coefficient of a series' noise, from the lag-1 autocorrelation of its first differences.

    For x = trend + AR(1) noise with coefficient rho, the differences have lag-1 autocorrelation -(1 - rho) / 2
    whatever a smooth trend does, so rho = 1 + 2 r1 (clipped to [0, ``MAX_RHO``]); white noise gives 0. Read over
    the first ``size`` rows (the run's warm-up), then frozen: a pathology must not teach the test its own noise.
    A few dozen rows give an estimate with a standard error near 0.25: it is shrunk towards 0 by n / (n + ``prior``)
    so that a chance high reading early does not mute a test (a white-noise run must keep its full power).
    """

    __slots__ = ("size", "prior", "n", "last", "prev_d", "sd", "sdd", "sd1", "sdd1", "value", "clip", "sabs")

    def __init__(self, size: int = 200, prior: float = 40.0, clip: float = 0.0) -> None:
        self.size = max(8, int(size))
        self.prior = max(float(prior), 0.0)
        self.clip = float(clip)  # > 0: each difference clipped at this many sigmas of the differences so far
        self.sabs = 0.0  # sum of |d|: a scale one outlier moves little
        self.n = 0
        self.last = math.nan
        self.prev_d = math.nan
        self.sd = self.sdd = self.sd1 = self.sdd1 = 0.0  # sums of d, d^2, d*d_prev, d_prev
        self.value = 0.0

    def push(self, x: float) -> None:
        if self.n >= self.size:
            return
        if self.last == self.last:
            self.push_diff(x - self.last)
        self.last = x

    def push_diff(self, d: float) -> None:
        """One first difference (a caller that already differences, and may clip, its series)."""
        if self.n >= self.size:
            return
        if self.clip > 0.0 and self.n >= 8:
            # one outlier row makes two large differences of opposite sign: unclipped, they read as
            # anti-correlation and hide the real correlation (sigma of d ~ sqrt(pi / 2) mean |d|)
            lim = self.clip * 1.2533 * self.sabs / self.n
            d = min(max(d, -lim), lim)
        if self.prev_d == self.prev_d:
            self.n += 1
            self.sabs += abs(d)
            self.sd += d
            self.sdd += d * d
            self.sd1 += d * self.prev_d
            self.sdd1 += self.prev_d
            if self.n >= 8:
                self.value = self._estimate()
        self.prev_d = d

    def _estimate(self) -> float:
        n = self.n
        m, m1 = self.sd / n, self.sdd1 / n
        var = self.sdd / n - m * m
        if var <= 0:
            return 0.0
        r1 = (self.sd1 / n - m * m1) / var
        return min(max(1.0 + 2.0 * r1, 0.0), MAX_RHO) * n / (n + self.prior)

    def _raw(self) -> float:
        """The estimate before the shrinkage towards 0 (its confidence bounds are read around this)."""
        return self.value * (self.n + self.prior) / self.n

    @property
    def rho(self) -> float:
        return self.value

    def inflation(self) -> float:
        return ar1_inflation(self.value)

    def upper(self, z: float = 1.0) -> float:
        """An upper confidence bound on rho: the raw estimate plus ``z`` of its standard error (about 2 / sqrt(n) for
        this estimator), before the shrinkage. A test that must keep its false-alarm budget while rho is still
        uncertain deflates by this, not by the point estimate: under-reading a rho of 0.6 as 0.3 spends the budget."""
        if self.n < 8:
            return 0.0
        return min(self._raw() + z * 2.0 / math.sqrt(self.n), MAX_RHO)

    def lower(self, z: float = 1.0) -> float:
        """A lower confidence bound on rho (the raw estimate minus ``z`` standard errors, at least 0, at most the
        shrunk estimate): what a test may take off its evidence for sure. White noise reads 0 here, so its delay is
        not spent on a chance rho."""
        if self.n < 8:
            return 0.0
        return min(max(self._raw() - z * 2.0 / math.sqrt(self.n), 0.0), self.value)  # never above the shrunk one

    def state_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in slot_names(self)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        for k in slot_names(self):
            if k in state:
                setattr(self, k, int(state[k]) if k in ("size", "n") else float(state[k]))


class Cusum:
    """Page's one-sided CUSUM on standardised rows: ``s = max(0, s + w - k)``, an alarm when ``s > h``.

    ``k`` is half the shift (in noise sigmas) the test is tuned for; ``h`` comes from the ARL0 budget
    (``cusum_threshold``). Where the noise is AR(1) with coefficient ``rho`` (``Ar1``), each row is prewhitened
    first, w = (z - rho z_prev) / sqrt(1 - rho^2): the innovations are independent, so Siegmund's ARL holds
    again, and a shift of d sigmas becomes one of d sqrt((1 - rho) / (1 + rho)) in them: the reference and the
    threshold are set for that smaller shift (a correlated noise costs delay; it must not cost false alarms).
    ``since`` is the row at which the current excursion began (the change point estimate).
    """

    __slots__ = ("k0", "arl", "k", "h", "s", "n", "since", "rho", "prev")

    def __init__(self, k: float = 0.5, arl: float = BASE_ARL) -> None:
        self.k0 = float(k)
        self.arl = float(arl)
        self.k = self.k0
        self.h = cusum_threshold(self.arl, self.k)
        self.s = 0.0
        self.n = 0
        self.since = 0
        self.rho = 0.0
        self.prev = math.nan

    def _set_rho(self, rho: float) -> None:
        self.rho = rho
        self.k = self.k0 / ar1_inflation(rho)
        self.h = cusum_threshold(self.arl, self.k)

    def push(self, z: float, rho: float = 0.0) -> bool:
        """One standardised row (``rho``: its noise's AR(1) coefficient); True while past the threshold."""
        rho = round(min(max(rho, 0.0), MAX_RHO), 2)
        if rho != self.rho:
            self._set_rho(rho)
        prev, self.prev = self.prev, z
        if rho > 0.0:
            if prev != prev:
                return self.s > self.h
            z = (z - rho * prev) / math.sqrt(1.0 - rho * rho)
        self.n += 1
        if self.s <= 0.0:
            self.since = self.n
        self.s = max(0.0, self.s + z - self.k)
        return self.s > self.h

    @property
    def alarm(self) -> bool:
        return self.s > self.h

    def reset(self) -> None:
        self.s = 0.0

    def state_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in slot_names(self)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        for k in slot_names(self):
            if k in state:
                setattr(self, k, int(state[k]) if k in ("n", "since") else float(state[k]))


class MultiCusum:
    """A shift of unknown size: CUSUMs tuned for several sizes side by side, each held to ``arl * len(ks)`` so that
    the bank keeps the budget (Bonferroni; the charts are positively correlated, so the bank's true ARL0 is longer).

    A small ``k`` finds a small shift late, a large one a large shift in a row or two: the bank is close to the GLR
    test's delay for every size in between (Lorden; Lai 1995).
    """

    __slots__ = ("charts",)

    def __init__(self, ks: tuple[float, ...] = (0.25, 0.5, 1.0), arl: float = BASE_ARL) -> None:
        self.charts = [Cusum(k, arl * len(ks)) for k in ks]

    def push(self, z: float, rho: float = 0.0) -> bool:
        fired = False
        for c in self.charts:
            fired = c.push(z, rho) or fired
        return fired

    @property
    def alarm(self) -> bool:
        return any(c.alarm for c in self.charts)

    @property
    def since(self) -> int:
        """The change point of the chart furthest past its threshold."""
        return max(self.charts, key=lambda c: c.s / c.h).since

    def score(self) -> float:
        """The largest s / h: 1 at the threshold."""
        return max(c.s / c.h for c in self.charts)

    def state_dict(self) -> dict[str, object]:
        return {"charts": [c.state_dict() for c in self.charts]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for c, s in zip(self.charts, state.get("charts", []), strict=False):
            c.load_state_dict(s)


def _solve_arl(q: list[list[float]]) -> float:
    """Expected steps to absorption from state 0 of a chain whose transient transitions are ``q``: solve
    (I - q) L = 1 by Gaussian elimination (a few dozen states; pure Python)."""
    m = len(q)
    a = [[(1.0 if i == j else 0.0) - q[i][j] for j in range(m)] + [1.0] for i in range(m)]
    for c in range(m):
        piv = max(range(c, m), key=lambda r: abs(a[r][c]))
        a[c], a[piv] = a[piv], a[c]
        pv = a[c][c]
        if abs(pv) < 1e-300:
            return math.inf
        row_c = a[c]
        for r in range(c + 1, m):
            f = a[r][c] / pv
            if f:
                row_r = a[r]
                for j in range(c, m + 1):
                    row_r[j] -= f * row_c[j]
    x = [0.0] * m
    for i in range(m - 1, -1, -1):
        s = a[i][m] - sum(a[i][j] * x[j] for j in range(i + 1, m))
        x[i] = s / a[i][i]
    return x[0]


def _chi2_cdf(x: float) -> float:
    """P(Z^2 <= x) for a standard normal Z."""
    return math.erf(math.sqrt(x / 2.0)) if x > 0 else 0.0


def noise_rise_arl(h: float, ratio: float, clip: float, cells: int = 40) -> float:
    """ARL0 (rows) of ``NoiseRiseCusum`` with threshold ``h`` on independent N(0, 1) rows, by the Markov-chain
    approximation of Brook and Evans (1972): the CUSUM's range [0, h] cut into ``cells`` states."""
    a, b = 0.5 * (1.0 - 1.0 / (ratio * ratio)), math.log(ratio)

    def cdf(y: float) -> float:  # P(increment <= y), increment = a min(z^2, clip) - b
        x = (y + b) / a
        return 1.0 if x >= clip else _chi2_cdf(x)

    w = h / cells
    values = [0.0] + [(j - 0.5) * w for j in range(1, cells + 1)]
    q = []
    for s in values:
        row = [cdf(-s)]
        prev = row[0]
        for j in range(1, cells + 1):
            cur = cdf(j * w - s)
            row.append(cur - prev)
            prev = cur
        q.append(row)
    return _solve_arl(q)


_NOISE_RISE_H: dict[tuple[float, float, float], float] = {}


def noise_rise_threshold(arl: float, ratio: float, clip: float) -> float:
    """The threshold at which ``NoiseRiseCusum`` has ARL0 ``arl`` (bisection on ``noise_rise_arl``; cached: a few
    dozen milliseconds the first time a configuration is asked for)."""
    key = (round(arl, 3), round(ratio, 4), round(clip, 4))
    h = _NOISE_RISE_H.get(key)
    if h is None:
        lo, hi = 0.0, 4.0
        while noise_rise_arl(hi, ratio, clip) < arl and hi < 1e4:
            lo, hi = hi, hi * 2.0
        for _ in range(16):
            mid = 0.5 * (lo + hi)
            if noise_rise_arl(mid, ratio, clip) < arl:
                lo = mid
            else:
                hi = mid
        h = _NOISE_RISE_H[key] = hi
    return h


class NoiseRiseCusum:
    """Page's CUSUM for a series' noise growing ``ratio`` times (in sd), on rows standardised by the noise it had.

    Each row adds the log-likelihood ratio of N(0, ratio^2) against N(0, 1) at its standardised value z,
    0.5 (1 - 1 / ratio^2) min(z^2, ``clip``) - log(ratio): a calm row takes evidence away, a wild one adds it, and
    one outlier row adds at most what ``clip`` allows (a clipped z^2 of 9 counts a 10-sigma row as a 3-sigma one),
    so a single outlier is one outlier and a noise that stays doubled crosses within a few dozen rows. The
    threshold comes from the ARL0 budget by the Markov-chain approximation (``noise_rise_arl``); ``since`` is the
    row at which the current excursion began.
    """

    __slots__ = ("ratio", "clip", "arl", "a", "b", "h", "s", "n", "since")

    def __init__(self, ratio: float = 2.0, arl: float = BASE_ARL, clip: float = 9.0) -> None:
        self.ratio = float(ratio)
        self.clip = float(clip)
        self.arl = float(arl)
        self.a = 0.5 * (1.0 - 1.0 / (self.ratio * self.ratio))
        self.b = math.log(self.ratio)
        self.h = noise_rise_threshold(self.arl, self.ratio, self.clip)
        self.s = 0.0
        self.n = 0
        self.since = 0

    def push(self, z: float) -> bool:
        """One standardised row; True while past the threshold."""
        self.n += 1
        if self.s <= 0.0:
            self.since = self.n
        zz = z * z
        self.s = max(0.0, self.s + self.a * (zz if zz < self.clip else self.clip) - self.b)
        return self.s > self.h

    @property
    def alarm(self) -> bool:
        return self.s > self.h

    def score(self) -> float:
        """s / h: 1 at the threshold."""
        return self.s / self.h

    def state_dict(self) -> dict[str, float]:
        return {"s": self.s, "n": self.n, "since": self.since}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.s = float(state.get("s", 0.0))
        self.n = int(state.get("n", 0))
        self.since = int(state.get("since", 0))
