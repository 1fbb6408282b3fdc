"""An abrupt break: a step change of unknown size and start in one series, decided in rows (issue #47).

A user sees at once what a rule held k rows, or fitted to one log's noise, sees late or never: the reward (and the
gold beside it) falling by half in one logged step and staying there. ``BreakTest`` is a two-sided test for that
change in a single series, with a false-alarm budget that holds under the noises a healthy run has:

* **Reference**: the run's own recent rows (``REF_ROWS``), kept ``DELAY`` rows behind the present (and frozen while
  the test is excited), so a break is read against where the series was, not against itself. From them: a robust
  level and slope (the medians of the window's two halves), an AR(1) coefficient (the lag-1 correlation of the
  detrended rows, winsorised, small-sample bias corrected) and a robust scale of the innovations (winsorised at
  3 MAD: a t(3) outlier neither inflates nor shrinks it). Refitted every ``REFIT_EVERY`` rows.
* **Prewhitening**: each row's displacement from the extrapolated level, r, becomes an innovation u = r - rho r_prev;
  a level shift of d shows as d on its first row and d (1 - rho) after, an isolated outlier as +A then -rho A.
* **Test**: a bank of two-sided CUSUMs (a GLR for a shift of unknown size, discretised) on the innovations in units
  of their own scale, each clipped at ``CLIP``: one row, however far out, adds at most ``CLIP - k`` and no chart's
  threshold can be crossed by one row; a shift that holds crosses in two or three. Beside it a *jump that holds*:
  an innovation past ``jump_z`` (the budget's normal quantile) is a break when the next two rows stay at least half
  the jump away from the old level (an outlier returns; a break stays): under strongly autocorrelated noise the first
  row carries most of a break's evidence, and this reads it in two rows more instead of many.
* **Budget**: ``arl`` healthy rows per false alarm per series (two-sided), half to the bank (each of its one-sided
  charts held to ``2 * arl * charts`` by Siegmund's approximation: Bonferroni, so the bank's own is longer) and half
  to the jump (its two-sided normal tail 1 / (2 arl)). A test of the last three rows' mean level was tried and
  left out: under the detection corpus's Student-t(2.5-4.5) batch noise three rows' mean has tails no budget
  holds.

After a break is decided the reference starts over from the break's first row (the new level is the run's normal
from then on); the caller keeps the old one (``Break``) to say whether the break held. Pure Python, O(charts) a row,
a refit O(``REF_ROWS`` log ``REF_ROWS``) every ``REFIT_EVERY`` rows; checkpointable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from statistics import NormalDist
from typing import Any

from .sequential import cusum_threshold
from .stats import MAD_TO_SIGMA, median

BREAK_ARL = 200_000.0
"""The declared budget: healthy rows per false alarm, per series, both directions together. A run of 1,000 rows that
logs 12 series sees one false break in about 17 such runs (and a warn only where the direction is a harmful one)."""
REF_ROWS = 64
"""The reference window (rows)."""
MIN_REF = 64
"""Rows the reference needs before the series is tested (at the start, and after a break); a run planned for fewer
than ``SHORT_RUN_ROWS`` rows uses ``SHORT_MIN_REF``."""
SHORT_MIN_REF = 12
SHORT_DELAY = 4
DELAY = 8
"""Rows the reference is kept behind the present."""
MAX_DELAY = 48
"""... at most, even while the test stays excited (a slow drift is absorbed, not tested for ever)."""
REFIT_EVERY = 8
"""Rows between refits of the reference."""
CLIP = 3.5
"""Each innovation counts at most this many of its sigmas in the bank: with the budget's thresholds, no chart is
crossed by one or two rows (a pair of outliers is not a break), a shift that holds three rows crosses."""
JUMP_ROWS = 2
"""A jump is decided when this many rows after it hold (three rows in all): two outliers in a row happen in a
heavy-tailed noise, and a small group's success rate dips two rows in a row now and then."""
KS = (0.5, 1.0, 2.0)
"""The bank's reference values: halves of the innovation shifts (1, 2 and 4 sigmas) each chart is tuned for."""
EXCITED = 0.2
"""While a chart is past this share of its threshold the reference does not take new rows: a shift building up
must not teach the reference its new level before it is decided."""
RECENT_ROWS = 16
"""Where the series last stood: the median of the reference's last this many rows."""
ABRUPT_ROWS = 12
"""A shift decided more rows than this after its onset is a slow one (a trend): the caller may leave it to the trend
rules, and the test rebases its reference instead of starting over."""
HOLD_SHARE = 0.5
"""A jump holds when the next row stays this share of it away from the old level."""
WINSOR = 3.0
"""Rows are winsorised at this many robust sigmas for the scale and the AR(1) fit."""
_WINSOR_SD = 0.9934
"""The sd of a standard normal winsorised at 3: the winsorised sd is divided by it."""
LONG_LAGS = 8
"""Lags of the innovations' long-run variance (``_long_run``)."""
MAX_RHO = 0.98
"""The AR(1) coefficient is capped here."""
SCALE_FLOOR = 1e-9
"""A scale under this share of the level's size (a constant series) is no noise model: the series is not tested."""


