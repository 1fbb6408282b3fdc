"""The reward gauge's gold coupling: the trained (proxy) reward read against a held-out (gold) one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .gauge import Gauge, finite
from .part import GaugePart
from .reward_series import EWMA10_SD, RewardSeries, noise_floor
from .reward_volatility import RewardVolatilityPart
from .rule import INSTRUMENTS, Example, Maker, Rule
from .sequential import Ar1, ar1_var_factor, ewma_var_factor
from .stats import (
    DiffNoise,
    Ewma,
    HalfRunTrend,
    RollingCorrelation,
    RollingWindow,
)
from .streams import GOLD, grpo, ramp, with_gold


class GoldCoupling:
    """The gold reward read against the proxy component whose row-to-row noise it shares.

    A held-out check and the trained reward score the same completions, so a batch that happens to be
    easy moves both: the gold's noise is largely the proxy's. Regressing the gold's row-to-row changes on
    each trained component's (and on the total reward's) finds the component that measures the same thing
    (the correctness reward, not the format reward) and its slope ``beta``; ``gold - beta * component`` then
    cancels the shared noise and is flat while the gains are real, whatever the reward does. It falls when
    the proxy's gains stop reaching the gold (Gao et al. 2023), long before the noisy gold alone shows it.

    The reference is the best level that difference held over a completed octave of the run (values
    2^k .. 2^(k+1)), taken at its lower confidence bound so one lucky octave does not set it; the
    comparison's standard error includes the slope's own uncertainty.
    """

    __slots__ = ("alpha", "sums", "last", "last_g", "n", "octs", "cur", "eg", "ep", "noise", "last_u", "match",
                 "beta", "rho", "beta_se", "ar")

    def __init__(self, noise_rows: int = 60, alpha: float = 0.1) -> None:
        self.alpha = alpha
        self.sums: dict[str, list[float]] = {}  # key -> [n, sum dx, sum dg, sum dx^2, sum dg^2, sum dx*dg]
        self.last: dict[str, float] = {}
        self.last_g = math.nan
        self.n = 0
        self.octs: list[list[Any]] = []  # completed octaves: [rows, mean gold, {key: mean}, last step]
        self.cur: list[Any] = [0, 0.0, {}, 0]
        self.eg = math.nan
        self.ep: dict[str, float] = {}
        self.noise = RollingWindow(noise_rows)
        self.last_u = math.nan
        self.match, self.beta, self.rho, self.beta_se = "", 0.0, 0.0, 0.0
        self.ar = Ar1(clip=4.0)  # the difference's own autocorrelation (issue #28): its standard errors grow with it

    def push(self, step: int, g: float, proxies: Mapping[str, float]) -> None:
        a = self.alpha
        self.n += 1
        n = self.n
        if n >= 4 and n & (n - 1) == 0 and self.cur[0]:  # close the octave
            c = self.cur[0]
            self.octs.append([c, self.cur[1] / c, {k: x / c for k, x in self.cur[2].items()}, self.cur[3]])
            self.cur = [0, 0.0, {}, 0]
        cur = self.cur
        cur[0] += 1
        cur[1] += g
        cur[3] = step
        lg = self.last_g
        for k, x in proxies.items():
            lx = self.last.get(k)
            if lx is not None and lg == lg:
                dx, dg = x - lx, g - lg
                sm = self.sums.get(k)
                if sm is None:
                    sm = self.sums[k] = [0.0] * 6
                sm[0] += 1
                sm[1] += dx
                sm[2] += dg
                sm[3] += dx * dx
                sm[4] += dg * dg
                sm[5] += dx * dg
            self.last[k] = x
            e = self.ep.get(k)
            self.ep[k] = x if e is None else e + a * (x - e)
            cur[2][k] = cur[2].get(k, 0.0) + x
        self.last_g = g
        self.eg = g if self.eg != self.eg else self.eg + a * (g - self.eg)
        # the component the gold moves with, and how strongly
        best, rho_b, beta, se = "", 0.0, 0.0, 0.0
        for k, sm in self.sums.items():
            m = sm[0]
            if m < 10:
                continue
            cxx = sm[3] - sm[1] * sm[1] / m
            cyy = sm[4] - sm[2] * sm[2] / m
            cxy = sm[5] - sm[1] * sm[2] / m
            if cxx <= 0 or cyy <= 0:
                continue
            rho = cxy / math.sqrt(cxx * cyy)
            if rho > rho_b:
                best, rho_b, beta = k, rho, cxy / cxx
                se = math.sqrt(max(cyy - beta * cxy, 0.0) / max(m - 2, 1.0) / cxx)
        self.match, self.rho, self.beta, self.beta_se = best, rho_b, beta, se
        if best in proxies:
            u = g - beta * proxies[best]
            if self.last_u == self.last_u:
                self.noise.push(u - self.last_u)
                self.ar.push_diff(u - self.last_u)
            self.last_u = u
        elif best:  # the matched function is missing or NaN on this row (TRL logs NaN for one that returned None)
            self.last_u = math.nan

    def drop(self, inflate: float = 1.25, z_ref: float = 1.0, min_rows: int = 8) -> tuple[float, list[Any] | None]:
        """How far (in standard errors) gold - beta * component now sits below its best octave, and that octave."""
        k = self.match
        if not k or len(self.noise) < 10:
            return 0.0, None
        beta = self.beta
        # the row noise of the difference: its changes under-read it by sqrt(1 - rho) where it is autocorrelated,
        # and a mean over m rows of it varies (1 + rho) / (1 - rho) times more than over m independent ones
        rho = self.ar.value
        sig = inflate * self.noise.std() / math.sqrt(2.0 * (1.0 - rho))
        vf = ar1_var_factor(rho)
        best: list[Any] | None = None
        best_lcb = -math.inf
        for o in self.octs:
            if o[0] >= min_rows and k in o[2]:
                lcb = o[1] - beta * o[2][k] - z_ref * sig * math.sqrt(vf / o[0])
                if lcb > best_lcb:
                    best_lcb, best = lcb, o
        if best is None:
            return 0.0, None
        ref = best[1] - beta * best[2][k]
        now = self.eg - beta * self.ep[k]
        dp = self.ep[k] - best[2][k]
        se = math.sqrt(sig * sig * (ewma_var_factor(self.alpha, rho) + vf / best[0]) + (self.beta_se * dp) ** 2)
        return (ref - now) / max(se, 1e-12), best

    def state_dict(self) -> dict[str, Any]:
        return {"sums": self.sums, "last": self.last, "last_g": self.last_g, "n": self.n, "octs": self.octs,
                "cur": self.cur, "eg": self.eg, "ep": self.ep, "noise": self.noise.state_dict(), "last_u": self.last_u,
                "fit": [self.match, self.beta, self.rho, self.beta_se], "ar": self.ar.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sums = {k: [float(x) for x in v] for k, v in state["sums"].items()}
        self.last = {k: float(x) for k, x in state["last"].items()}
        self.last_g, self.n = float(state["last_g"]), int(state["n"])
        self.octs = [[int(o[0]), float(o[1]), {k: float(x) for k, x in o[2].items()}, int(o[3])] for o in state["octs"]]
        c = state["cur"]
        self.cur = [int(c[0]), float(c[1]), {k: float(x) for k, x in c[2].items()}, int(c[3])]
        self.eg = float(state["eg"])
        self.ep = {k: float(x) for k, x in state["ep"].items()}
        self.noise.load_state_dict(state["noise"])
        self.last_u = float(state["last_u"])
        m, b, r, se = state["fit"]
        self.match, self.beta, self.rho, self.beta_se = str(m), float(b), float(r), float(se)
        self.ar = Ar1(clip=4.0)
        if "ar" in state:
            self.ar.load_state_dict(state["ar"])


class RewardGoldPart(GaugePart):
    """Proxy vs gold: the trained reward rising while a held-out reward (``params.reward.gold``) stalls or falls,
    or rising far faster than it; or the gold confirming the gains."""

    def __init__(self, gauge: Gauge, series: RewardSeries, volatility: RewardVolatilityPart) -> None:
        super().__init__(gauge)
        self.series = series
        self.volatility = volatility
        p = gauge.p
        # gold: the held-out reward functions, averaged into one series
        self.gold_keys = tuple(f"rewards/{g}/mean" for g in p["gold"])
        self.gold_names = ", ".join(f"'{g}'" for g in p["gold"])
        self.gold_e = Ewma(p["gold_alpha"])
        self.gold_first = RollingWindow(p["window"])
        self.gold_peak = -math.inf
        self.gold_peak_step = 0
        self.gold_peak_row = 0
        self.proxy_at_gold_peak = math.nan
        self.proxy_trend = RollingCorrelation(30)
        self.gold_trend = RollingCorrelation(60)  # long: a slowly rising, noisy gold must not look stalled
        self.gold_half = HalfRunTrend()  # gold and proxy over the same second half of the run so far
        self.proxy_half = HalfRunTrend()
        self.half_from = [0, 0]  # steps where the half-run spans (previous, current) began
        self.half_levels = [0.0, 0.0, 0.0, 0.0]  # proxy and gold EWMAs there: (prev proxy, prev gold, cur ...)
        # the trained components' EWMAs where the gold peaked, and where the half-run spans began (prev, cur)
        self.comps_at_gold_peak: dict[str, float] = {}
        self.comps_at_half: list[dict[str, float]] = [{}, {}]
        self.coupling = GoldCoupling(p["gold_noise_rows"], p["gold_alpha"])
        self.gold_runs = [0, 0]  # consecutive rows the (after-peak, coupled) divergence has held
        # the proxy's lead over the gold in shares of their headroom: both must be rates in [0, 1], and each gain is
        # read against the row-to-row noise of its own series
        self.gold_row_noise = DiffNoise(30)
        self.gold_unit = True

    def gold_score(self, v: Mapping[str, float]) -> float | None:
        """The first gold function's value in the row (the task score beside a shaped reward, verl)."""
        return next((v[k] for k in self.gold_keys if k in v), None)

    def observe(self, v: Mapping[str, float], key: str, r: float, e: float,
                comp_keys: tuple[tuple[str, str, str], ...]) -> None:
        if not self.gold_keys:
            return
        g = self.gauge
        n = self.series.reward_rows
        self.proxy_trend.push(float(n), r)
        ge = self._track(v, key, e, comp_keys)
        if ge is not None:
            self._judge(key, e, ge)
        if not len(self.gold_first) and n >= 5:  # a typo in the name must not look like a silent gold
            g.note = (f"gold reward {self.gold_names} not in the log (expected "
                      f"{', '.join(self.gold_keys)})")
        elif g.note.startswith("gold reward"):
            g.note = ""

    def _track(self, v: Mapping[str, float], key: str, e: float,
               comp_keys: tuple[tuple[str, str, str], ...]) -> float | None:
        """The gold's level, peak, half-run spans and coupling to the trained components; its EWMA (None: no gold
        in the row)."""
        gs = [v[k] for k in self.gold_keys if k in v and finite(v[k])]
        if not gs:
            return None
        gauge = self.gauge
        d = gauge.derived
        g = sum(gs) / len(gs)
        ge = self.gold_e.push(g)
        self.gold_trend.push(float(self.series.reward_rows), g)
        self.gold_half.push(g)
        self.proxy_half.push(v[key])
        k = self.gold_half.n
        new_half = k >= 4 and k & (k - 1) == 0
        if new_half:
            self.half_from = [self.half_from[1], gauge.step]
            self.half_levels = [*self.half_levels[2:], e, ge]
        if not self.gold_first.full:
            self.gold_first.push(g)
        self.gold_row_noise.push(g)
        self.gold_unit = self.gold_unit and 0.0 <= g <= 1.0
        n = self.series.reward_rows
        # the peak of an EWMA that has seen a handful of rows is one noisy row: track it once the start is in
        peaked = ge > self.gold_peak and self.gold_first.full
        if peaked:
            self.gold_peak, self.gold_peak_step, self.gold_peak_row, self.proxy_at_gold_peak = ge, gauge.step, n, e
        d["gold"] = g
        d["gold_ewma"] = ge
        d["gold_peak"] = self.gold_peak if self.gold_peak > -math.inf else ge
        proxies = {mk: v[mk] for _, mk, _ in comp_keys if mk in v and finite(v[mk])}
        proxies[key] = v[key]
        cp = self.coupling
        cp.push(gauge.step, g, proxies)
        if peaked:
            self.comps_at_gold_peak = dict(cp.ep)
        if new_half:
            self.comps_at_half = [self.comps_at_half[1], dict(cp.ep)]
        return ge

    def _judge(self, key: str, e: float, ge: float) -> None:
        """Once both start windows are in: the proxy outpacing the gold, the gold rising, the two diverging."""
        first = self.series.first
        if not (first.full and self.gold_first.full):
            return
        g = self.gauge
        p = g.p
        d = g.derived
        n = self.series.reward_rows
        proxy_sigma = max(first.std(), noise_floor(first.mean()))
        gold_sigma = max(self.gold_first.std(), noise_floor(self.gold_first.mean()))
        proxy_gain = (e - first.mean()) / proxy_sigma
        gold_gain = (ge - self.gold_first.mean()) / gold_sigma
        gap = proxy_gain - gold_gain
        d["proxy_gold_gap"] = gap
        # the proxy's rise since the gold's peak, in standard errors of its EWMA (not of one noisy row)
        since = (e - self.proxy_at_gold_peak) / (proxy_sigma * EWMA10_SD * math.sqrt(2.0))
        d["proxy_gain_since_gold_peak"] = since
        stall = n - self.gold_peak_row
        t = self.proxy_trend.t_stat()
        gt = self.gold_trend.t_stat()
        d["gold_trend_t"] = gt
        se = EWMA10_SD * math.sqrt(2.0)
        after_peak = (stall >= p["gold_stall_rows"] and since >= p["gold_gap_sigma"] and t >= 2.0
                      and gt <= p["gold_stall_t"]
                      and not self._gold_follows(key, self.gold_peak, ge, self.comps_at_gold_peak, gold_sigma * se))
        # the same over the second half of the run so far (a noisy gold's EWMA peak sits high by chance): the
        # proxy's EWMA rose clearly, the gold's did not, and their trends agree
        pht, ght = self.proxy_half.t_stat(), self.gold_half.t_stat()
        d["gold_half_t"] = ght
        # the gold confirming the proxy's gains: what lets the reward-hacking diagnosis stand down (a gold that is
        # merely logged, flat, confirms nothing)
        outpaced = self._gold_share(key, e, ge)
        g.check("proxy-outpaces-gold", outpaced, "warn", key, e,
                lambda: self._outpaced_message(key, e, ge), for_=p["gold_share_for"], clear=10)
        g.check("gold-rising", self.gold_half.rows() >= 20 and ght >= p["gold_rising_t"] and not outpaced, "info",
                self.gold_keys[0], ge,
                lambda: f"the gold reward {self.gold_names} rises with the trained reward (trend t={ght:.1f} over "
                "the second half of the run so far): the gains are confirmed by the held-out check.", clear=5)
        proxy_rise = (e - self.half_levels[0]) / (proxy_sigma * se)
        gold_rise = (ge - self.half_levels[1]) / (gold_sigma * se)
        over_half = (self.gold_half.rows() >= 20 and pht >= 2.0 and ght <= p["gold_stall_t"]
                     and proxy_rise >= p["gold_gap_sigma"] and gold_rise <= 0.0
                     and not self._gold_follows(key, self.half_levels[1], ge, self.comps_at_half[0], gold_sigma * se))
        self._diverging(key, e, ge, after_peak, over_half, gap, gold_sigma)

    def _diverging(self, key: str, e: float, ge: float, after_peak: bool, over_half: bool, gap: float,
                   gold_sigma: float) -> None:
        """``proxy-gold-divergence``: after the gold's peak, over the run's second half, or (coupled) the gold
        below its best level relative to the component it moves with, while the proxy has not fallen."""
        g = self.gauge
        p = g.p
        d = g.derived
        cp = self.coupling
        first = self.series.first
        drop, ref = cp.drop()
        d["gold_drop"] = drop
        warm = self.series.reward_rows >= g.min_rows(p["min_rows"], p["warmup_share"])
        coupled = (warm and cp.rho >= p["gold_rho"] and ref is not None and drop >= p["gold_drop_se"]
                   and e >= ref[2][key])
        runs = self.gold_runs
        runs[0] = runs[0] + 1 if warm and (after_peak or (over_half and p["gold_half"])) else 0
        runs[1] = runs[1] + 1 if coupled else 0
        gold_for, gold_drop_for = g.warn_rows(p["gold_for"]), g.warn_rows(p["gold_drop_for"])
        over = runs[0] >= gold_for or runs[1] >= gold_drop_for
        peak, pstep, p0 = self.gold_peak, self.gold_peak_step, self.proxy_at_gold_peak
        if over_half and not after_peak:
            pstep = self.half_from[0]
        how = ""
        if runs[1] >= gold_drop_for and ref is not None:
            pstep, p0, peak = ref[3], ref[2][key], ref[1]
            comp = cp.match[8:-5] if cp.match.startswith("rewards/") else cp.match
            how = (f" Read against '{comp}', whose batch-to-batch noise it shares (corr {cp.rho:.2f}), the gold is "
                   f"{drop:.1f} standard errors below where it stood by step {pstep}.")
        g.check("proxy-gold-divergence", over, "warn", key, e,
                lambda: f"over-optimisation: the proxy {key} rose from {p0:.3g} to {e:.3g} since step {pstep}, "
                f"while the gold reward {self.gold_names} stood at {peak:.3g} there and is now "
                f"{ge:.3g} ({'falling' if ge < peak - 0.5 * gold_sigma else 'stalled'}).{how} Proxy-gold gap since "
                f"the start: proxy {e - first.mean():+.3g}, gold {ge - self.gold_first.mean():+.3g} "
                f"({gap:.1f} sigma of their early noise). The policy is learning the proxy's loopholes, not the "
                f"task: keep the checkpoint from step {pstep}, then raise beta, fix the proxy, or stop earlier.",
                clear=10)

    def _gold_share(self, key: str, e: float, ge: float) -> bool:
        """The proxy closed a share of its headroom the gold's gain is a small fraction of: reward hacking even
        where the gold's tiny rise is statistically real.

        Both are rates in [0, 1] (a pass rate, a judge's score), so each gain is read as the share of the way from
        its start to a perfect 1 it has come (scale-free: a gold stuck at 0.1-0.6 % correct beside a proxy gone from
        0.21 to 0.66 has come 0.4 % of its way, the proxy 57 %). The proxy's gain must stand ``gold_gap_sigma``
        standard errors out of its own row-to-row noise, and the gold's share, at the top of its confidence interval
        (``gold_share_z`` standard errors of its own noise), must be under ``gold_share`` of the proxy's share at the
        bottom of its. Where the proxy is a sum of logged reward functions and the gold shares its row-to-row noise
        with one of them, a format reward learned long before correctness leads the total by design: the gold is
        judged against that component by ``proxy-gold-divergence``'s coupled reading instead.
        """
        p, d = self.gauge.p, self.gauge.derived
        cp = self.coupling
        if cp.match and cp.match != key and cp.rho >= p["gold_rho"]:
            return False  # the gold shares its noise with one trained component: the coupled reading judges it
        if (not (self.volatility.vol_unit and self.gold_unit) or len(self.gold_row_noise) < 10
                or len(self.series.r_noise) < 10):
            return False
        w = len(self.series.first)
        se_p = self.series.r_noise.level_se(p["gold_alpha"], w)
        se_g = self.gold_row_noise.level_se(p["gold_alpha"], len(self.gold_first))
        p0, g0 = self.series.first.mean(), self.gold_first.mean()
        room_p, room_g = max(1.0 - p0, 1e-3), max(1.0 - g0, 1e-3)
        z = p["gold_share_z"]
        proxy_share, gold_share = (e - p0) / room_p, (ge - g0) / room_g
        proxy_low, gold_high = (e - p0 - z * se_p) / room_p, (ge - g0 + z * se_g) / room_g
        d["proxy_headroom_gain"], d["gold_headroom_gain"] = proxy_share, gold_share
        d["gold_share_ucb"] = gold_high / proxy_low if proxy_low > 0 else math.inf
        if not (se_p == se_p and se_g == se_g) or e - p0 < p["gold_gap_sigma"] * se_p or proxy_low <= 0:
            return False
        return bool(gold_high < p["gold_share"] * proxy_low)

    def _outpaced_message(self, key: str, e: float, ge: float) -> str:
        d, p0, g0 = self.gauge.derived, self.series.first.mean(), self.gold_first.mean()
        return (f"reward hacking: the proxy {key} rose from {p0:.3g} to {e:.3g}, {d['proxy_headroom_gain']:.0%} of "
                f"its way to 1, while the gold reward {self.gold_names} went from {g0:.3g} to {ge:.3g}, "
                f"{d['gold_headroom_gain']:.1%} of its way (at most {d['gold_share_ucb']:.0%} of the proxy's share "
                f"at {self.gauge.p['gold_share_z']:g} standard errors of each one's noise). The policy learns what the "
                "proxy pays for, not the task: read samples the proxy scores high and the gold low, fix the proxy, "
                "or train on the gold.")

    def _gold_follows(self, key: str, gold_then: float, gold_now: float, comps_then: Mapping[str, float],
                      se: float) -> bool:
        """The gold stalled with the trained component whose batch noise it shares while another one carries the
        total's rise: a format reward learned before correctness, not over-optimisation.

        Read against its component (``gold - beta * component``), the gold has not fallen by
        ``gold_explained_se`` standard errors of its EWMA, and the gold itself sits within ``gold_stall_se`` of
        them of where it stood: a stall, not a fall. A gold falling with its component while the total rises is
        correctness given up for a gamed reward, and still fires (a review found a gate without that second
        reading silent on it).
        """
        cp = self.coupling
        m, lim = cp.match, self.gauge.p["gold_explained_se"]
        if lim <= 0 or not m or m == key or cp.rho < self.gauge.p["gold_rho"] or m not in comps_then or m not in cp.ep:
            return False
        fall = gold_then - gold_now
        unexplained = fall - cp.beta * (comps_then[m] - cp.ep[m])
        return bool(unexplained < lim * se and fall < self.gauge.p["gold_stall_se"] * se)


