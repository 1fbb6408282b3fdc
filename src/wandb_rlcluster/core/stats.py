"""Bounded-memory streaming statistics with O(1) (or O(window)) work per value.

Everything a gauge needs to ignore one noisy point and still notice a trend:
rolling windows, EWMA baselines, a rolling least-squares slope, robust
z-scores (median / MAD) and a frozen start-of-run baseline. Pure Python on
purpose: for a few dozen numbers per row, numpy's call overhead costs more
than the arithmetic.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from operator import mul
from typing import Any

from .fields import slot_names
from .sequential import Ar1, ar1_var_factor, ewma_var_factor

MAD_TO_SIGMA = 1.4826


def is_finite(x: float | None) -> bool:
    """A number that is neither NaN nor infinite (None: False). Called dozens of times a row: in C for a number."""
    try:
        return _isfinite(x)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # None, an int past float range, not a number
        return x is not None and x == x and x not in (math.inf, -math.inf)


_isfinite = math.isfinite


class RollingWindow:
    """The last ``size`` finite values, with running sum and sum of squares."""

    __slots__ = ("size", "buf", "_sum", "_sumsq", "_pushes", "_robust", "_robust_at", "full")

    def __init__(self, size: int) -> None:
        self.size = max(1, int(size))
        self.buf: deque[float] = deque(maxlen=self.size)
        #: the window holds ``size`` values (kept by ``push``: it is read on most rows, and stays True once set)
        self.full = False
        self._sum = 0.0
        self._sumsq = 0.0
        self._pushes = 0
        self._robust = (math.nan, 0.0)
        self._robust_at = -1

    def push(self, x: float) -> None:
        buf = self.buf
        if len(buf) == self.size:
            old = buf[0]
            # the same operations in the same order as "-= old" then "+= x": bit for bit the same sums
            self._sum = self._sum - old + x
            self._sumsq = self._sumsq - old * old + x * x
        else:
            self._sum += x
            self._sumsq += x * x
            self.full = len(buf) + 1 == self.size
        buf.append(x)
        n = self._pushes = self._pushes + 1
        if not n & 4095:  # every 4096 pushes: wash out floating-point drift of the running sums
            self._sum = math.fsum(buf)
            self._sumsq = math.fsum(v * v for v in buf)

    def __len__(self) -> int:
        return len(self.buf)

    def mean(self) -> float:
        n = len(self.buf)
        return self._sum / n if n else math.nan

    def var(self) -> float:
        n = len(self.buf)
        if n < 2:
            return 0.0
        m = self._sum / n
        v = (self._sumsq - n * m * m) / (n - 1)
        return v if v > 0.0 else 0.0

    def std(self) -> float:
        n = len(self.buf)
        if n < 2:
            return 0.0
        m = self._sum / n
        v = (self._sumsq - n * m * m) / (n - 1)
        return math.sqrt(v) if v > 0.0 else 0.0

    def median(self) -> float:
        return median(self.buf)

    def robust(self, refresh: int = 4) -> tuple[float, float]:
        """(median, robust sigma), recomputed at most every ``refresh`` pushes.

        Sorting the window on every row is the core's most expensive step;
        a median a few rows stale is just as good a reference for a spike.
        """
        at = self._robust_at
        buf = self.buf
        if at < 0 or self._pushes - at >= refresh or len(buf) < 2 * refresh:
            s = sorted(buf)
            n = len(s)
            if n >= 2:
                mid = n // 2
                med = s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])
                # |v - med| in sorted order is a falling run then a rising one: the sort merges two runs
                dev = sorted(map(abs, map(med.__rsub__, s)))
                mad = MAD_TO_SIGMA * (dev[mid] if n % 2 else 0.5 * (dev[mid - 1] + dev[mid]))
            else:
                med = s[0] if n else math.nan
                mad = 0.0
            self._robust = (med, mad)
            self._robust_at = self._pushes
        return self._robust

    def min(self) -> float:
        return min(self.buf) if self.buf else math.nan

    def max(self) -> float:
        return max(self.buf) if self.buf else math.nan

    def values(self) -> list[float]:
        return list(self.buf)

    def state_dict(self) -> dict[str, object]:
        # the running sums and the robust cache's phase too: a resumed run must judge each row exactly as an
        # unbroken one (re-pushing the window gives sums a few ulps off and refreshes the median at other rows)
        return {"size": self.size, "buf": list(self.buf), "sum": self._sum, "sumsq": self._sumsq,
                "pushes": self._pushes, "robust": list(self._robust), "robust_at": self._robust_at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__init__(int(state.get("size", self.size)))  # type: ignore[misc]
        for v in state.get("buf", []):
            self.push(float(v))
        if "pushes" in state:  # checkpoints written before these keys existed resume from the values alone
            self._sum, self._sumsq = float(state["sum"]), float(state["sumsq"])
            self._pushes, self._robust_at = int(state["pushes"]), int(state["robust_at"])
            med, mad = state["robust"]
            self._robust = (float(med), float(mad))


def median(values: Iterable[float]) -> float:
    s = sorted(values)
    n = len(s)
    if not n:
        return math.nan
    mid = n // 2
    return s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])


def poisson_tail(k: int, lam: float) -> float:
    """P(X >= k) for X ~ Poisson(``lam``): how surprising ``k`` events are where ``lam`` were expected."""
    if k <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    term = math.exp(-lam)
    cdf = term
    for i in range(1, k):
        term *= lam / i
        cdf += term
    return max(1.0 - cdf, 0.0)


def robust_z(x: float, window: RollingWindow, floor: float = 1e-12) -> float:
    """How many robust sigmas ``x`` lies from the window's median."""
    if len(window) < 5:
        return 0.0
    med, mad = window.robust()
    sigma = max(mad, floor, 1e-3 * abs(med))
    return (x - med) / sigma