def jump_threshold(arl: float) -> float:
    """The innovation (in its sigmas) past which a single row starts a jump: two-sided tail 1 / (2 ``arl``)."""
    return NormalDist().inv_cdf(1.0 - 1.0 / (4.0 * max(arl, 10.0)))


def robust_sd(values: list[float]) -> float:
    """A scale one outlier in twenty cannot move much and a Gaussian sample reads efficiently: the sd of the values
    winsorised at ``WINSOR`` robust sigmas around their median. The robust sigma is the MAD, or, where over half the
    values are equal (a small group's success rate often is), the 90th percentile of the deviations over its normal
    value 1.645: neither is moved by an outlier however far out."""
    n = len(values)
    if n < 3:
        return 0.0
    med = median(values)
    dev = sorted(abs(v - med) for v in values)
    s0 = MAD_TO_SIGMA * median(dev)
    if s0 <= 0.0:
        s0 = dev[int(0.9 * (n - 1))] / 1.645
    if s0 <= 0.0:
        return 0.0
    lo, hi = med - WINSOR * s0, med + WINSOR * s0
    w = [min(max(v, lo), hi) for v in values]
    mw = sum(w) / n
    return math.sqrt(sum((v - mw) ** 2 for v in w) / (n - 1)) / _WINSOR_SD


@dataclass(slots=True)
class Fit:
    """The reference: ``level + slope * (row - at)`` is where the series is expected, ``rho`` its noise's AR(1)
    coefficient, ``sig_u`` the innovations' scale and ``sig_x`` the rows' own (both robust); ``se_level`` and
    ``se_slope`` the standard errors of the level at ``at`` and of the slope (under the AR(1) noise)."""

    level: float
    slope: float
    at: int
    rho: float
    sig_u: float
    sig_x: float
    rows: int
    se_level: float = 0.0
    se_slope: float = 0.0
    sum_infl: float = 1.0

    def expect(self, row: int) -> float:
        return self.level + self.slope * (row - self.at)

    def allowance(self, row: int) -> float:
        """How far (in innovation sigmas) the reference's own error may displace an innovation at ``row``: two
        standard errors of the extrapolated level, of which an innovation carries (1 - rho), and the scale's own
        error (a scale read from ``rows`` rows is that much too small about one time in six)."""
        d = row - self.at
        se = math.sqrt(self.se_level ** 2 + (self.se_slope * d) ** 2)
        return 2.0 * (1.0 - self.rho) * se / self.sig_u


_FIT_FIELDS = tuple(f.name for f in fields(Fit))


def fit_from(values: list[Any]) -> Fit:
    """A ``Fit`` from its fields in order (a checkpoint's list)."""
    v = dict(zip(_FIT_FIELDS, values, strict=False))
    return Fit(float(v["level"]), float(v["slope"]), int(v["at"]), float(v["rho"]), float(v["sig_u"]),
               float(v["sig_x"]), int(v["rows"]), float(v.get("se_level", 0.0)), float(v.get("se_slope", 0.0)),
               float(v.get("sum_infl", 1.0)))