def _outpacing(proxy0: float, proxy_gain: float, gold0: float, gold_gain: float, gold_sd: float) -> Maker:
    """A GRPO run whose proxy and gold rates both rise from row 40 over 100 rows, by the gains given: a gold
    gaining a sliver of its headroom beside a proxy gaining most of its own, or the two rising together."""
    def make(i: int, g: np.random.Generator) -> dict[str, float]:
        up = ramp(i, 40, 100)
        gold = min(1.0, max(0.0, gold0 + gold_gain * up + gold_sd * g.normal()))
        return {**grpo(i, g, reward=proxy0 + proxy_gain * up), "rewards/gold/mean": gold}
    return make


#: The gold coupling's rules (``core/catalog.py`` collects them through ``reward.RULES``).
GOLD_RULES: tuple[Rule, ...] = (
    Rule(
        "reward", "gold-rising", severities=("info",),
        reads="the gold reward (params reward.gold): trend over the second half of the run",
        test="half-run t at least `gold_rising_t` over 20+ rows (info)",
        params=("gold_rising_t",),
        means="the held-out check confirms the gains",
        fix="nothing: this lets the reward-hacking diagnosis stand down",
        example=Example(
            "grpo", with_gold(False),
            lambda i, g: {**grpo(i, g, reward=0.3 + 0.5 * i / 200), "rewards/gold/mean": 0.3 - 0.02 * i / 200
                          + 0.03 * g.normal()},
            200, 1, 60, "rewards/gold/mean", GOLD),
    ),
    Rule(
        "reward", "proxy-gold-divergence", severities=("warn",),
        reads="proxy reward vs gold reward (EWMAs, trends, noise coupling)",
        test="gold stalled/fell since its peak while the proxy rose, held `gold_for` rows (or coupled drop "
             "`gold_drop_se`)",
        params=("gold_for", "gold_stall_rows", "gold_gap_sigma", "gold_drop_se"),
        means="over-optimisation: the policy learns the proxy's loopholes",
        fix="keep the checkpoint from before the divergence; raise beta; fix the proxy",
        seed="Proxy up while gold stalls or falls is over-optimisation (Gao et al. 2023).", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", with_gold(True), with_gold(False),
            200, 100, 160, "rewards/gold/mean", GOLD),
    ),
    Rule(
        "reward", "proxy-outpaces-gold", severities=("warn",),
        reads="proxy reward vs gold reward, both rates in [0, 1]: each one's gain as a share of its headroom (1 - its "
              "start), against its own row-to-row noise",
        test="the proxy up `gold_gap_sigma` standard errors while the gold's share, at `gold_share_z` standard errors "
             "above, is under `gold_share` of the proxy's at `gold_share_z` below, held `gold_share_for` rows",
        params=("gold_share", "gold_share_z", "gold_share_for", "gold_gap_sigma"),
        means="reward hacking: the proxy is paid for something the gold does not measure (a gold rising by a sliver "
              "beside it, statistically real or not)",
        fix="read samples the proxy scores high and the gold low; fix the proxy or train on the gold",
        example=Example(
            "grpo", _outpacing(0.2, 0.5, 0.005, 0.005, 0.002), _outpacing(0.4, 0.4, 0.3, 0.3, 0.03),
            200, 40, 110, "rewards/gold/mean", GOLD),
    ),
)