class Ewma:
    """Exponentially weighted mean and variance (West's update)."""

    __slots__ = ("alpha", "mean", "var", "count")

    def __init__(self, alpha: float = 0.1) -> None:
        self.alpha = alpha
        self.mean = math.nan
        self.var = 0.0
        self.count = 0

    def push(self, x: float) -> float:
        self.count += 1
        if self.count == 1:
            self.mean = x
            return x
        alpha = self.alpha
        diff = x - self.mean
        incr = alpha * diff
        self.mean = mean = self.mean + incr
        self.var = (1.0 - alpha) * (self.var + diff * incr)
        return mean

    def restart(self) -> None:
        """Start over from the next value: after a gap in the log (``StepGaps``) the level smoothed so far belongs to
        another phase of the run."""
        self.count = 0
        self.var = 0.0

    def state_dict(self) -> dict[str, float]:
        return {"alpha": self.alpha, "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.alpha = float(state["alpha"])
        self.mean = float(state["mean"])
        self.var = float(state["var"])
        self.count = int(state["count"])


class Baseline:
    """Median of the first ``size`` finite values, frozen once collected.

    Ratios against the start of the run (length ×2, entropy ÷2) need a
    reference that later drift cannot move; the median keeps one odd early
    point from setting it.
    """

    __slots__ = ("size", "_vals", "value")

    def __init__(self, size: int = 10) -> None:
        self.size = max(1, int(size))
        self._vals: list[float] = []
        self.value = math.nan

    def push(self, x: float) -> None:
        if self.value == self.value:  # ready: frozen
            return
        vals = self._vals
        vals.append(x)
        if len(vals) >= self.size:
            self.value = median(vals)
            self._vals = []

    def close(self) -> None:
        """Freeze now with the values collected so far (none: stays open): what follows a gap in the log is not the
        start of the run."""
        if self.value != self.value and self._vals:
            self.value = median(self._vals)
            self._vals = []

    @property
    def ready(self) -> bool:
        return self.value == self.value

    def state_dict(self) -> dict[str, object]:
        return {"size": self.size, "vals": list(self._vals), "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.size = int(state["size"])
        self._vals = [float(v) for v in state["vals"]]
        self.value = float(state["value"])


class StepGaps:
    """The log's logging interval in steps and how many of them each row stands for: baselines span steps, not rows.

    The interval is the median step gap of the first ``learn`` gaps (at least ``min_gaps`` of them: a first row at
    step 1 before an interval of 10 is one odd gap). A row more than ``factor`` intervals after the previous one
    follows a gap in the log (a trimmed, sparse or resumed log): what comes after it is not "early in the run", so a
    baseline still collecting closes there, and a smoothed level starts over (``Ewma.restart``).
    """

    __slots__ = ("factor", "learn", "min_gaps", "last", "gaps", "interval")

    def __init__(self, factor: float = 4.0, learn: int = 9, min_gaps: int = 3) -> None:
        self.factor = factor
        self.learn = learn
        self.min_gaps = min_gaps
        self.last = math.nan
        self.gaps: list[float] = []
        self.interval = math.nan

    def push(self, step: float) -> bool:
        """Whether the row at ``step`` follows a gap in the log (never on the first rows, before the interval shows,
        nor on a repeated step or a step counter that went back)."""
        step = float(step)  # a step is an int; kept as the float it is typed as (the compiled core converts it too)
        last, self.last = self.last, step
        gap = step - last
        if not gap > 0:
            return False
        interval = self.interval
        if interval != interval:
            gaps = self.gaps
            if len(gaps) >= self.min_gaps and gap > self.factor * median(gaps):
                self.interval = median(gaps)  # the gap itself is not the interval
                return True
            gaps.append(gap)
            if len(gaps) >= self.learn:
                self.interval = median(gaps)
            return False
        return gap > self.factor * interval

    def state_dict(self) -> dict[str, object]:
        return {"last": self.last, "gaps": list(self.gaps), "interval": self.interval}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.last = float(state["last"])  # type: ignore[arg-type]
        self.gaps = [float(g) for g in state["gaps"]]  # type: ignore[attr-defined]
        self.interval = float(state["interval"])  # type: ignore[arg-type]


class RunningRegression:
    """Least-squares fit of y on x over *all* points so far, O(1) per point.

    Its slope t-statistic answers "is this trending up at all?" for the whole
    run, which a pair of short windows answers badly on noisy rewards.
    """

    __slots__ = ("n", "sx", "sy", "sxx", "sxy", "syy")

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.sxy = self.syy = 0.0

    def push(self, x: float, y: float) -> None:
        self.n += 1
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y
        self.syy += y * y

    def slope(self) -> float:
        n = self.n
        cxx = self.sxx - self.sx * self.sx / n if n else 0.0
        return (self.sxy - self.sx * self.sy / n) / cxx if n > 2 and cxx > 0 else 0.0

    def _fit(self) -> tuple[float, float] | None:
        """(slope, its standard error with independent residuals); None with fewer than 4 points or no spread."""
        n = self.n
        if n < 4:
            return None
        cxx = self.sxx - self.sx * self.sx / n
        if cxx <= 0:
            return None
        cxy = self.sxy - self.sx * self.sy / n
        cyy = self.syy - self.sy * self.sy / n
        b = cxy / cxx
        return b, math.sqrt(max(cyy - b * cxy, 0.0) / (n - 2) / cxx)

    def slope_se(self) -> float:
        """The slope's standard error with independent residuals (inf with fewer than 4 points)."""
        fit = self._fit()
        return fit[1] if fit is not None else math.inf

    def t_stat(self) -> float:
        """Slope divided by its standard error (0 when undefined; capped at ±1e6)."""
        fit = self._fit()
        if fit is None:
            return 0.0
        b, se = fit
        if se <= 0:
            return 0.0 if b == 0 else math.copysign(1e6, b)
        return max(-1e6, min(1e6, b / se))

    def state_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in slot_names(self)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        for k in slot_names(self):
            setattr(self, k, float(state[k]) if k != "n" else int(state[k]))


class RollingCorrelation:
    """Slope and Pearson correlation of the last ``size`` (x, y) pairs, with running sums: O(1) per pair."""

    __slots__ = ("size", "pts", "sx", "sy", "sxx", "syy", "sxy", "full")

    def __init__(self, size: int) -> None:
        self.size = max(2, int(size))
        self.pts: deque[tuple[float, float]] = deque(maxlen=self.size)
        self.full = False  # holds ``size`` pairs (kept by ``push``)
        self.sx = self.sy = self.sxx = self.syy = self.sxy = 0.0

    def push(self, x: float, y: float) -> None:
        x, y = float(x), float(y)  # kept as the floats they are typed as (an int step: the compiled core converts it)
        pts = self.pts
        if len(pts) == self.size:
            ox, oy = pts[0]
            # "-= old" then "+= new" as one expression: the same operations in the same order
            self.sx = self.sx - ox + x
            self.sy = self.sy - oy + y
            self.sxx = self.sxx - ox * ox + x * x
            self.syy = self.syy - oy * oy + y * y
            self.sxy = self.sxy - ox * oy + x * y
        else:
            self.sx += x
            self.sy += y
            self.sxx += x * x
            self.syy += y * y
            self.sxy += x * y
            self.full = len(pts) + 1 == self.size
        pts.append((x, y))

    def corr(self) -> float:
        n = len(self.pts)
        if n < 3:
            return 0.0
        sx, sy, sxx, syy = self.sx, self.sy, self.sxx, self.syy
        cxx = sxx - sx * sx / n
        cyy = syy - sy * sy / n
        cxy = self.sxy - sx * sy / n
        if cxx <= 1e-12 * (sxx if sxx > 1.0 else 1.0) or cyy <= 1e-12 * (syy if syy > 1.0 else 1.0):
            return 0.0
        r = cxy / math.sqrt(cxx * cyy)
        r = r if r < 1.0 else 1.0  # max(-1, min(1, r)), NaN to 1 as min/max take it
        return r if r > -1.0 else -1.0

    def __len__(self) -> int:
        return len(self.pts)

    def slope(self) -> float:
        """Least-squares slope of y on x (0 when undefined)."""
        n = len(self.pts)
        if n < 3:
            return 0.0
        den = n * self.sxx - self.sx * self.sx
        return (n * self.sxy - self.sx * self.sy) / den if den > 0 else 0.0

    def t_stat(self) -> float:
        """The slope's t-statistic, r·sqrt((n-2)/(1-r²)): how far the trend stands out of the window's noise."""
        n = len(self.pts)
        if n < 4:
            return 0.0
        r = self.corr()
        if r >= 1.0 or r <= -1.0:
            return math.copysign(1e6, r) if r else 0.0
        return r * math.sqrt((n - 2) / (1.0 - r * r))

    def mean_x(self) -> float:
        return self.sx / len(self.pts) if self.pts else math.nan

    def mean_y(self) -> float:
        return self.sy / len(self.pts) if self.pts else math.nan

    def state_dict(self) -> dict[str, object]:
        return {"size": self.size, "pts": [list(p) for p in self.pts],
                "sums": [self.sx, self.sy, self.sxx, self.syy, self.sxy]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__init__(int(state.get("size", self.size)))  # type: ignore[misc]
        for x, y in state.get("pts", []):
            self.push(float(x), float(y))
        if "sums" in state:  # the exact running sums (re-pushing gives them a few ulps off)
            self.sx, self.sy, self.sxx, self.syy, self.sxy = (float(v) for v in state["sums"])


#: A rolling least-squares slope is the same running sums; one class serves both.
RollingSlope = RollingCorrelation


class DiffNoise:
    """A series' step-to-step noise: std of its first differences over a window, divided by sqrt(2).

    Differencing removes a trend and a level, so this is the noise a rule should compare a change
    against, whatever the series is doing; one outlier moves it little over 20 rows.

    Autocorrelated noise (issue #28): the differences of an AR(1) noise with coefficient rho have variance
    2 sigma^2 (1 - rho), so they under-read the noise a level or a mean carries by sqrt(1 - rho), and a smoothed
    level of such noise wanders further than independent rows would let it. ``rho`` is estimated on the run's
    warm-up (``sequential.Ar1``, each difference clipped at 4 sigmas of those before it, so that one outlier row,
    which makes the differences look anti-correlated, does not hide the correlation), and ``level_se`` gives the
    standard error a rule compares a moved level against, with both effects in it.
    """

    __slots__ = ("last", "win", "ar1")

    def __init__(self, size: int = 20) -> None:
        self.last = math.nan
        self.win = RollingWindow(size)
        self.ar1 = Ar1(clip=4.0)

    def push(self, x: float) -> None:
        last = self.last
        if last == last:
            d = x - last
            self.win.push(d)
            if self.ar1.n < self.ar1.size:
                self.ar1.push_diff(d)
        self.last = x

    def sigma(self, robust: bool = False) -> float:
        """Std of the differences / sqrt(2); ``robust`` uses their MAD, which one spike cannot inflate."""
        if len(self.win) < 2:
            return math.nan
        return (self.win.robust()[1] if robust else self.win.std()) / math.sqrt(2.0)

    @property
    def rho(self) -> float:
        """The noise's AR(1) coefficient, from the warm-up (0 until a few dozen rows have been seen)."""
        return self.ar1.value

    def level_se(self, alpha: float, base_rows: int = 0, robust: bool = False) -> float:
        """The standard error of an EWMA(``alpha``) of the series minus the median of ``base_rows`` earlier rows
        (0: the EWMA alone), under AR(1) noise with the warm-up's ``rho``: the noise a moved level must stand out
        of. With rho = 0 it is sigma sqrt(alpha / (2 - alpha) + (pi / 2) / base_rows), as for independent rows."""
        sig = self.sigma(robust)
        if sig != sig:
            return math.nan
        rho = self.ar1.value
        return sig / math.sqrt(1.0 - rho) * math.sqrt(ewma_var_factor(alpha, rho)
                                                      + (_MEDIAN_VAR * ar1_var_factor(rho) / base_rows
                                                         if base_rows > 0 else 0.0))

    def cached_sigma(self) -> float:
        """The robust sigma as last computed by ``sigma(robust=True)`` (NaN before): a second reader that must not
        move the window's refresh phase, and with it the first reader's judgement."""
        return self.win._robust[1] / math.sqrt(2.0) if self.win._robust_at >= 0 else math.nan

    def __len__(self) -> int:
        return len(self.win)

    def state_dict(self) -> dict[str, object]:
        return {"last": self.last, "win": self.win.state_dict(), "ar1": self.ar1.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last = float(state.get("last", math.nan))
        self.win.load_state_dict(state.get("win", {}))
        self.ar1 = Ar1(clip=4.0)
        if "ar1" in state:
            self.ar1.load_state_dict(state["ar1"])


_MEDIAN_VAR = math.pi / 2.0
"""A median's variance over n independent normal rows, times n."""


class ShiftDetector:
    """Two-sided CUSUM of a series against a slow EWMA reference, in units of its own noise.

    ``up``/``down`` accumulate how far the series sits above/below where it has been, beyond an
    allowance of ``k`` sigmas per row; a value over ``h`` is a change point. A slow ramp keeps the
    reference close behind and adds nothing; a jump of a few sigmas crosses ``h`` within a few rows.
    The noise is the robust (MAD) sigma of recent residuals, so the threshold follows the run's own
    noise. ``since_up``/``since_down`` hold the row count at which the current excursion began.
    ``clip`` caps a row's fall (in sigmas), at twice that where the row before it was out past the clip too:
    heavy-tailed noise sends a row or two 8 sigmas down now and then, and a fall (the reward's warning) should take
    rows that hold. With the reward's k = 1, clip = 4, h = 12, no two rows cross h by themselves and any drop that
    holds three rows past 4 sigmas does, so a collapse is warned on its third row. A rise is not clipped: it is
    ``info`` read together with other gauges (the reward-hacking diagnosis), where a real jump counts from its row.
    """

    __slots__ = ("k", "h", "alpha", "warmup", "clip", "ref", "resid", "up", "down", "n", "since_up", "since_down",
                 "z")

    def __init__(self, k: float = 0.5, h: float = 8.0, alpha: float = 0.05, warmup: int = 10,
                 window: int = 30, clip: float = math.inf) -> None:
        self.k, self.h, self.alpha, self.warmup, self.clip = k, h, alpha, max(2, int(warmup)), clip
        self.ref = math.nan
        self.resid = RollingWindow(window)
        self.up = self.down = 0.0
        self.n = 0
        self.since_up = self.since_down = 0
        self.z = 0.0

    def push(self, x: float, floor: float = 1e-12, deflate: float = 1.0) -> None:
        """One value; ``deflate`` (>= 1, ``sequential.ar1_inflation`` of the noise's rho) divides each row's z: rows of
        autocorrelated noise carry less independent evidence each, and a CUSUM of them crosses h too soon."""
        n = self.n = self.n + 1
        ref = self.ref
        if ref != ref:
            self.ref = x
            return
        r = x - ref
        warm = n > self.warmup
        if warm:
            sigma = max(self.resid.robust()[1], floor)
            z = r / sigma / deflate
            prev, self.z = self.z, z
            if self.up <= 0.0:
                self.since_up = n
            if self.down <= 0.0:
                self.since_down = n
            # a row out below the clip adds at most clip - k to the fall, twice that where the row before it was out
            # too: no burst of two rows crosses h = 4 (clip - k) by itself, a collapse that holds a third row does
            clip, k = self.clip, self.k
            cap = 2.0 * clip if prev < -clip else clip
            self.up = max(0.0, self.up + z - k)
            self.down = max(0.0, self.down - max(z, -cap) - k)
        self.resid.push(r)
        self.ref = ref + (self.alpha * r if warm else (x - ref) / n)

    def sigma(self) -> float:
        return self.resid.robust()[1] if len(self.resid) >= 2 else math.nan

    def state_dict(self) -> dict[str, object]:
        # clip is the user's setting, not state: a resumed run takes the one it is given now
        return {k: getattr(self, k) for k in slot_names(self) if k not in ("resid", "clip")} | {
            "resid": self.resid.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in slot_names(self):
            if k == "resid":
                self.resid.load_state_dict(state.get("resid", {}))
            elif k in state and k != "clip":
                setattr(self, k, state[k])


class HalfRunTrend:
    """The trend of a series over (at least) the last half of the values seen so far, O(1) per value.

    A fixed window is too short for a slow learner in a long run and too long for a short one. A new
    regression starts at every power-of-two count; the one started at the previous power of two always
    covers between the last half and the last three quarters of the run, whatever its length.
    """

    __slots__ = ("n", "cur", "prev")

    def __init__(self) -> None:
        self.n = 0
        self.cur = RunningRegression()
        self.prev = RunningRegression()

    def push(self, y: float) -> None:
        n = self.n = self.n + 1
        if n >= 4 and n & (n - 1) == 0:  # a power of two: the current span becomes the previous
            self.prev, self.cur = self.cur, RunningRegression()
        x = float(n)
        self.cur.push(x, y)
        self.prev.push(x, y)

    def t_stat(self) -> float:
        return self.prev.t_stat()

    def rows(self) -> int:
        return self.prev.n

    def state_dict(self) -> dict[str, object]:
        return {"n": self.n, "cur": self.cur.state_dict(), "prev": self.prev.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = int(state["n"])
        self.cur.load_state_dict(state["cur"])
        self.prev.load_state_dict(state["prev"])


class OctaveMean:
    """The mean of a series over its previous octave: values number n/4 .. n/2 when n have been seen.

    A reference that moves with the run (the noise of a learning run drifts) yet always lies well
    before the present, so a change that builds over the last quarter of the run stands out against it.
    """

    __slots__ = ("n", "_sum", "_count", "value")

    def __init__(self) -> None:
        self.n = 0
        self._sum = 0.0
        self._count = 0
        self.value = math.nan

    def push(self, x: float) -> None:
        n = self.n = self.n + 1
        if n >= 4 and n & (n - 1) == 0:  # a power of two closes the octave
            if self._count:
                self.value = self._sum / self._count
            self._sum, self._count = 0.0, 0
        self._sum += x
        self._count += 1

    def state_dict(self) -> dict[str, object]:
        return {"n": self.n, "sum": self._sum, "count": self._count, "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = int(state["n"])
        self._sum = float(state["sum"])
        self._count = int(state["count"])
        self.value = float(state["value"])


class ScaleRef:
    """A noise scale's reference: the larger of its mean over the previous octave (values n/4 .. n/2) and its
    mean over everything up to the last power of two, once ``warmup`` values are in.

    The octave follows a noise that drifts with the run (a binary reward's noise moves with its success
    rate); the long mean keeps a change that began early, or a lull, from lowering the bar.
    """

    __slots__ = ("oct", "cum_sum", "cum_n", "cum", "warmup")

    def __init__(self, warmup: int = 16) -> None:
        self.oct = OctaveMean()
        self.cum_sum, self.cum_n, self.cum = 0.0, 0, math.nan
        self.warmup = warmup

    @property
    def n(self) -> int:
        return self.oct.n

    @property
    def value(self) -> float:
        o = self.oct.value
        return max(o, self.cum) if self.oct.n >= self.warmup and o == o else math.nan

    def push(self, x: float) -> None:
        self.oct.push(x)
        n = self.oct.n
        if n >= 4 and n & (n - 1) == 0:
            self.cum = self.cum_sum / self.cum_n
        self.cum_sum += x
        self.cum_n += 1

    def state_dict(self) -> dict[str, object]:
        return {"oct": self.oct.state_dict(), "cum": [self.cum_sum, self.cum_n, self.cum], "warmup": self.warmup}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.oct.load_state_dict(state["oct"])
        cs, cn, cm = state["cum"]
        self.cum_sum, self.cum_n, self.cum = float(cs), int(cn), float(cm)
        self.warmup = int(state.get("warmup", self.warmup))


class NoiseCusum:
    """One-sided CUSUM for a series turning noisy, against the run's own earlier noise.

    Each value's deviation from the median of the three before it (a level, a trend and a lone spike
    barely move that median) is compared with ``c`` reference scales; the CUSUM adds ``log(p1/p0)``
    for a deviation beyond that and ``log((1-p1)/(1-p0))`` otherwise: a Bernoulli likelihood ratio
    for "beyond c scales" becoming frequent (``p1``) instead of rare (``p0``). Counting exceedances
    rather than summing squares keeps a heavy-tailed series (KL's per-step noise has kurtosis in the
    hundreds) from firing on one outlier, and a few noisy rows are enough when the scale jumps.

    The reference scale is the larger of two means of the 20-row robust (MAD) scale: over the run's
    previous octave (values n/4 .. n/2) and over all values up to the last power of two. A noise that
    ramps up slowly still stands out against the older of the two; a short lull in a heavy-tailed
    series does not set the bar low.
    """

    __slots__ = ("c", "up", "down", "prev", "win", "ref", "s", "ratio")

    def __init__(self, c: float = 3.0, p0: float = 0.05, p1: float = 0.3, window: int = 20,
                 warmup: int = 16) -> None:
        self.c = c
        self.up, self.down = math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0))
        self.prev: list[float] = []
        self.win = RollingWindow(window)
        self.ref = ScaleRef(warmup)
        self.s = 0.0
        self.ratio = math.nan  # the current 20-row scale over the reference

    def push(self, y: float) -> None:
        prev = self.prev
        if len(prev) == 3:
            a, b, c = prev
            med = a if (b <= a <= c or c <= a <= b) else (b if (a <= b <= c or c <= b <= a) else c)
            r = y - med
            ref = self.ref.value
            if ref > 0:
                self.s = max(0.0, self.s + (self.up if abs(r) > self.c * ref else self.down))
            win = self.win
            win.push(r)
            if win.full:
                m = win.robust()[1]
                self.ratio = m / ref if ref > 0 else math.nan
                self.ref.push(m)
            prev.pop(0)
        prev.append(y)

    def state_dict(self) -> dict[str, object]:
        return {"prev": list(self.prev), "win": self.win.state_dict(), "ref": self.ref.state_dict(), "s": self.s,
                "ratio": self.ratio}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prev = [float(v) for v in state.get("prev", [])]
        self.win.load_state_dict(state.get("win", {}))
        self.ref.load_state_dict(state["ref"])
        self.s, self.ratio = float(state["s"]), float(state["ratio"])


def step_skew(values: Iterable[float]) -> float:
    """Skewness of a series' row-to-row steps: near 0 for a swing that goes up and down alike, far from it for a
    staircase (one large step per cycle, small ones between)."""
    v = list(values)
    steps = [b - a for a, b in zip(v, v[1:], strict=False)]
    n = len(steps)
    if n < 3:
        return 0.0
    m = sum(steps) / n
    var = sum((x - m) ** 2 for x in steps) / n
    if var <= 0.0:
        return 0.0
    skew: float = sum((x - m) ** 3 for x in steps) / n / var**1.5
    return skew


class PeriodicFit:
    """How much of a window's wiggle one sinusoid explains: the best fit over periods of ``min_period`` ..
    ``size / 2.5`` values (at least two and a half cycles in the window), after a quadratic trend is removed.

    ``compute()`` gives ``(share, amplitude, period)``: the share of the detrended variance that the best period
    explains (batch noise spreads over every period, so a white-noise window of 32 explains about 0.2 at its best
    one; a swing that repeats explains most of it), the sinusoid's amplitude in the series' units, and its period in
    values. The sine and cosine of each period are orthonormalised against the trend once, so a reading is two dot
    products per period.
    """

    __slots__ = ("size", "buf", "periods", "_trend", "_basis")

    def __init__(self, size: int, min_period: float = 3.5, step: float = 0.5) -> None:
        self.size = max(8, int(size))
        self.buf: deque[float] = deque(maxlen=self.size)
        w = self.size
        xs = [i - (w - 1) / 2.0 for i in range(w)]
        self._trend = _orthonormal([[1.0] * w, xs, [x * x for x in xs]], [])
        self.periods: list[float] = []
        self._basis: list[tuple[list[float], list[float]]] = []
        p = min_period
        while p <= w / 2.5 + 1e-9:
            om = 2.0 * math.pi / p
            pair = _orthonormal([[math.sin(om * x) for x in xs], [math.cos(om * x) for x in xs]], self._trend)
            if len(pair) == 2:
                self.periods.append(p)
                self._basis.append((pair[0], pair[1]))
            p += step

    def push(self, x: float) -> None:
        self.buf.append(x)

    @property
    def full(self) -> bool:
        return len(self.buf) == self.size

    def clear(self) -> None:
        self.buf.clear()

    def compute(self, min_amp: float = 0.0) -> tuple[float, float, float]:
        """``min_amp``: skip the fit (and read nothing) when the detrended variance is too small to hold a
        sinusoid of that amplitude: most rows of a healthy run, at the cost of three dot products."""
        if not self.full or not self._basis:
            return 0.0, 0.0, math.nan
        y = self.buf
        energy = sum(map(mul, y, y))
        resid = energy - sum(sum(map(mul, t, y)) ** 2 for t in self._trend)
        if not resid > 1e-12 * energy + 1e-300:  # the trend explains it all (to rounding): nothing swings
            return 0.0, 0.0, math.nan
        if resid < 0.5 * min_amp * min_amp * self.size:  # a sinusoid of amplitude A holds A^2 W / 2 of it
            return 0.0, 0.0, math.nan
        best, at = 0.0, 0
        for i, (s, c) in enumerate(self._basis):
            a = sum(map(mul, s, y))
            b = sum(map(mul, c, y))
            pw = a * a + b * b
            if pw > best:
                best, at = pw, i
        return min(best / resid, 1.0), math.sqrt(2.0 * best / self.size), self.periods[at]

    def state_dict(self) -> dict[str, object]:
        return {"size": self.size, "buf": list(self.buf)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        size = int(state.get("size", self.size))
        if size != self.size:
            self.__init__(size)  # type: ignore[misc]
        self.buf.clear()
        for v in state.get("buf", []):
            self.buf.append(float(v))


def _orthonormal(vectors: list[list[float]], against: list[list[float]]) -> list[list[float]]:
    """Gram-Schmidt: ``vectors`` made orthonormal to each other and to the orthonormal ``against`` (a vector that
    lies in their span is dropped)."""
    out: list[list[float]] = []
    for v in vectors:
        v = list(v)
        for _ in range(2):  # twice: one pass loses orthogonality in floating point
            for u in against + out:
                d = math.fsum(a * b for a, b in zip(u, v, strict=True))
                v = [a - d * b for a, b in zip(v, u, strict=True)]
        norm = math.sqrt(math.fsum(a * a for a in v))
        if norm > 1e-9 * math.sqrt(len(v)):
            out.append([a / norm for a in v])
    return out