def _line(values: list[float], w: list[float]) -> tuple[float, float]:
    """Least squares of ``w`` on 0..m-1: (value at the centre, slope)."""
    m = len(w)
    c = (m - 1) / 2.0
    mean = sum(w) / m
    sxx = m * (m * m - 1) / 12.0
    return mean, sum((i - c) * (v - mean) for i, v in enumerate(w)) / sxx


def _sd(values: list[float]) -> float:
    n = len(values)
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / max(n - 1, 1))


def _lag1(w: list[float], mean: float) -> tuple[float, float]:
    """The lag-1 autocovariance sum and the variance sum of ``w`` around ``mean``."""
    d = [v - mean for v in w]
    return sum(a * b for a, b in zip(d, d[1:], strict=False)), sum(v * v for v in d)


def _rho(num: float, den: float, m: int) -> float:
    """The lag-1 autocorrelation from its sums over windows of ``m`` rows, corrected for its small-sample bias
    (Marriott-Pope, (1 + 4 rho) / m) and clipped to [0, ``MAX_RHO``]."""
    r = num / den if den > 0 else 0.0
    return min(max(r + (1.0 + 4.0 * max(r, 0.0)) / m, 0.0), MAX_RHO)


def _long_run(u: list[float]) -> float:
    """How many times the sum of ``u`` over a few dozen rows spreads wider than independent rows would: the square
    root of the Bartlett-weighted long-run variance over the plain one, at least 1."""
    m = len(u)
    mean = sum(u) / m
    d = [v - mean for v in u]
    g0 = sum(v * v for v in d)
    if g0 <= 0:
        return 1.0
    lr = g0
    for j in range(1, min(LONG_LAGS, m - 1) + 1):
        lr += 2.0 * (1.0 - j / (LONG_LAGS + 1.0)) * sum(a * b for a, b in zip(d, d[j:], strict=False))
    return math.sqrt(max(lr / g0, 1.0))


def fit_reference(values: list[float], first_row: int, pooled: list[float] | None = None) -> Fit | None:
    """The reference from consecutive rows ``values`` (the first at row ``first_row``); None where they hold no noise
    (a constant series).

    A line through the medians of the window's two halves gives a first, robust residual scale; the rows winsorised
    at ``WINSOR`` of it around that line give the least-squares line (mean and slope), whose residuals give the
    AR(1) coefficient and the innovations. The slope is kept only as far as it stands out of its own noise
    (shrunk to 0 within two standard errors): a spurious slope, extrapolated over the delay line, would be a
    shift."""
    m = len(values)
    h = m // 2
    c = (m - 1) / 2.0
    med1, med2 = median(values[:h]), median(values[h:])
    s1 = (med2 - med1) / (m / 2.0)
    mid = 0.5 * (med1 + med2)
    r0 = [v - mid - s1 * (i - c) for i, v in enumerate(values)]
    s0 = robust_sd(r0)
    if not s0 > SCALE_FLOOR * max(abs(mid), 1e-12) or not math.isfinite(s0):
        return None
    lim = WINSOR * s0
    w = [mid + s1 * (i - c) + min(max(e, -lim), lim) for i, e in enumerate(r0)]
    level, slope = _line(values, w)
    r = [v - level - slope * (i - c) for i, v in enumerate(w)]
    sig_x = robust_sd(r)
    if not sig_x > 0.0:
        return None
    # the AR(1) read around the window's line (a healthy trend is not correlation: read as one, it would take most of
    # a break's later rows off its innovations), and never below the run's pooled reading: a window of 64 rows reads
    # a slow wander's coefficient low, and an AR(1) read too low leaves a wander the CUSUM sums
    num, den = _lag1(r, 0.0)
    rho = _rho(num, den, m)
    if pooled is not None:  # [lag-1 sum, variance sum, rows]: one standard error up while the run is young
        share = min(REFIT_EVERY / m, 1.0) if pooled[2] > 0 else 1.0  # each row counted about once
        pooled[0] += share * num
        pooled[1] += share * den
        pooled[2] += share * m
        rp = _rho(pooled[0], pooled[1], m)
        rho = min(max(rho, rp + 2.0 * math.sqrt(max(1.0 - rp * rp, 0.0) / pooled[2])), MAX_RHO)
    infl = math.sqrt((1.0 + rho) / (1.0 - rho))
    se_slope = sig_x * infl * math.sqrt(12.0 / (m * (m * m - 1.0)))
    t2 = (slope / se_slope) ** 2 if se_slope > 0 else math.inf
    keep = max(0.0, 1.0 - 4.0 / t2) if t2 > 0 else 0.0
    raw = [v - level - slope * (i - c) for i, v in enumerate(values)]  # outliers in: the robust scale reads past them
    u = [b - rho * a for a, b in zip(raw, raw[1:], strict=False)]
    sig_u = robust_sd(u)
    if all(0.0 <= v <= 1.0 for v in values):
        # a rate or a score in [0, 1] near its floor or ceiling: most rows equal, a few prompts' dips the whole of
        # its noise; a robust scale reads them away, the plain one keeps them
        sig_x, sig_u = max(sig_x, _sd(raw)), max(sig_u, _sd(u))
    if not sig_u > 0.0:
        return None
    # what the AR(1) left in the innovations (a slow wander a window cannot see whole, a band-limited noise): a
    # CUSUM sums them, and their sum's spread is the long-run sd (Newey-West, Bartlett weights over LONG_LAGS rows)
    lim_u = WINSOR * sig_u
    uw = [min(max(v, -lim_u), lim_u) for v in u]
    sum_infl = _long_run(uw)
    sig_u *= 1.0 + 1.0 / math.sqrt(1.8 * m)  # the scale's own standard error (winsorised sd, ~90 % efficient)
    at = first_row + round(c)
    level += slope * (at - first_row - c)
    return Fit(level, slope * keep, at, rho, sig_u, sig_x, m, sig_x * infl / math.sqrt(m), se_slope * keep, sum_infl)


@dataclass(slots=True)
class Break:
    """A decided break: its first row (``onset``, in the test's own row count), the row it was decided on, its
    direction (+1 up, -1 down) and size (in the series' units, in sigmas of its rows, and as a share of the old
    level), how it was decided (``jump`` or ``cusum``), and the old reference (to read whether it holds)."""

    onset: int
    decided: int
    sign: int
    size: float
    sigmas: float
    share: float
    how: str
    before: Fit
    #: the shift from the reference's last rows, without its slope (in the series' units)
    flat: float = math.nan

    @property
    def abrupt(self) -> bool:
        """Decided within ``ABRUPT_ROWS`` rows of its onset, and a step from where the series last stood, not only
        from where its slope would have taken it (a rise that levels off falls below its own extrapolation): a
        break, not a slow shift."""
        step = self.flat != self.flat or self.sign * self.flat >= HOLD_SHARE * abs(self.size)
        return self.decided - self.onset < ABRUPT_ROWS and step

    def displaced(self, row: int, x: float) -> float:
        """How far ``x`` (at ``row``) sits from the old level, as a share of the break's size (1: the break holds
        in full, 0: back where it was)."""
        return (x - self.before.expect(row)) / self.size if self.size else 0.0


class BreakTest:
    """The test on one series (see the module's docstring); ``push`` returns a ``Break`` on the row it is decided."""

    __slots__ = ("arl", "min_ref", "delay", "hs", "jump_z", "ref", "lag", "n", "fit", "since_fit", "prev_x", "up",
                 "down", "up_at", "down_at", "jump", "score", "pooled")

    def __init__(self, arl: float = BREAK_ARL, min_ref: int = MIN_REF, delay: int = DELAY) -> None:
        self.arl = float(arl)
        self.min_ref = max(8, int(min_ref))  # a short run's: it must be tested before its middle
        self.delay = max(2, int(delay))
        charts = 2 * len(KS)
        self.hs = [cusum_threshold(2.0 * self.arl * charts, k) for k in KS]
        self.jump_z = jump_threshold(self.arl)
        self.ref: list[float] = []  # the reference rows, oldest first
        self.lag: list[float] = []  # the rows not yet in it, oldest first
        self.n = 0
        self.fit: Fit | None = None
        self.since_fit = 0
        self.prev_x = math.nan
        k = len(KS)
        self.up, self.down = [0.0] * k, [0.0] * k
        self.up_at, self.down_at = [0] * k, [0] * k
        self.jump: list[float] = []  # a jump waiting for the rows that hold it: [row, sign, r, rows it needs]
        self.score = 0.0  # the largest chart's share of its threshold now
        self.pooled = [0.0, 0.0, 0.0]  # the run's lag-1 autocovariance and variance sums, rows (kept across breaks)

    # -- the row --
    def push(self, x: float) -> Break | None:
        """One finite value; the break decided on this row, if any."""
        self.n += 1
        out = self._test(x) if self.fit is not None else None
        self.prev_x = x
        if out is not None and out.abrupt:
            self._restart(out.onset)
        elif out is not None:  # a slow shift (a trend the reference's slope missed): rebased, not restarted
            self.lag.append(x)
            self._rebase()
        else:
            self.lag.append(x)
            self._settle()
        return out

    def _test(self, x: float) -> Break | None:
        fit = self.fit
        assert fit is not None
        n = self.n
        r = x - fit.expect(n)
        r_prev = self.prev_x - fit.expect(n - 1) if self.prev_x == self.prev_x else 0.0
        z = (r - fit.rho * r_prev) / fit.sig_u
        found = self._held_jump(n, r)
        slack = fit.allowance(n)
        # a jump is a row out in the level too, on the side of its innovation (the row after an outlier has a large
        # innovation of the other sign, and sits where the series always was)
        if (found is None and not self.jump and abs(z) >= self.jump_z + slack and r * z > 0
                and abs(r) >= self.jump_z * fit.sig_u):
            self.jump = [float(n), 1.0 if z > 0 else -1.0, r, float(JUMP_ROWS)]
        zc = min(max(z, -CLIP), CLIP) / fit.sum_infl
        best, onset, sign = 0.0, 0, 0
        for j, k0 in enumerate(KS):
            k = k0 + slack
            if self.up[j] <= 0.0:
                self.up_at[j] = n
            if self.down[j] <= 0.0:
                self.down_at[j] = n
            self.up[j] = u = max(0.0, self.up[j] + zc - k)
            self.down[j] = d = max(0.0, self.down[j] - zc - k)
            h = self.hs[j]
            if u / h > best:
                best, onset, sign = u / h, self.up_at[j], 1
            if d / h > best:
                best, onset, sign = d / h, self.down_at[j], -1
        self.score = best
        if found is not None:
            return self._decide(found[0], found[1], "jump", x)
        if best > 1.0:
            return self._decide(onset, sign, "cusum", x)
        return None

    def _held_jump(self, n: int, r: float) -> tuple[int, int] | None:
        """The jump waiting from an earlier row: (onset, sign) once the rows it needs after it stayed ``HOLD_SHARE``
        of it away from the old level; dropped on a row that did not (it returned), None until decided."""
        if not self.jump:
            return None
        at, sign, r0, need = self.jump
        if sign * r < HOLD_SHARE * abs(r0):
            self.jump = []
            return None
        if n - int(at) < need:
            return None
        self.jump = []
        return int(at), int(sign)

    def _decide(self, onset: int, sign: int, how: str, x: float) -> Break:
        """The break from ``onset`` to this row (value ``x``): its size is the rows' mean displacement from the
        reference (the rows since the onset are all in the delay line: it does not move while the test is
        excited, unless a slow drift filled it)."""
        fit = self.fit
        assert fit is not None
        n = self.n
        onset = min(max(onset, n - len(self.lag)), n)
        rows = [*self.lag[len(self.lag) - (n - onset):], x] if n > onset else [x]
        size = sum(v - fit.expect(onset + i) for i, v in enumerate(rows)) / len(rows)
        level = fit.expect(onset)
        share = size / abs(level) if abs(level) > SCALE_FLOOR else math.nan
        flat = sum(rows) / len(rows) - median(self.ref[-RECENT_ROWS:]) if self.ref else math.nan
        return Break(onset, self.n, sign, size, size / fit.sig_x, share, how, fit, flat)

    def displacement(self, rows: int) -> float:
        """The mean of the last ``rows`` rows (this one included) from the reference, in sigmas of the rows: how far
        the series moved since then (NaN while it has no reference)."""
        fit = self.fit
        if fit is None or not self.lag or rows < 1:
            return math.nan
        tail = self.lag[-rows:]
        first = self.n - len(tail) + 1
        return sum(v - fit.expect(first + i) for i, v in enumerate(tail)) / len(tail) / fit.sig_x

    # -- the reference --
    def _settle(self) -> None:
        """Move rows from the delay line into the reference (not while the test is excited, unless the line is
        full), and refit every ``REFIT_EVERY`` rows."""
        excited = self.score > EXCITED or bool(self.jump)
        moved = 0
        while len(self.lag) > MAX_DELAY or (len(self.lag) > self.delay and not excited):
            self.ref.append(self.lag.pop(0))
            moved += 1
        if not moved:
            return
        if len(self.ref) > REF_ROWS:
            del self.ref[:len(self.ref) - REF_ROWS]
        self.since_fit += moved
        if len(self.ref) >= self.min_ref and (self.fit is None or self.since_fit >= REFIT_EVERY):
            self._refit()

    def _refit(self) -> None:
        first_row = self.n - len(self.lag) - len(self.ref) + 1
        self.fit = fit_reference(self.ref, first_row, self.pooled)
        self.since_fit = 0

    def _rebase(self) -> None:
        """After a slow shift: the reference takes the most recent rows at once and the test goes on (a reference
        that straddles the shift reads a wider noise for a while: more careful, never blind)."""
        self.ref = (self.ref + self.lag)[-REF_ROWS:]
        self.lag = []
        self.jump = []
        self.score = 0.0
        for j in range(len(KS)):
            self.up[j] = self.down[j] = 0.0
        self._refit()

    def _restart(self, onset: int) -> None:
        """After a break: the rows from its onset on are the new normal, read from scratch."""
        keep = self.n - onset  # rows since the onset, before this one
        self.lag = (self.lag[-keep:] if keep > 0 else []) + [self.prev_x]
        self.ref = []
        self.fit = None
        self.since_fit = 0
        self.jump = []
        self.score = 0.0
        for j in range(len(KS)):
            self.up[j] = self.down[j] = 0.0

    # -- checkpointing --
    def state_dict(self) -> dict[str, Any]:
        fit = self.fit
        return {"ref": list(self.ref), "lag": list(self.lag), "n": self.n, "since_fit": self.since_fit,
                "prev_x": self.prev_x, "up": list(self.up), "down": list(self.down), "up_at": list(self.up_at),
                "down_at": list(self.down_at), "jump": list(self.jump), "score": self.score,
                "pooled": list(self.pooled),
                "fit": None if fit is None else [getattr(fit, k) for k in _FIT_FIELDS]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ref = [float(v) for v in state.get("ref", [])]
        self.lag = [float(v) for v in state.get("lag", [])]
        self.n = int(state.get("n", 0))
        self.since_fit = int(state.get("since_fit", 0))
        self.prev_x = float(state.get("prev_x", math.nan))
        self.up = [float(v) for v in state.get("up", self.up)]
        self.down = [float(v) for v in state.get("down", self.down)]
        self.up_at = [int(v) for v in state.get("up_at", self.up_at)]
        self.down_at = [int(v) for v in state.get("down_at", self.down_at)]
        self.jump = [float(v) for v in state.get("jump", [])]
        self.score = float(state.get("score", 0.0))
        self.pooled = [float(v) for v in state.get("pooled", [0.0, 0.0, 0.0])]
        f = state.get("fit")
        self.fit = None if f is None else fit_from(f)
