"""Gauges 9-12 and the GRPO extras: reward, KL, policy ratio, length, entropy, reward signal.

Most of the seed post's "what to watch for" items are trends and spreads, not level lines: KL or
clipping *growing*, KL *noisy*, length *creeping*, the length *spread* collapsing, the margin
*plateauing*. Those rules judge a metric against its own start and its own step-to-step noise, and a
signal that is normal while a policy learns (entropy falling, answers getting shorter) takes its
severity from the context: is the reward (and the gold reward, when one is logged) still rising?
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .bounded import RewardLevel
from .gauge import Gauge, finite
from .keys import Row
from .rollouts import ROLLOUT_DEFAULTS, ROLLOUT_OUTPUTS, length_rules, reward_rules, reward_signal_rules
from .sequential import Ar1, Cusum, ar1_inflation, arl_for, bounded_mean_sd
from .stats import (
    Baseline,
    DiffNoise,
    Ewma,
    HalfRunTrend,
    NoiseCusum,
    OctaveMean,
    RollingCorrelation,
    RollingSlope,
    RollingWindow,
    RunningRegression,
    ScaleRef,
    ShiftDetector,
    poisson_tail,
    robust_z,
)

PREFERENCE_FAMILIES = frozenset({"dpo", "kto", "orpo"})
GROUP_FAMILIES = frozenset({"grpo"})


def _floor(level: float) -> float:
    """A noise floor for a series at ``level``: a constant start must not make every change infinite sigmas."""
    return 1e-3 * max(1.0, abs(level)) if level == level else 1e-3


class RewardProgress:
    """Is the run's reward still improving (and its gold reward, when one is logged)?

    The context that tells a learning run's normal signals from a failing run's: entropy falling,
    answers getting shorter, the length spread narrowing are what a policy does while it sharpens on
    a reward that keeps rising, and what it does when it collapses onto a template while the reward
    stays flat. Each gauge that needs the context keeps its own copy, so gauges stay independent and the
    batch path (gauge by gauge) sees what the live path sees. A row's reward is only queued; the statistics
    take the queue when a rule asks (most rows ask nothing), in the same order, so the answers are the same.
    """

    __slots__ = ("reg", "recent", "now", "half", "gold_keys", "gold_reg", "n", "_queue")

    def __init__(self, gold: Iterable[str] = (), recent: int = 30, now: int = 45) -> None:
        self.reg = RunningRegression()
        self.recent = RollingWindow(recent)
        self.now = RollingCorrelation(now)  # (row, reward): is it still rising?
        self.half = HalfRunTrend()  # ... the same, before 45 rows are in: over the second half of the run so far
        self.gold_keys = tuple(f"rewards/{g}/mean" for g in gold)
        self.gold_reg = RunningRegression()
        self.n = 0
        self._queue: list[tuple[float, float | None]] = []  # (reward, gold mean or None), not yet in the statistics

    @classmethod
    def shortened(cls, gauge: Gauge) -> RewardProgress:
        """The same context for ``gauge`` in a short run: its windows shortened as the gauge's own (``Gauge.rows``)."""
        return cls(gauge.p["gold"], recent=gauge.rows(30), now=gauge.rows(45))

    def push(self, v: Mapping[str, float]) -> None:
        r = v.get("reward")
        if r is None:
            r = v.get("objective/scores")
        if r is None or not finite(r):
            return
        gold = None
        if self.gold_keys:
            gs = [v[k] for k in self.gold_keys if k in v and finite(v[k])]
            if gs:
                gold = sum(gs) / len(gs)
        self._queue.append((r, gold))
        if len(self._queue) >= 256:  # bounded memory however long no rule asks
            self._take()

    def _take(self) -> None:
        """Fold the queued rows into the statistics (nothing to do when the queue is empty)."""
        for r, gold in self._queue:
            self.n += 1
            self.reg.push(float(self.n), r)
            self.recent.push(r)
            self.now.push(float(self.n), r)
            self.half.push(r)
            if gold is not None:
                self.gold_reg.push(float(self.n), gold)
        self._queue.clear()

    def known(self) -> bool:
        """Enough reward rows to say anything (a log without a reward has no context)."""
        self._take()
        return self.n >= 10

    def improving(self, min_t: float = 1.0, now: bool = False, short: bool = True) -> bool:
        """Rising over the run (trend t >= ``min_t``: rewards are noisy), not back below its own average, and the
        gold reward, when one is logged, not falling (t > -1: a noisy held-out check rarely shows a clear rise,
        and a flat one's trend is as often a little negative as a little positive).

        ``now``: also still clearly rising over the last 45 rows (t >= 1.5; in a shorter log, over its second
        half once that holds 15 rows, unless ``short`` is False); a reward that climbed early and then stalled
        stays "up over the run" long after it stopped improving.
        """
        self._take()
        if self.n < 10 or self.reg.t_stat() < min_t:
            return False
        if now and (self.now.t_stat() if self.now.full else self.half.t_stat() if short and self.half.rows() >= 15
                    else math.inf) < 1.5:
            return False
        if self.recent.mean() < self.reg.sy / self.reg.n:
            return False
        return not self.gold_keys or self.gold_reg.n < 10 or self.gold_reg.t_stat() > -1.0

    def state_dict(self) -> dict[str, Any]:
        self._take()
        return {"reg": self.reg.state_dict(), "recent": self.recent.state_dict(), "now": self.now.state_dict(),
                "half": self.half.state_dict(), "gold_reg": self.gold_reg.state_dict(), "n": self.n}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.reg.load_state_dict(state["reg"])
        self.recent.load_state_dict(state["recent"])
        self.now.load_state_dict(state["now"])
        if "half" in state:  # checkpoints from before it was kept
            self.half.load_state_dict(state["half"])
        self.gold_reg.load_state_dict(state["gold_reg"])
        self.n = int(state["n"])
        self._queue.clear()


class _Component:
    """One reward function's running picture: where it started, its smoothed level, ceiling and spread."""

    __slots__ = ("start", "std_start", "mean", "std", "peak")

    def __init__(self, window: int) -> None:
        self.start = RollingWindow(window)  # frozen once full
        self.std_start = RollingWindow(window)
        self.mean = Ewma(0.1)
        self.std = Ewma(0.2)
        self.peak = -math.inf

    def push(self, mean: float, std: float | None) -> None:
        e = self.mean.push(mean)
        if not self.start.full:
            self.start.push(mean)
        self.peak = max(self.peak, e)
        if std is not None and finite(std):
            self.std.push(std)
            if not self.std_start.full:
                self.std_start.push(std)

    def gain(self) -> float:
        """How far its smoothed level moved from its start, in units of its start's row-to-row spread."""
        m0 = self.start.mean()  # the start window is frozen once full: O(1) running sums
        return (self.mean.mean - m0) / max(self.start.std(), 0.02 * max(1.0, abs(m0)))

    def state_dict(self) -> dict[str, Any]:
        return {"start": self.start.state_dict(), "std_start": self.std_start.state_dict(),
                "mean": self.mean.state_dict(), "std": self.std.state_dict(), "peak": self.peak}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.start.load_state_dict(state["start"])
        self.std_start.load_state_dict(state["std_start"])
        self.mean.load_state_dict(state["mean"])
        self.std.load_state_dict(state["std"])
        self.peak = float(state["peak"])


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
                 "beta", "rho", "beta_se")

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
            self.last_u = u
        elif best:  # the matched function is missing or NaN on this row (TRL logs NaN for one that returned None)
            self.last_u = math.nan

    def drop(self, inflate: float = 1.25, z_ref: float = 1.0, min_rows: int = 8) -> tuple[float, list[Any] | None]:
        """How far (in standard errors) gold - beta * component now sits below its best octave, and that octave."""
        k = self.match
        if not k or len(self.noise) < 10:
            return 0.0, None
        beta = self.beta
        sig = inflate * self.noise.std() / math.sqrt(2.0)
        best: list[Any] | None = None
        best_lcb = -math.inf
        for o in self.octs:
            if o[0] >= min_rows and k in o[2]:
                lcb = o[1] - beta * o[2][k] - z_ref * sig / math.sqrt(o[0])
                if lcb > best_lcb:
                    best_lcb, best = lcb, o
        if best is None:
            return 0.0, None
        ref = best[1] - beta * best[2][k]
        now = self.eg - beta * self.ep[k]
        dp = self.ep[k] - best[2][k]
        se = math.sqrt(sig * sig * (self.alpha / (2.0 - self.alpha) + 1.0 / best[0]) + (self.beta_se * dp) ** 2)
        return (ref - now) / max(se, 1e-12), best

    def state_dict(self) -> dict[str, Any]:
        return {"sums": self.sums, "last": self.last, "last_g": self.last_g, "n": self.n, "octs": self.octs,
                "cur": self.cur, "eg": self.eg, "ep": self.ep, "noise": self.noise.state_dict(), "last_u": self.last_u,
                "fit": [self.match, self.beta, self.rho, self.beta_se]}

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


VOL_CLIP = 4.0
"""``reward-volatile`` reads the row-to-row changes clipped at this many robust (MAD) sigmas of the recent ones: a
Student-t(3) outlier row once made the noise look 2-12x larger for 30 rows (issue #28)."""


class RewardGauge(Gauge):
    """Gauge 9 — reward dynamics.

    GRPO/RLOO/PPO: is the reward improving, flat-lined, unstable, shifting, or climbing suspiciously
    together with length (hacking)? A sudden upward shift alone is only ``info``: a policy that finds
    the solution jumps too; it becomes a warning in the reward-hacking diagnosis, when length or KL
    moves with it. A shift is a CUSUM against the reward's own noise, each row's fall clipped at
    ``shift_clip`` sigmas (twice that on a second row out): two heavy-tailed rows in a row are not a drop
    (unclipped, two rows at -8 sigma crossed ``shift_h`` = 12 by themselves), a drop that holds still is.
    Signals that never look at a trusted reward cannot tell hacking from learning, so
    a user can name held-out *gold* reward functions (TRL: weight 0 in ``reward_weights``, still
    logged as ``rewards/<fn>/mean``): the trained ``reward`` is the proxy, and the proxy rising while
    the gold stalls or falls is over-optimisation (Gao et al. 2023), unless the gold only stalled with the trained
    component whose batch noise it shares while another one carries the rise (``gold_explained_se``,
    ``gold_stall_se``). Without gold, the per-function
    rewards still show one component carrying the whole rise (``info``: a format reward is usually
    learned long before correctness), or pinned at its ceiling while the others stay flat for 50
    logged steps (``warn``: that component gives no signal any more and nothing else is learned).

    DPO family: margin and accuracy together — never the chosen reward alone, which often falls in
    healthy runs; but a chosen reward climbing past +1 without the rejected side falling is the
    post's "unbounded reward growth", read over a share of the run (``runaway_share``) and over its second
    half (``runaway_half_t``: per-step noise hides a slow runaway from any short window). A margin falling
    from its peak is read against a fit of the raw margin since that peak (``margin_peak_rows``), not only
    the run's second half, which still holds the climb up to the peak.
    """

    id = "reward"
    title = "Reward dynamics"
    inputs = ("reward", "objective/scores", "objective/rlhf_reward", "rewards/margins", "rewards/chosen",
              "rewards/accuracies", "accuracy", "margin")
    outputs = ("reward", "reward_ewma", "trend_t", "length_corr", "accuracy_ewma", "margin", "margin_ewma",
               "margin_peak", "chosen_ewma", "reward_noise", "volatility_ratio", "shift_up", "shift_down", "gold",
               "gold_ewma", "gold_peak", "proxy_gold_gap", "proxy_gain_since_gold_peak", "gold_trend_t", "gold_half_t",
               "margin_recent_t", "gold_drop", *ROLLOUT_OUTPUTS["reward"])
    defaults = {
        "window": 15, "min_rows": 50, "warmup_share": 0.08, "plateau_t": 1.0, "plateau_for": 20,
        "flat_span": 1e-2, "flat_rows": 20, "flat_stop_rows": 50,
        "hack_length_ratio": 1.5, "hack_corr": 0.6, "hack_gain_sigma": 3.0,
        "volatile_ratio": 2.2, "volatile_for": 5, "volatile_warmup": 30, "volatile_ratio_rl": 1.8,
        "volatile_window": 30, "volatile_warmup_rl": 16,
        # shift: a CUSUM (k sigmas allowance per row, h to fire, each row's fall clipped at shift_clip sigmas)
        "shift_k": 1.0, "shift_h": 12.0, "shift_clip": 4.0, "shift_alpha": 0.05,
        "drop_share": 0.4, "drop_sigma": 4.0, "drop_for": 5,
        "drop_within": 50, "drop_gain_sigma": 3.0,
        "gold": [], "gold_stall_rows": 15, "gold_gap_sigma": 3.0, "gold_for": 10, "gold_stall_t": 0.5, "gold_half": 0,
        "gold_alpha": 0.1, "gold_drop_se": 4.0, "gold_drop_for": 3, "gold_rho": 0.3, "gold_noise_rows": 60,
        "gold_explained_se": 2.0, "gold_stall_se": 4.0, "gold_rising_t": 2.0,
        "component_gain_sigma": 4.0, "component_flat_sigma": 1.0, "component_for": 10, "component_dead": 0.01,
        "saturated_for": 50,
        "margin_collapse": 0.5, "margin_peak_min": 0.2, "accuracy_chance": 0.55, "dpo_min_rows": 30,
        "margin_learning_t": 2.0, "margin_plateau_growth": 0.2, "plateau_accuracy": 0.7, "margin_plateau_for": 15,
        "margin_plateau_rows": 20,
        "margin_shrink": 0.15, "margin_shrink_t": -2.0, "margin_shrink_sd": 5.0, "margin_shrink_for": 6,
        "margin_peak_rows": 20,
        "runaway_level": 1.0, "runaway_t": 3.0, "runaway_share": 0.05, "runaway_half_t": 5.0,
        **ROLLOUT_DEFAULTS["reward"],
    }

    def setup(self) -> None:
        w = self.p["window"]
        self.first = RollingWindow(w)  # frozen once full: the start of the run
        self.trend = RunningRegression()
        self.flat = RollingWindow(self.p["flat_rows"])
        self.flat_rows = 0
        self.ewma = Ewma(0.1)
        self.len_base = Baseline(10)
        self.rl = RollingCorrelation(30)  # (reward, length) pairs
        self.noise_ref = OctaveMean()  # the DPO margin's relative noise earlier in the run
        self.margin_warmup = self.p["volatile_warmup"]
        # RL rewards: row-to-row changes in units of the within-group spread (reward_std), whose binomial
        # dependence on the success rate is the batch mean's too; their scale against the run's own earlier one
        self.vol = RollingWindow(self.p["volatile_window"])
        self.vol_ref = ScaleRef(self.p["volatile_warmup_rl"])
        self.vol_std = Ewma(0.1)
        self.vol_unit = True  # every reward so far in [0, 1]: a success rate, binomial noise when no spread is logged
        self.vol_last = math.nan
        self.shift = ShiftDetector(k=self.p["shift_k"], h=self.p["shift_h"], alpha=self.p["shift_alpha"], warmup=w,
                                   clip=self.p["shift_clip"])
        self.up_since = 0
        self.down_since = 0
        self.peak_e = -math.inf  # the reward EWMA's highest point since the start window filled
        self.peak_step = 0
        self.peak_row = 0
        self.drop_rows = 0
        self.reward_rows = 0
        # gold: the held-out reward functions, averaged into one series
        self.gold_keys = tuple(f"rewards/{g}/mean" for g in self.p["gold"])
        self.gold_names = ", ".join(f"'{g}'" for g in self.p["gold"])
        self.gold_e = Ewma(self.p["gold_alpha"])
        self.gold_first = RollingWindow(w)
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
        self.coupling = GoldCoupling(self.p["gold_noise_rows"], self.p["gold_alpha"])
        self.gold_runs = [0, 0]  # consecutive rows the (after-peak, coupled) divergence has held
        self.components: dict[str, _Component] = {}
        self._comp_keys: tuple[tuple[str, str, str], ...] = ()
        self._row_width = -1
        # preference families
        self.margin = Ewma(0.1)
        self.margin_peak = -math.inf
        self.margin_trend = RunningRegression()  # is the margin still rising? (slow learners sit near chance)
        self.margin_noise = DiffNoise(20)
        self.margin_recent = RollingCorrelation(30)
        self.margin_half = HalfRunTrend()  # a slow learner's trend needs the run's whole second half
        self.margin_mark = [0.0, 0.0]  # the margin EWMA where margin_half's previous and current spans began
        self.margin_since_peak = RunningRegression()  # the raw margin since its EWMA last set a peak
        self.acc = Ewma(0.1)
        self.chosen = Ewma(0.1)
        self.chosen_start = Baseline(5)
        self.chosen_recent = RollingCorrelation(30)
        self.rejected = Ewma(0.1)
        self.rejected_recent = RollingCorrelation(30)
        self.chosen_half = HalfRunTrend()  # a slow runaway in a long, per-step log: its second half
        self.rejected_half = HalfRunTrend()
        self.pref_rows = 0

    # the per-function components are a dict of objects: serialise them by hand
    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["components"] = {fn: c.state_dict() for fn, c in self.components.items()}
        out.pop("_comp_keys", None)
        out["_row_width"] = -1
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        comps = state.get("components") or {}
        super().load_state_dict({k: v for k, v in state.items() if k != "components"})
        self.components = {}
        for fn, cs in comps.items():
            c = _Component(self.p["window"])
            c.load_state_dict(cs)
            self.components[fn] = c

    def plan_long(self) -> None:
        # a chosen reward running away climbs over a share of the run, not a fixed number of rows: in a run logged
        # every step, 30 rows of per-step noise hide a climb that 5 % of a 1400-row run shows plainly
        w = round(self.p["runaway_share"] * self.planned_rows)
        if w > 30:
            self.chosen_recent = RollingCorrelation(w)
            self.rejected_recent = RollingCorrelation(w)

    def plan_short(self) -> None:
        p = self.p
        self.vol = RollingWindow(self.rows(p["volatile_window"]))
        self.margin_warmup = self.rows(p["volatile_warmup"])

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        reward_rules(self, row)
        v = row.values
        if self.family in PREFERENCE_FAMILIES or "rewards/margins" in v:
            self._preference(row)
            return
        if self.family == "reward":
            acc = v.get("accuracy")
            if acc is not None and finite(acc):
                a = self.acc.push(acc)
                self.derived["accuracy_ewma"] = a
                chance = self.rows_seen >= self.p["dpo_min_rows"] and a < self.p["accuracy_chance"]
                self.check("accuracy-chance", chance, "warn", "accuracy", acc,
                           lambda: f"reward-model accuracy {a:.2f} is near chance after {self.rows_seen} steps.",
                           for_=10)
            return
        key = "reward" if "reward" in v else ("objective/scores" if "objective/scores" in v else None)
        if key is None:
            return
        r = v[key]
        if not finite(r):
            return
        p = self.p
        d = self.derived
        self.reward_rows += 1
        n = self.reward_rows
        d["reward"] = r
        e = self.ewma.push(r)
        d["reward_ewma"] = e
        if not self.first.full:
            self.first.push(r)
        self.flat.push(r)
        # Flat-lined reward: no learning signal at all.
        span = p["flat_span"] * max(1.0, abs(r))
        # the O(1) variance rules most rows out before the O(window) min/max is needed
        flat = self.flat.full and self.flat.var() <= span * span and (self.flat.max() - self.flat.min()) <= span
        self.flat_rows = self.flat_rows + 1 if flat else 0
        self.check("reward-flatline", flat, "warn", key, r,
                   lambda: f"{key} has been pinned at {r:.4g} for {p['flat_rows']} logged steps: every "
                   "completion gets the same score (format penalty? broken reward function?). There is no "
                   "learning signal.")
        long_flat = flat and self.flat_rows + p["flat_rows"] >= p["flat_stop_rows"]
        self.check("reward-flatline-persistent", long_flat, "stop", key, r,
                   lambda: f"{key} has not moved for {p['flat_stop_rows']} logged steps: the run cannot learn. "
                   "Stop and fix the reward before spending more compute.")
        # Plateau: no significant upward trend over the whole run so far.
        self.trend.push(float(self.rows_seen), r)
        if self.rows_seen >= self.min_rows(p["min_rows"], p["warmup_share"]):
            t = self.trend.t_stat()
            d["trend_t"] = t
            m1 = self.first.mean()
            self.check("reward-plateau", t < p["plateau_t"] and not flat, "warn", key, r,
                       lambda: f"reward is not improving: no upward trend over {self.rows_seen} logged steps "
                       f"(t={t:.1f}; started near {m1:.3g}, now {d['reward_ewma']:.3g}). The policy is stable but "
                       "not learning; check the learning rate, the task's difficulty and frac_reward_zero_std.",
                       for_=p["plateau_for"], clear=10)
        std = v.get("reward_std")
        self.vol_unit = self.vol_unit and 0.0 <= r <= 1.0
        if std is not None and finite(std) and std > 0:
            scale = self.vol_std.push(std)
        elif self.vol_std.count:
            scale = self.vol_std.mean
        elif self.vol_unit:  # a success rate without its spread logged: the binomial noise its level gives
            scale = 2.0 * bounded_mean_sd(min(max(e, 0.05), 0.95), 1.0)
        else:
            scale = 1.0
        self._stability(key, r, e, scale)
        # Hacking: reward gains far beyond its start, length growing with it.
        length = v.get("completions/mean_length")
        if length is not None and finite(length) and length > 0:
            self.len_base.push(length)
            self.rl.push(r, length)
            if self.len_base.ready and self.first.full and self.rl.full:
                lr = self.rl.mean_y() / max(self.len_base.value, 1e-9)
                sigma = max(self.first.std(), 1e-3 * max(1.0, abs(self.first.mean())))
                gain = (self.rl.mean_x() - self.first.mean()) / sigma
                corr = self.rl.corr()
                d["length_corr"] = corr
                hack = lr > p["hack_length_ratio"] and corr > p["hack_corr"] and gain > p["hack_gain_sigma"]
                self.check("reward-hacking", hack, "warn", key, r,
                           lambda: f"reward is up {gain:.1f} sigma while completions grew {lr:.1f}x and track it "
                           f"(corr {corr:.2f}): the policy may be paying for length, not quality. Read samples; "
                           "check KL; add a length penalty.",
                           for_=3)
        if len(v) != self._row_width:  # re-scan for reward components only when the row's shape changes
            self._row_width = len(v)
            gold = set(self.gold_keys)
            self._comp_keys = tuple(
                (k[8:-5], k, k[:-5] + "/std") for k in v
                if k.startswith("rewards/") and k.endswith("/mean") and k not in gold and k.count("/") == 2
            )
        if self.gold_keys:
            self.proxy_trend.push(float(n), r)
            self._gold(v, key, e)
            if not len(self.gold_first) and n >= 5:  # a typo in the name must not look like a silent gold
                self.note = (f"gold reward {self.gold_names} not in the log (expected "
                             f"{', '.join(self.gold_keys)})")
            elif self.note.startswith("gold reward"):
                self.note = ""
        if len(self._comp_keys) >= 2:
            self._components(v)

    def _stability(self, key: str, r: float, e: float, scale: float) -> None:
        """High reward variance (unstable optimisation) and change points, both against the run's own noise."""
        p = self.p
        d = self.derived
        if self.vol_last == self.vol_last:
            dx = (r - self.vol_last) / max(scale, 1e-6)
            if len(self.vol) >= 10:  # a clipped statistic: one outlier row counts as VOL_CLIP robust sigmas, no more
                lim = VOL_CLIP * self.vol.robust()[1]
                if lim > 0:
                    dx = min(max(dx, -lim), lim)
            self.vol.push(dx)
        self.vol_last = r
        if len(self.vol) >= 10:
            self._volatility(key, r, self.vol.std() / math.sqrt(2.0), self.vol_ref, p["volatile_ratio_rl"],
                             p["volatile_warmup_rl"])
        det = self.shift
        up_from = self.step if det.up <= 0 else self.up_since
        down_from = self.step if det.down <= 0 else self.down_since
        det.push(r, floor=_floor(self.first.mean()))
        self.up_since, self.down_since = up_from, down_from
        d["shift_up"] = det.up
        d["shift_down"] = det.down
        ref = det.ref
        self.check("reward-shift-up", det.up > p["shift_h"], "info", key, r,
                   lambda: f"{key} shifted up since step {self.up_since} (now {e:.3g}, {det.z:+.1f} sigma of its own "
                   "noise): a jump, not the run's slow trend. Often the policy found something; if length or KL "
                   "jumped with it, or a gold reward did not, it found a loophole. Read samples from that step.",
                   clear=10)
        drop = self._fell_from_peak(e, det)
        self.check("reward-shift-down", det.down > p["shift_h"] or drop, "warn", key, r,
                   lambda: (f"{key} fell from its peak {self.peak_e:.3g} (step {self.peak_step}) to {e:.3g}, losing "
                            f"{(self.peak_e - e) / max(self.peak_e - self.first.mean(), 1e-12):.0%} of what the run "
                            "had gained" if drop else
                            f"{key} dropped since step {self.down_since} (now {e:.3g}, reference {ref:.3g}, "
                            f"{det.z:+.1f} sigma of its own noise)")
                   + ": the policy lost something it had (forgetting, a collapse, or a harder slice of prompts). "
                   "Check KL, entropy and samples at that step.", clear=10)

    def _fell_from_peak(self, e: float, det: ShiftDetector) -> bool:
        """The reward's EWMA fell from its peak by ``drop_share`` of what the run had gained, within
        ``drop_within`` rows of that peak, for ``drop_for`` rows.

        The CUSUM misses a fall that comes while the reward is still learning fast: its noise scale includes the
        learning, and its slow reference follows the fall. A real gain (``drop_gain_sigma`` row sigmas) and a
        fall far outside the EWMA's own noise (``drop_sigma``) keep a flat, wandering run out of it.
        """
        p = self.p
        if not self.first.full or p["drop_share"] <= 0:
            return False
        if e > self.peak_e:
            self.peak_e, self.peak_step, self.peak_row = e, self.step, self.reward_rows
        gain, fall = self.peak_e - self.first.mean(), self.peak_e - e
        recent = self.drop_rows > 0 or self.reward_rows - self.peak_row <= p["drop_within"]
        fell = recent and gain > 0 and fall >= p["drop_share"] * gain
        if fell:  # the noise scale (a median of 30 residuals) only where the shares already say "fell"
            row_sigma = det.sigma()
            fell = (row_sigma == row_sigma and gain > p["drop_gain_sigma"] * row_sigma
                    and fall >= p["drop_sigma"] * row_sigma * _EWMA10_SD)
        self.drop_rows = self.drop_rows + 1 if fell else 0
        return self.drop_rows >= self.warn_rows(p["drop_for"])

    def _volatility(self, key: str, x: float, sig: float, ref: OctaveMean | ScaleRef, limit: float,
                    warmup: int) -> None:
        """High reward (DPO: margin) variance: row-to-row noise far above its level earlier in the run.

        The reference is the noise over the run's previous octave (rows n/4 .. n/2), not its first rows:
        early, fast learning is noisy, and a binary reward's noise moves with its success rate; noise
        that grows 2-3x within the last quarter of the run is what unstable optimisation looks like. For RL
        rewards the noise is measured in units of the within-group spread (``reward_std``), which moves with
        the success rate the same way, and the reference is also never below the run's long-run noise.
        """
        p = self.p
        d = self.derived
        d["reward_noise"] = sig
        base = ref.value
        ref.push(sig)
        if base != base or ref.n < warmup:
            return
        vr = sig / max(base, 1e-12)
        d["volatility_ratio"] = vr
        self.check("reward-volatile", vr > limit, "warn", key, x,
                   lambda: f"{key} now swings {vr:.1f}x as much from row to row as earlier in the run "
                   f"(noise {sig:.3g} vs {base:.3g}): unstable optimisation. Lower the learning rate or raise the KL "
                   "penalty (beta).", for_=p["volatile_for"], clear=10)

    def _gold(self, v: Mapping[str, float], key: str, e: float) -> None:
        """Proxy vs gold: the trained reward rising while a held-out reward stalls or falls."""
        gs = [v[k] for k in self.gold_keys if k in v and finite(v[k])]
        if not gs:
            return
        p = self.p
        d = self.derived
        g = sum(gs) / len(gs)
        ge = self.gold_e.push(g)
        self.gold_trend.push(float(self.reward_rows), g)
        self.gold_half.push(g)
        self.proxy_half.push(v[key])
        k = self.gold_half.n
        new_half = k >= 4 and k & (k - 1) == 0
        if new_half:
            self.half_from = [self.half_from[1], self.step]
            self.half_levels = [*self.half_levels[2:], e, ge]
        if not self.gold_first.full:
            self.gold_first.push(g)
        n = self.reward_rows
        # the peak of an EWMA that has seen a handful of rows is one noisy row: track it once the start is in
        peaked = ge > self.gold_peak and self.gold_first.full
        if peaked:
            self.gold_peak, self.gold_peak_step, self.gold_peak_row, self.proxy_at_gold_peak = ge, self.step, n, e
        d["gold"] = g
        d["gold_ewma"] = ge
        d["gold_peak"] = self.gold_peak if self.gold_peak > -math.inf else ge
        proxies = {mk: v[mk] for _, mk, _ in self._comp_keys if mk in v and finite(v[mk])}
        proxies[key] = v[key]
        cp = self.coupling
        cp.push(self.step, g, proxies)
        if peaked:
            self.comps_at_gold_peak = dict(cp.ep)
        if new_half:
            self.comps_at_half = [self.comps_at_half[1], dict(cp.ep)]
        if not (self.first.full and self.gold_first.full):
            return
        proxy_sigma = max(self.first.std(), _floor(self.first.mean()))
        gold_sigma = max(self.gold_first.std(), _floor(self.gold_first.mean()))
        proxy_gain = (e - self.first.mean()) / proxy_sigma
        gold_gain = (ge - self.gold_first.mean()) / gold_sigma
        gap = proxy_gain - gold_gain
        d["proxy_gold_gap"] = gap
        # the proxy's rise since the gold's peak, in standard errors of its EWMA (not of one noisy row)
        since = (e - self.proxy_at_gold_peak) / (proxy_sigma * _EWMA10_SD * math.sqrt(2.0))
        d["proxy_gain_since_gold_peak"] = since
        stall = n - self.gold_peak_row
        t = self.proxy_trend.t_stat()
        gt = self.gold_trend.t_stat()
        d["gold_trend_t"] = gt
        se = _EWMA10_SD * math.sqrt(2.0)
        after_peak = (stall >= p["gold_stall_rows"] and since >= p["gold_gap_sigma"] and t >= 2.0
                      and gt <= p["gold_stall_t"]
                      and not self._gold_follows(key, self.gold_peak, ge, self.comps_at_gold_peak, gold_sigma * se))
        # the same over the second half of the run so far (a noisy gold's EWMA peak sits high by chance): the
        # proxy's EWMA rose clearly, the gold's did not, and their trends agree
        pht, ght = self.proxy_half.t_stat(), self.gold_half.t_stat()
        d["gold_half_t"] = ght
        # the gold confirming the proxy's gains: what lets the reward-hacking diagnosis stand down (a gold that is
        # merely logged, flat, confirms nothing)
        self.check("gold-rising", self.gold_half.rows() >= 20 and ght >= p["gold_rising_t"], "info",
                   self.gold_keys[0], ge,
                   lambda: f"the gold reward {self.gold_names} rises with the trained reward (trend t={ght:.1f} over "
                   "the second half of the run so far): the gains are confirmed by the held-out check.", clear=5)
        proxy_rise = (e - self.half_levels[0]) / (proxy_sigma * se)
        gold_rise = (ge - self.half_levels[1]) / (gold_sigma * se)
        over_half = (self.gold_half.rows() >= 20 and pht >= 2.0 and ght <= p["gold_stall_t"]
                     and proxy_rise >= p["gold_gap_sigma"] and gold_rise <= 0.0
                     and not self._gold_follows(key, self.half_levels[1], ge, self.comps_at_half[0], gold_sigma * se))
        drop, ref = cp.drop()
        d["gold_drop"] = drop
        # the gold below its best level relative to the component it moves with, while the proxy has not fallen
        warm = n >= self.min_rows(p["min_rows"], p["warmup_share"])
        coupled = (warm and cp.rho >= p["gold_rho"] and ref is not None and drop >= p["gold_drop_se"]
                   and e >= ref[2][key])
        runs = self.gold_runs
        runs[0] = runs[0] + 1 if warm and (after_peak or (over_half and p["gold_half"])) else 0
        runs[1] = runs[1] + 1 if coupled else 0
        gold_for, gold_drop_for = self.warn_rows(p["gold_for"]), self.warn_rows(p["gold_drop_for"])
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
        self.check("proxy-gold-divergence", over, "warn", key, e,
                   lambda: f"over-optimisation: the proxy {key} rose from {p0:.3g} to {e:.3g} since step {pstep}, "
                   f"while the gold reward {self.gold_names} stood at {peak:.3g} there and is now "
                   f"{ge:.3g} ({'falling' if ge < peak - 0.5 * gold_sigma else 'stalled'}).{how} Proxy-gold gap since "
                   f"the start: proxy {e - self.first.mean():+.3g}, gold {ge - self.gold_first.mean():+.3g} "
                   f"({gap:.1f} sigma of their early noise). The policy is learning the proxy's loopholes, not the "
                   f"task: keep the checkpoint from step {pstep}, then raise beta, fix the proxy, or stop earlier.",
                   clear=10)

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
        m, lim = cp.match, self.p["gold_explained_se"]
        if lim <= 0 or not m or m == key or cp.rho < self.p["gold_rho"] or m not in comps_then or m not in cp.ep:
            return False
        fall = gold_then - gold_now
        unexplained = fall - cp.beta * (comps_then[m] - cp.ep[m])
        return unexplained < lim * se and fall < self.p["gold_stall_se"] * se

    def _components(self, v: Mapping[str, float]) -> None:
        """Without gold: one reward function carrying the whole rise, or pinned at its ceiling, the others flat."""
        p = self.p
        comps = self.components
        for fn, mk, sk in self._comp_keys:
            m = v.get(mk)
            if m is None or not finite(m):
                continue
            c = comps.get(fn)
            if c is None:
                c = comps[fn] = _Component(p["window"])
            c.push(m, v.get(sk))
        ready = [(fn, c) for fn, c in comps.items() if c.start.full]
        if len(ready) < 2:
            return
        gains = [(c.gain(), fn, c) for fn, c in ready]
        rising = [x for x in gains if x[0] >= p["component_gain_sigma"]]
        flat = [fn for g, fn, _ in gains if g < p["component_flat_sigma"]]
        lead = rising[0] if len(rising) == 1 and len(flat) == len(gains) - 1 else None
        for g, fn, c in gains:
            is_lead = lead is not None and lead[1] == fn
            std0 = c.std_start.mean() if len(c.std_start) else math.nan
            pinned = (is_lead and c.std.count > 0 and c.mean.mean >= c.peak - 0.05 * abs(c.peak - c.start.mean())
                      and (c.std.mean <= p["component_dead"] or (std0 == std0 and c.std.mean <= 0.25 * std0)))
            others = ", ".join(f"'{o}'" for o in flat)
            level = c.mean.mean
            self.check(f"reward-component-saturated:{fn}", pinned, "warn", f"rewards/{fn}/mean", level,
                       lambda fn=fn, g=g, level=level, others=others: f"reward function '{fn}' is pinned at its "
                       f"ceiling ({level:.3g}, every completion scores alike; up {g:.1f} sigma since the start) while "
                       f"{others} stay flat: the policy has learned the easy part and gets no signal from it any more; "
                       "the task itself is not being learned. Check the other functions' scale and weights.",
                       for_=p["saturated_for"], clear=10)
            self.check(f"reward-component-dominant:{fn}", is_lead and not pinned, "info", f"rewards/{fn}/mean", level,
                       lambda fn=fn, g=g, level=level, others=others: f"reward function '{fn}' carries the whole "
                       f"reward rise (up {g:.1f} sigma since the start, now {level:.3g}) while {others} stay flat: "
                       "the policy optimises one component. If it is a format or length check, the task is not being "
                       "learned; log a held-out gold reward to tell hacking from learning.",
                       for_=p["component_for"], clear=10)

    def _preference(self, row: Row) -> None:
        v = row.values
        d = self.derived
        p = self.p
        m = v.get("rewards/margins")
        c, rj = v.get("rewards/chosen"), v.get("rewards/rejected")
        if m is None and c is not None and rj is not None:
            m = c - rj
        acc = v.get("rewards/accuracies")
        if m is None or not finite(m):
            return
        self.pref_rows += 1
        self.margin_trend.push(float(self.pref_rows), m)
        self.margin_half.push(m)
        if self.pref_rows >= 4 and self.pref_rows & (self.pref_rows - 1) == 0:  # where margin_half's spans start
            self.margin_mark = [self.margin_mark[1], self.margin.mean]
        self.margin_recent.push(float(self.pref_rows), m)
        self.margin_noise.push(m)
        if len(self.margin_noise) >= 10:  # relative to the margin's level: its noise grows as it grows
            self._volatility("rewards/margins", m, self.margin_noise.sigma() / max(abs(self.margin.mean), 0.05),
                             self.noise_ref, p["volatile_ratio"], self.margin_warmup)
        me = self.margin.push(m)
        d["margin"] = m
        d["margin_ewma"] = me
        warm = self.pref_rows >= p["dpo_min_rows"]
        if warm and me > self.margin_peak:
            self.margin_peak = me
            self.margin_since_peak = RunningRegression()
        self.margin_since_peak.push(float(self.pref_rows), m)
        d["margin_peak"] = self.margin_peak if self.margin_peak > -math.inf else me
        peak = self.margin_peak
        collapsed = warm and peak >= p["margin_peak_min"] and me < p["margin_collapse"] * peak
        self.check("margin-collapse", collapsed, "warn", "rewards/margins", m,
                   lambda: f"reward margin fell to {me:.3g} from a peak of {peak:.3g}: chosen and rejected are "
                   "converging and the preference signal is being undone (LR too high, noisy pairs, beta too low).",
                   for_=5)
        # The same convergence, early: a steady fall from the peak, far beyond the EWMA's own noise (the peak of a
        # noisy EWMA sits high by itself), over the second half of the run so far, the last 30 rows, or the rows
        # since the peak (the half-run fit still holds the climb to a late peak, and 30 per-step rows are noise).
        drop = (peak - me) / peak if peak > 0 else 0.0
        rt = 0.0
        shrinking = False
        if warm and peak >= p["margin_peak_min"] and drop >= 0.5 * p["margin_shrink"] and not collapsed:
            ht = self.margin_half.t_stat() if self.margin_half.rows() >= 20 else 0.0
            rt30 = self.margin_recent.t_stat() if self.margin_recent.full else 0.0
            rt = min(ht, rt30 + 1.0)  # falling over the last 30 rows counts when it is one sigma clearer
            since = self.margin_since_peak
            if p["margin_peak_rows"] > 0 and since.n >= p["margin_peak_rows"]:
                rt = min(rt, since.t_stat())
            sd = self.margin_noise.sigma() * _EWMA10_SD if len(self.margin_noise) >= 10 else math.inf
            # 15 % off the peak with t <= -2, or 8 % with t <= -5
            steady = (drop >= p["margin_shrink"] and rt <= p["margin_shrink_t"]) or rt <= 2.5 * p["margin_shrink_t"]
            shrinking = steady and peak - me >= p["margin_shrink_sd"] * sd
        d["margin_recent_t"] = rt
        self.check("margin-shrinking", shrinking, "warn", "rewards/margins", m,
                   lambda: f"chosen and rejected rewards are converging: the margin fell {1 - me / peak:.0%} from its "
                   f"peak {peak:.3g} to {me:.3g} and keeps falling (trend t={rt:.1f}). The model is losing the "
                   "preference it learned: lower the learning rate, check for noisy pairs, keep the best checkpoint.",
                   for_=p["margin_shrink_for"], clear=10)
        self.check("margin-negative", warm and me < 0, "warn", "rewards/margins", m,
                   lambda: f"reward margin is negative ({me:.3g}): the policy now prefers the rejected answers. "
                   "Check that chosen/rejected are not swapped.", for_=5)
        if acc is not None and finite(acc):
            a = self.acc.push(acc)
            d["accuracy_ewma"] = a
            # Near chance while the margin still climbs is a slow start, not a failure to learn.
            chance = warm and a < p["accuracy_chance"] and not self.margin_trend.t_stat() > p["margin_learning_t"]
            self.check("accuracy-chance", chance, "warn", "rewards/accuracies", acc,
                       lambda: f"preference accuracy {a:.2f} is near chance (below {p['accuracy_chance']:g}, the "
                       f"product's own line: chance is 0.5) after {self.pref_rows} steps while the margin is not "
                       "climbing: the model is not learning the preference.", for_=10)
            # Plateau: the margin stopped rising while accuracy is still far from where a learned preference sits.
            half = self.margin_half
            # growth over the span's fitted line, not from the EWMA where it began (a lagging EWMA still climbs
            # long after the margin has levelled off)
            grown = half.prev.slope() * (half.rows() - 1) / max(abs(me), 1e-9) \
                if half.rows() >= p["margin_plateau_rows"] else math.inf
            plateau = (warm and grown < p["margin_plateau_growth"] and me > 0
                       and p["accuracy_chance"] <= a < p["plateau_accuracy"] and not collapsed)
            self.check("margin-plateau", plateau, "warn", "rewards/margins", m,
                       lambda: f"the reward margin has stopped growing at {me:.3g} ({grown:+.0%} over the last "
                       f"{half.rows()} steps, half the run) with accuracy only {a:.2f}: the model stopped learning "
                       "from the preference data early. The learning rate may be too low, or the data's signal is "
                       "exhausted (people overestimate it).", for_=p["margin_plateau_for"], clear=10)
        if c is not None and finite(c):
            ce = self.chosen.push(c)
            self.chosen_start.push(c)
            self.chosen_recent.push(float(self.pref_rows), c)
            d["chosen_ewma"] = ce
            # The trap: chosen reward falling while the margin grows is common and often harmless.
            healthy_margin = me > 0 and not collapsed
            falling = self.chosen_start.ready and ce < self.chosen_start.value - 0.1 and healthy_margin
            self.check("chosen-reward-falling", warm and falling, "info", "rewards/chosen", c,
                       lambda: f"chosen reward drifts down ({ce:.3g}) while the margin grows ({me:.3g}): likelihood "
                       "displacement, common in DPO and usually harmless. Watch logps/chosen.", for_=10, clear=20)
            # Unbounded growth: chosen keeps climbing past +runaway_level while the rejected side does not fall.
            if rj is not None and finite(rj):
                self.rejected.push(rj)
            if rj is not None and finite(rj):
                self.rejected_recent.push(float(self.pref_rows), rj)
                self.rejected_half.push(rj)
            self.chosen_half.push(c)
            ct = 0.0
            runaway = False
            if warm and ce > p["runaway_level"] and self.chosen_recent.full:
                ct = self.chosen_recent.t_stat()
                # over the same rows the chosen side climbed, the rejected side did not fall: the margin is not why
                rej_holding = not self.rejected_recent.full or self.rejected_recent.t_stat() > -2.0
                runaway = ct >= p["runaway_t"] and rej_holding
                # the same over the run's second half so far: a climb of +2 over 800 per-step rows is t < 2 in
                # any 5 % window and t > 10 over the half
                if not runaway and p["runaway_half_t"] > 0 and self.chosen_half.rows() >= 20:
                    ht = self.chosen_half.t_stat()
                    rh = self.rejected_half.t_stat() if self.rejected_half.rows() >= 20 else 0.0
                    if ht >= p["runaway_half_t"] and rh > -2.0:
                        runaway, ct = True, ht
            kl = v.get("objective/kl", v.get("kl"))
            kl_txt = f"; KL to the reference is {kl:.3g}" if kl is not None and finite(kl) else \
                "; DPO logs no KL, but a chosen reward of +1 is already a large log-ratio to the reference"
            self.check("chosen-reward-runaway", runaway, "warn", "rewards/chosen", c,
                       lambda: f"chosen reward keeps climbing ({ce:.3g}, trend t={ct:.1f}) while the rejected reward "
                       f"does not fall{kl_txt}: unbounded growth, the policy exploits the implicit reward rather than "
                       "learning the preference. Raise beta or lower the learning rate.", for_=5, clear=10,
                       long_hold=False)  # its window is a share of the run already (runaway_share)


ACCEL_SE = 2.0
"""``kl-growing`` calls a climb accelerating only where its last 20 rows' slope exceeds the last 40's by this many of
its standard errors (deflated for autocorrelation)."""
NEAR_ZERO_SPREAD = 10.0
"""``kl-near-zero`` needs the KL's robust spread under this many times its ``near_zero`` line as well as its median:
a KL estimate scattered around 0 is an estimator measuring a slowly moving policy, not a collapse (issue #28)."""


class KLGauge(Gauge):
    """Gauge 10 — KL to the reference policy: level, growth, noise, spikes, sign.

    GRPO/RLOO log a per-token ``kl`` only when beta > 0; PPO and Online DPO log
    a per-sequence ``objective/kl``. Thresholds are per family because the two
    are not the same quantity. The level lines (0.5 / 1.0 per token) come last:
    ``kl-growing`` reads the slope and its acceleration against the series' own
    noise and fires while KL is still below the warn line, either within one window
    (or the rows the run has left, where fewer: a line passed after the last step is never passed)
    or, where the run's planned length is known, before its end (``grow_end`` times
    the line; 0 turns that off): the slope then also read over ``grow_span_share`` of
    the run, carried no further ahead than the run has gone, and only while the climb
    is not slowing (``grow_end_keep``), so neither a wander nor a KL that rises early
    and levels off is projected past the line; ``kl-noisy``
    compares the row-to-row noise with KL's own (median) level and with its noise
    early in the run (and counts negative estimates). A single-step spike gone the
    next row is ``info``; spikes that repeat are a warning: ``spike_repeat`` within
    ``spike_repeat_rows``, and more than the run's own spike rate so far explains
    (a Poisson tail below ``spike_repeat_p``; a heavy-tailed estimator spikes now and
    then all run long).
    """

    id = "kl"
    title = "KL health"
    inputs = ("kl", "objective/kl")
    outputs = ("kl", "kl_ewma", "kl_slope", "kl_z", "kl_trend_t", "kl_acceleration", "kl_projected", "kl_cv",
               "kl_negative_share")
    defaults = {"warn": 0.5, "stop": 1.0, "for": 3, "clear": 10, "near_zero": 1e-4, "near_zero_rows": 50,
                "negative": -0.01, "spike_z": 10.0, "spike_min": 0.1, "start_rows": 5, "spike_repeat": 3,
                "spike_repeat_rows": 25, "spike_repeat_p": 1e-3, "grow_rows": 20, "grow_t": 4.0, "grow_min": 0.2,
                "grow_accel": 1.3, "grow_accel_max": 3.0, "grow_for": 3, "grow_end": 1.0, "grow_end_keep": 0.9,
                "grow_span_share": 0.125,
                "noisy_ratio": 3.0, "noisy_cv": 0.3, "noisy_negative": 0.2, "noisy_for": 5, "noisy_min": 0.01,
                "noisy_c": 3.0, "noisy_p1": 0.3, "noisy_h": 8.0, "warn_k": 0.5, "warn_clip": 4.0}
    family_defaults = {
        # per-sequence sums: values scale with completion length
        "ppo": {"warn": 6.0, "stop": 20.0, "near_zero": 1e-3, "negative": -0.5, "spike_min": 2.0},
        "online_dpo": {"warn": 6.0, "stop": 20.0, "near_zero": 1e-3, "negative": -0.5, "spike_min": 2.0},
    }

    def setup(self) -> None:
        self.win = RollingWindow(30)
        self.start = Baseline(self.p["start_rows"])
        self.ewma = Ewma(0.2)
        self.slope = RollingSlope(20)
        w = self.p["grow_rows"]
        self.recent = RollingCorrelation(w)  # (row, kl): the slope now and how far it stands out of the noise
        self.longer = RollingCorrelation(2 * w)  # the slope over twice as long: is it accelerating?
        self.span = RollingCorrelation(2 * w)  # ... and over a share of the run: the slope projected to its end
        self.noise = DiffNoise(20)
        self.ar = Ar1(prior=20.0)  # the noise's AR(1) coefficient, read on the warm-up: slope tests are deflated by it
        self.negatives = RollingWindow(20)
        self.cv_base = Baseline(10)
        self.cv_ref = OctaveMean()
        self.cusum = NoiseCusum(c=self.p["noisy_c"], p1=self.p["noisy_p1"])
        # kl-warn's evidence: a CUSUM of (kl - warn) in the row noise, threshold from the ARL0 budget
        self.warn_cusum = Cusum(k=self.p["warn_k"], arl=arl_for(self.warn_sooner))
        self.warn_rho = 0.0
        self.neg_base = Baseline(10)
        self.went_negative = False  # a per-token estimate below 0 once: not k3, read its noise on a linear scale
        self.spike_rows: list[int] = []
        self.spikes_seen = 0  # every spike so far: the run's own spike rate
        self.spike_from = -1  # the first row the spike test was armed on (the rate's denominator starts there)
        self.start_checked = False
        self.note = ""

    def applies(self) -> bool:
        return self.family not in ("dpo", "orpo", "sft", "reward", "kto")

    def plan_long(self) -> None:
        # a slope read over 40 rows and carried over a thousand magnifies a wander of the noise into a runaway:
        # the projection to the run's end also takes the slope over a share of the run
        w = round(self.p["grow_span_share"] * self.planned_rows)
        if w > 2 * self.p["grow_rows"]:
            self.span = RollingCorrelation(w)

    def plan_short(self) -> None:
        self.cusum = NoiseCusum(c=self.p["noisy_c"], p1=self.p["noisy_p1"], window=self.rows(20),
                                warmup=self.rows(16))

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        v = row.values
        key = "objective/kl" if "objective/kl" in v else "kl"
        kl = v[key]
        if not finite(kl) or not self.applies():
            return
        p = self.p
        d = self.derived
        n = self.rows_seen
        d["kl"] = kl
        e = self.ewma.push(kl)
        d["kl_ewma"] = e
        self.slope.push(row.step, kl)
        d["kl_slope"] = self.slope.slope()
        self.check("kl-stop", kl > p["stop"], "stop", key, kl,
                   lambda: f"{key} {kl:.3g} has been above {p['stop']} for {self.held('kl-stop')} logged steps: the "
                   "policy has run away from the reference and reward gains are likely over-optimisation. Stop, then "
                   "raise beta or lower the learning rate and resume from an earlier checkpoint.",
                   for_=p["for"], clear=p["clear"])
        self.check("kl-warn", kl > p["warn"], "warn", key, kl,
                   lambda: f"{key} {kl:.3g} is above {p['warn']} for {self.held('kl-warn')} logged steps: drifting far "
                   "from the reference. Watch whether reward still improves; consider a larger beta.",
                   for_=1 if self._past_warn(kl) and kl > p["warn"] else p["for"], clear=p["clear"])
        self.check("kl-negative", e < p["negative"], "warn", key, kl,
                   lambda: f"{key} is negative on average ({e:.3g}): the estimator is being fed mismatched "
                   "log-probs (sampling temperature/top-k differ from the training forward pass, or the "
                   "reference model differs).", for_=5)
        self._growth(key, kl, e, float(n))
        self._noise(key, kl)
        if len(self.win) >= 10:
            z = robust_z(kl, self.win, floor=1e-6)
            d["kl_z"] = z
            spike = z > p["spike_z"] and kl > p["spike_min"]
            if self.spike_from < 0:
                self.spike_from = n
            if spike and (not self.spike_rows or self.spike_rows[-1] != n - 1):
                self.spike_rows.append(n)  # one entry per spike, however many rows it lasts
                self.spikes_seen += 1
            self.spike_rows = [r for r in self.spike_rows if r > n - p["spike_repeat_rows"]]
            self.check("kl-spike", spike, "info", key, kl,
                       lambda: f"{key} spiked to {kl:.3g} ({z:.0f} robust sigmas above its recent median): often one "
                       "batch the model handles very differently from the reference; investigate that batch. One "
                       "spike that is gone the next step is not a trend.", clear=3)
            count = len(self.spike_rows)
            repeated = count >= p["spike_repeat"] and self._spikes_stand_out(count, n)
            self.check("kl-spike-repeated", repeated, "warn", key, kl,
                       lambda: f"{key} has spiked {count} times in the last {p['spike_repeat_rows']} logged steps "
                       f"(now {kl:.3g}): the spikes repeat, so the updates are unstable, not one odd batch. Lower "
                       "the learning rate or raise beta.", clear=p["spike_repeat_rows"] // 5)
        self.win.push(kl)
        self.start.push(kl)
        if self.start.ready and not self.start_checked:
            self.start_checked = True
            s = self.start.value
            self.check("kl-high-at-start", s > p["warn"], "warn", key, s,
                       lambda: f"{key} is already {s:.3g} in the first {p['start_rows']} logged steps, before the "
                       "policy has had time to move: the reference model is not the initial policy, or "
                       "generation settings (temperature, chat template) differ between sampling and scoring.")
        if self.rows_seen >= p["near_zero_rows"]:
            med, spread = self.win.robust()
            # pinned at 0, not an estimator scattered around it: a per-sequence estimate that goes negative half the
            # time (RLOO, PPO) has a median near 0 while the policy moves slowly; its spread says it is measuring
            pinned = abs(med) < p["near_zero"] and spread < NEAR_ZERO_SPREAD * p["near_zero"]
            self.check("kl-near-zero", pinned, "warn", key, kl,
                       lambda: f"{key} has stayed ~0 (median {med:.2g}) for {self.rows_seen} logged steps: the policy "
                       "is not moving away from the reference (beta too high, LR too low, or the reference is "
                       "updated with the policy).", for_=20, clear=10)

    def _spikes_stand_out(self, count: int, n: int) -> bool:
        """More spikes in the window than the run's own spike rate before it explains (Poisson tail below
        ``spike_repeat_p``): heavy-tailed KL estimates spike now and then all run long, and over a long run a few
        land close together by chance."""
        p = self.p
        w = p["spike_repeat_rows"]
        before = max(self.spikes_seen - count, 0)  # a checkpoint from before the rate was kept has none
        rows_before = max(n - w - self.spike_from, 0)
        lam = w * (before + 0.5) / (rows_before + 100.0)  # half a spike per 100 rows a priori
        return poisson_tail(count, lam) < p["spike_repeat_p"]

    def _past_warn(self, kl: float) -> bool:
        """The warn line's sequential evidence (issue #28): a one-sided CUSUM of (kl - warn) / noise (the robust
        row-to-row noise, prewhitened by its AR(1) coefficient from the warm-up), each row clipped at ``warn_clip``
        sigmas so that one outlier (either way) cannot decide, its threshold from the ARL0 budget
        (``arl_for(warn_sooner)``). True once it has crossed: a KL far past the line is warned on its second row,
        not its third; the ``for``-row hold still decides where the noise is not known yet or the CUSUM is slower."""
        p = self.p
        arl = arl_for(self.warn_sooner)
        if self.warn_cusum.arl != arl:
            self.warn_cusum = Cusum(k=p["warn_k"], arl=arl)
        sd = self.noise.cached_sigma()  # as kl-noisy last read it (from row 20): reading it again moves nothing
        if not sd > 0:
            return False
        if self.warn_cusum.s <= 0.0:  # rho is read between excursions: a jump must not teach the test its noise
            self.warn_rho = self.ar.rho
        c = p["warn_clip"]
        return self.warn_cusum.push(min(max((kl - p["warn"]) / sd, -c), c), self.warn_rho)

    def _growth(self, key: str, kl: float, e: float, n: float) -> None:
        """KL growing without bound, seen in its slope before it crosses the warn line."""
        p = self.p
        d = self.derived
        self.recent.push(n, kl)
        self.longer.push(n, kl)
        self.span.push(n, kl)
        self.ar.push(kl)
        if not self.longer.full or e < p["grow_min"] * p["warn"]:  # far below the line: nothing to project
            self.check("kl-growing", False, "warn", key, kl, "")
            return
        # an autocorrelated noise overstates the slope's t by sqrt((1 + rho) / (1 - rho)): read it deflated
        t_raw = self.recent.t_stat()
        s1, s2, t = self.recent.slope(), self.longer.slope(), t_raw / self.ar.inflation()
        d["kl_trend_t"] = t
        # accelerating: the last rows' slope steeper than the longer one's by more than its own standard error twice
        # over, not only by a ratio: a wander of a levelled, saturating KL steepens a 20-row slope now and then, and
        # 1 - exp(-t / tau) decelerates by construction. The error is deflated by rho's upper bound (the claim
        # projects the slope ahead: an under-read rho must not make a wander look like a runaway)
        infl_hi = ar1_inflation(self.ar.upper())
        se1 = abs(s1 / t_raw) * infl_hi if t_raw else math.inf
        accel = s2 > 0 and s1 > p["grow_accel"] * s2 and s1 - s2 > ACCEL_SE * se1
        d["kl_acceleration"] = s1 / s2 if s2 > 0 else 0.0
        left = max(self.planned_rows - self.rows_seen, 0.0)
        # where the current slope (steeper still if it is accelerating) takes KL within one window, or by the end of
        # the run where that comes sooner: a KL that would pass the line only after the last step never does. A log
        # that runs on past its planned end (stages joined, a resumed run replayed, a wrong max_steps) has no end to
        # read: one window.
        w = self.recent.size
        if self.max_steps > 0 and left >= 1.0:
            w = min(w, int(left))
        projected = e + s1 * w * (min(s1 / s2, p["grow_accel_max"]) if accel else 1.0)
        d["kl_projected"] = projected
        # Where the run's length is known, a slow climb in a long run reaches the line long after one window and is
        # as much a runaway: the slope (the milder of the last 40 rows' and the span's) is carried towards the end,
        # but no further ahead than the run has already gone, and only while the climb is not slowing (the last 20
        # rows' slope at least `grow_end_keep` of the last 40's) and the span is full: a healthy KL rises early and
        # then levels off, and a straight line from its early slope crosses a line it never reaches.
        ahead = min(left, float(self.rows_seen))
        s_end = min(s2, self.span.slope())
        # ... and only a climb that the 40 rows show beyond an AR(1) wander (t deflated by rho's upper bound)
        climbing = (s1 >= p["grow_end_keep"] * s2 and self.span.full
                    and self.longer.t_stat() >= p["grow_t"] * infl_hi)
        by_end = e + s_end * ahead if p["grow_end"] > 0 and ahead > w and climbing else -math.inf
        line_end = p["grow_end"] * p["warn"]
        # a projection that crosses only because the climb looks accelerating needs the slope's t past grow_t with
        # rho's upper bound too: the acceleration is the claim most easily made by a wander
        soon = projected >= p["warn"] and (e + s1 * w >= p["warn"] or t_raw >= p["grow_t"] * infl_hi)
        growing = t >= p["grow_t"] and e >= p["grow_min"] * p["warn"] and (soon or by_end >= line_end)

        def why() -> str:  # only when the rule fires: this runs on every row past the warm-up
            if soon:
                return (f"{'accelerating and ' if accel else ''}on course to pass {p['warn']} within about {w} logged "
                        "steps")
            when = ("by the end of the run" if ahead >= left
                    else f"within {ahead:.0f} logged steps, as long as it has run so far")
            return (f"still climbing ({s_end:+.3g} per logged step over the last {self.span.size}), on course to pass "
                    f"{line_end:.3g} {when} (about {left:.0f} logged steps left)")

        self.check("kl-growing", growing, "warn", key, kl,
                   lambda: f"{key} is growing ({e:.3g} now, {s1:+.3g} per logged step, trend t={t:.0f}) and {why()}: "
                   "runaway policy drift, caught before the level line. Raise beta or lower the learning rate now; "
                   "in PPO check that clipping is working.", for_=p["grow_for"], clear=p["clear"])

    def _noise(self, key: str, kl: float) -> None:
        """KL noisy with high variance: row-to-row noise large against its own level and against the same ratio
        over the run's previous octave (KL near 0 at the start says little about its noise later)."""
        p = self.p
        d = self.derived
        self.noise.push(kl)
        self.negatives.push(1.0 if kl < 0 else 0.0)
        # per-token KL (k3, never negative) is noisy in log space: a lognormal-ish spread; PPO's per-sequence
        # estimate can go negative, so its noise is read relative to its smoothed level
        if kl < 0:
            self.went_negative = True
        if key == "kl" and not self.went_negative:  # a k3 estimate, never negative: its noise is a log-scale spread
            if kl > 0:
                self.cusum.push(math.log(kl))
        else:  # an estimator that goes negative (k1, per-sequence sums) has no log scale: relative to its level
            self.cusum.push(kl / max(abs(self.ewma.mean), 0.01 * p["warn"]))
        if not self.recent.full:  # the same warm-up as the growth rule (20 rows)
            return
        # the level is a median: one estimate 1000x the rest (heavy-tailed k3) must not make the noise look small
        # against it for 20 rows, and set a reference that the ordinary noise later stands 6x above
        level = self.win.robust()[0]  # 19+ values here: the window is pushed on every row the growth rule reads
        sig = self.noise.sigma(robust=True)
        cv = sig / max(abs(level), 1e-3 * p["warn"])
        neg = self.negatives.mean()
        d["kl_cv"] = cv
        d["kl_negative_share"] = neg
        self.cv_base.push(cv)
        self.neg_base.push(neg)
        cb, nb = self.cv_base.value, self.neg_base.value
        ref = self.cv_ref.value  # the noise ratio over the run's previous octave: KL near 0 early says little
        self.cv_ref.push(cv)
        if cb != cb:
            return
        if ref == ref:
            cb = ref
        relevant = sig >= p["noisy_min"] * p["warn"]  # noise on a KL of 1e-3 moves nothing
        # an estimate that goes negative, its level within its own row noise of 0 (an estimator scattered around 0),
        # gives no ratio to read
        noisy_cv = relevant and (neg == 0 or abs(level) > sig) and cv >= max(p["noisy_cv"], p["noisy_ratio"] * cb)
        # the share of negative estimates in 20 rows is binomial: an estimator scattered around 0 (a third to a half
        # negative) moves it by +-0.11 from window to window; a rise must stand 3 of those above its start
        nb_se = math.sqrt(max(nb, 0.0) * max(1.0 - nb, 0.0) / max(len(self.negatives), 1))
        # and an estimator negative that often from the start (nb >= noisy_negative) goes negative by its nature
        noisy_neg = (nb < p["noisy_negative"] and neg >= p["noisy_negative"]
                     and neg >= nb + max(p["noisy_negative"], 3.0 * nb_se))
        noisy_seq = self.cusum.s > p["noisy_h"]  # rows far outside its usual noise, too many of them lately
        self.check("kl-noisy", noisy_cv or noisy_neg or noisy_seq, "warn", key, kl,
                   lambda: f"{key} has turned noisy: row-to-row noise {sig:.3g} is {cv:.1f}x its level {level:.3g} "
                   f"(earlier in the run {cb:.2f}x)" + (f", and {neg:.0%} of the recent estimates are negative"
                                                      if neg > 0 else "")
                   + ": unstable optimisation. The learning rate is probably too high for this KL penalty.",
                   for_=p["noisy_for"], clear=p["clear"])


class PolicyRatioGauge(Gauge):
    """Gauge 11 — importance ratio and clip fractions (PPO; off-policy GRPO only), and PPO's value function.

    Default GRPO is on-policy (num_iterations=1): the ratio is exactly 1 and
    every clip fraction 0, so clip rules stay silent until clipping is seen.
    The level lines (ratio, clip fraction) are held ``warn_for`` = 3 rows: one noisy row past 30 % clipped is
    a spike, not the level moving. ``clip-growing`` reads the clip fraction's trend against its own start and
    noise, so a fraction climbing towards 30 % is caught on the way (the post:
    it often precedes a KL explosion); it waits while the learning rate is
    still warming up, when clipping rises in every healthy run. ``clip-low`` is
    deliberately ``info``: the fraction fades in every healthy run as the
    schedule decays the learning rate, so "< 1 %" is a hint (updates are timid),
    not an alarm. The value-function rules (PPO's ``loss/value_avg`` and
    ``val/clipfrac_avg``) live here because a value function that diverges
    shows up in the same updates.
    """

    id = "policy_ratio"
    title = "Policy ratio & clipping"
    inputs = ("val/ratio", "policy/clipfrac_avg", "clip_ratio/region_mean", "clip_ratio/low_mean",
              "clip_ratio/high_mean", "val/ratio_var", "loss/value_avg", "val/clipfrac_avg")
    outputs = ("ratio", "ratio_deviation", "clip_asymmetry", "clip", "clip_ewma", "clip_trend_t", "clip_vs_start",
               "ratio_var", "value_loss", "value_loss_vs_start", "value_clip")
    defaults = {"ratio_warn": (0.7, 1.5), "ratio_stop": (0.5, 2.0), "clip_warn": 0.3, "clip_stop": 0.5,
                # the warn lines too are held 3 rows: one noisy row past 30 % clipped is not the level moving
                "clip_low": 0.01, "for": 3, "warn_for": 3,
                "grow_rows": 20, "grow_t": 3.0, "grow_abs": 0.03, "grow_sigma": 3.0, "grow_ratio": 1.5,
                "grow_for": 3, "grow_share": 0.05, "ratio_var_x": 4.0, "ratio_var_min": 1e-3, "value_growth": 3.0,
                "value_t": 3.0, "value_clip": 0.3}
    family_defaults = {"grpo": {"clip_warn": 0.4, "clip_stop": 0.6}}

    def setup(self) -> None:
        self.off_policy = False
        self.clip_ewma = Ewma(0.2)
        self.clip_slope = RollingSlope(20)
        self.clip_trend = RollingCorrelation(self.p["grow_rows"])
        self.clip_base = Baseline(10)
        self.clip_noise = DiffNoise(20)
        self.clip_rows = 0
        self.lr_prev = math.nan
        self.lr_rose_at = 0  # clip row count when the learning rate last rose (warm-up)
        self.var_base = Baseline(10)
        self.var_ewma = Ewma(0.3)
        self.ratio_win = RollingWindow(20)
        self.value_base = Baseline(10)
        self.value_ewma = Ewma(0.2)
        self.value_trend = RollingCorrelation(20)
        self.value_rows = 0
        self.note = ""

    def applies(self) -> bool:
        return self.family in ("ppo", "grpo", "online_dpo")

    def plan_long(self) -> None:
        # a clip fraction creeping up over a long run is a trend over a share of the run: 20 rows of a 2000-row
        # run hold too little of the climb to stand out of the noise
        w = round(self.p["grow_share"] * self.planned_rows)
        if w > self.p["grow_rows"]:
            self.clip_trend = RollingCorrelation(w)

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        v = row.values
        p = self.p
        d = self.derived
        ratio = v.get("val/ratio")
        if ratio is not None and finite(ratio):
            d["ratio"] = ratio
            dev = abs(ratio - 1.0)
            d["ratio_deviation"] = dev
            # the post's two bands, both warnings (issue #28): "values consistently above 1.5 or below 0.7" and
            # "if it regularly exceeds 2.0 or drops below 0.5, the policy updates are too aggressive" -- it warns,
            # it never says stop; the rule keeps its name (alerts.yaml, the diagnoser)
            lo, hi = p["ratio_stop"]
            self.check("ratio-stop", not lo <= ratio <= hi, "warn", "val/ratio", ratio,
                       lambda: f"policy ratio {ratio:.3g} is outside [{lo}, {hi}] for {p['for']} logged steps (the "
                       "post's outer band: 'regularly exceeds 2.0 or drops below 0.5'): updates are far off-policy "
                       "and the trust region is gone. Lower the learning rate or the PPO epochs.",
                       for_=p["for"])
            lo, hi = p["ratio_warn"]
            self.check("ratio-warn", not lo <= ratio <= hi, "warn", "val/ratio", ratio,
                       lambda: f"policy ratio {ratio:.3g} is outside [{lo}, {hi}] (the post's line: 'consistently "
                       "above 1.5 or below 0.7'): updates are drifting off-policy.",
                       for_=p["warn_for"])
            self.ratio_win.push(ratio)
        self._ratio_variance(v)
        self._value(v)
        lr = v.get("learning_rate")
        key = "policy/clipfrac_avg" if "policy/clipfrac_avg" in v else "clip_ratio/region_mean"
        clip = v.get(key)
        if clip is None and "clip_ratio/low_mean" in v and "clip_ratio/high_mean" in v:
            clip = v["clip_ratio/low_mean"] + v["clip_ratio/high_mean"]
        lo_c, hi_c = v.get("clip_ratio/low_mean"), v.get("clip_ratio/high_mean")
        if lo_c is not None and hi_c is not None and finite(lo_c) and finite(hi_c) and lo_c + hi_c > 0:
            d["clip_asymmetry"] = (hi_c - lo_c) / (hi_c + lo_c)
        if clip is None or not finite(clip):
            return
        if clip > 0 or self.family == "ppo":
            self.off_policy = True
        if not self.off_policy:
            self.note = "on-policy (ratio = 1, clip fractions 0): nothing to judge"
            d["clip"] = clip
            return
        self.note = ""
        d["clip"] = clip
        ce = self.clip_ewma.push(clip)
        d["clip_ewma"] = ce
        self.clip_slope.push(row.step, clip)
        self.clip_rows += 1
        if lr is not None and finite(lr):
            if self.lr_prev == self.lr_prev and lr > self.lr_prev * (1 + 1e-9):
                self.lr_rose_at = self.clip_rows
            self.lr_prev = lr
        self.check("clip-stop", clip > p["clip_stop"], "stop", key, clip,
                   lambda: f"{clip:.0%} of tokens are clipped for {p['for']} logged steps: each update is far too "
                   "large; KL explosion usually follows. Stop; lower LR or num_iterations.", for_=p["for"])
        self.check("clip-high", clip > p["clip_warn"], "warn", key, clip,
                   lambda: f"clip fraction {clip:.0%} is above {p['clip_warn']:.0%} ({self._clip_line_source()}): "
                   "updates are too aggressive.", for_=p["warn_for"])
        self.check("clip-low", self.rows_seen > 20 and ce < p["clip_low"], "info", key, clip,
                   lambda: f"clip fraction ~{ce:.2%} on an off-policy run: updates are very timid; a larger LR "
                   "would learn faster.", for_=10)
        self._clip_growth(key, clip, ce)

    def _clip_line_source(self) -> str:
        """Where the clip warn line comes from: a user who sees a GRPO run at 35 % stay silent can tell why."""
        line = self.p["clip_warn"]
        if self.family == "grpo" and line == self.family_defaults["grpo"]["clip_warn"]:
            return ("the series' GRPO line, Part III: 'total clip > 40 % excessive', 10-30 % usually healthy; "
                    "the post's 30 % is PPO's")
        if line == self.defaults["clip_warn"]:
            return "the post's line: 'Clip fraction too high (> 30%)'"
        return "your clip_warn"

    def _clip_growth(self, key: str, clip: float, ce: float) -> None:
        """Clip fraction growing over time: judged against its own start and noise, before the 30 % line."""
        p = self.p
        d = self.derived
        self.clip_trend.push(float(self.clip_rows), clip)
        self.clip_noise.push(clip)
        self.clip_base.push(clip)
        base = self.clip_base.value
        if base != base or not self.clip_trend.full:
            return
        t = self.clip_trend.t_stat()
        sig = self.clip_noise.sigma()
        d["clip_trend_t"] = t
        d["clip_vs_start"] = ce / max(base, 1e-6)
        warming = self.clip_rows - self.lr_rose_at < self.clip_trend.size
        need = base + max(p["grow_abs"], p["grow_sigma"] * sig)
        growing = (t >= p["grow_t"] and ce >= need and ce >= p["grow_ratio"] * base and not warming
                   and ce < p["clip_warn"])
        self.check("clip-growing", growing, "warn", key, clip,
                   lambda: f"clip fraction keeps growing: {ce:.1%} now from {base:.1%} at the start (trend t={t:.1f}): "
                   "the updates are getting more aggressive, which often precedes a KL explosion. Lower the "
                   "learning rate (or num_iterations) before it passes "
                   f"{p['clip_warn']:.0%}.", for_=p["grow_for"], clear=10)

    def _ratio_variance(self, v: Mapping[str, float]) -> None:
        """Variance of the importance ratio (PPO's val/ratio_var, else the ratio's own spread) vs its start."""
        p = self.p
        d = self.derived
        rv = v.get("val/ratio_var")
        metric = "val/ratio_var"
        if rv is None or not finite(rv):
            if "val/ratio" not in v or len(self.ratio_win) < 10:
                return
            rv, metric = self.ratio_win.var(), "val/ratio"
        e = self.var_ewma.push(rv)
        self.var_base.push(rv)
        d["ratio_var"] = e
        base = self.var_base.value
        if base != base:
            return
        high = e >= p["ratio_var_x"] * max(base, p["ratio_var_min"] / p["ratio_var_x"]) and e >= p["ratio_var_min"]
        self.check("ratio-variance", high, "warn", metric, rv,
                   lambda: f"the policy ratio's variance rose to {e:.3g} ({e / max(base, 1e-12):.0f}x its start): some "
                   "tokens move far more than others in each update, the trust region is fraying. Lower the "
                   "learning rate or the number of PPO epochs.", for_=3, clear=10)

    def _value(self, v: Mapping[str, float]) -> None:
        """PPO's value function: value loss growing, value clipping high (the post's "value function" row)."""
        p = self.p
        d = self.derived
        vl = v.get("loss/value_avg")
        if vl is not None and finite(vl):
            self.value_rows += 1
            e = self.value_ewma.push(vl)
            self.value_base.push(vl)
            self.value_trend.push(float(self.value_rows), vl)
            d["value_loss"] = vl
            b = self.value_base.value
            if b == b and b > 0 and self.value_trend.full:
                ratio = e / b
                t = self.value_trend.t_stat()
                d["value_loss_vs_start"] = ratio
                self.check("value-loss-growing", ratio >= p["value_growth"] and t >= p["value_t"], "warn",
                           "loss/value_avg", vl,
                           lambda: f"value loss keeps growing: {e:.3g} now, {ratio:.1f}x its start (trend t={t:.1f}): "
                           "the value function cannot follow the returns, so advantages turn to noise. Lower the "
                           "learning rate, check reward scale/whitening, or use a smaller vf_coef.", for_=3, clear=10)
        vc = v.get("val/clipfrac_avg")
        if vc is not None and finite(vc):
            d["value_clip"] = vc
            self.check("value-clip-high", vc > p["value_clip"], "warn", "val/clipfrac_avg", vc,
                       lambda: f"{vc:.0%} of value predictions are clipped: the value function moves too far per "
                       "update (value loss unstable). Lower the learning rate or widen cliprange_value.", for_=3)


def _as_fall(rise: float) -> float:
    """A rise line read on a log scale as a fall: to 1 / (1 + x) of the baseline is as far as up to 1 + x."""
    return rise / (1.0 + rise)


class LengthGauge(Gauge):
    """Gauge 12 — generation length: drift, trend, explosion, collapse, spread, truncation.

    The baseline is the first logged rows, or the SFT model's length distribution when the user
    measured it (params ``baseline_mean`` and ``baseline_std`` in tokens, ``batch_completions`` the
    number of completions per logged batch): the post's "> 30 % change in mean or > 50 % change in
    variance deserves investigation" is judged against it at warn level. The within-batch spread is
    read from ``completions/min_length`` and ``max_length`` (TRL logs no std): batches where nearly
    every completion hit the cap are left out, their min = max = cap says nothing about diversity.
    Answers getting shorter, or more alike, while the reward keeps improving is what a sharpening
    policy does: then it is ``info``, not a warning. ``truncation-gap`` (mean vs mean_terminated) is
    the post's own truncation measure; where ``completions/clipped_ratio`` is logged, ``truncation``
    judges the same thing directly, so the gap is only reported. The steady-trend lines (``trend_target``,
    ``trend_now``, ``trend_min``) are ratios read on a log scale: a fall to 1 / (1 + x) of the baseline is as far as
    a rise to 1 + x, and the projection of a fall to the end of the run is a straight line in log space (it nears
    -100 %, never passes it; a climb's is a straight line in tokens); the post's 30 % line (``drift``) is kept as
    written, both ways.
    """

    id = "length"
    title = "Generation length"
    inputs = ("completions/mean_length", "completions/clipped_ratio", "val/num_eos_tokens")
    outputs = ("mean_length", "truncation_gap", "vs_baseline", "spread", "clipped_ratio", "num_eos_tokens",
               "length_trend_t", "spread_vs_start", "variance_vs_baseline", "log_spread_vs_baseline",
               "length_projected", *ROLLOUT_OUTPUTS["length"])
    # A 2x / 0.5x ratio is far outside healthy drift, so a light EWMA (0.5) held 3 rows is enough; heavier
    # smoothing only delayed detection (benchmarks/detection, tuning seeds) and bought no fewer false alarms.
    defaults = {"explode": 2.0, "collapse": 0.5, "drift": 0.3, "for": 3, "smooth": 0.5, "truncation": 0.2,
                "truncation_for": 3, "spread_collapse": 0.25, "variance_change": 0.5,
                "baseline_rows": 10, "drift_for": 5, "trend_rows": 60, "trend_t": 5.0, "trend_min": 0.25,
                "trend_target": 0.45, "trend_now": 0.15, "drift_sd": 1.0,
                "trend_for": 3, "gap": 0.1, "baseline_mean": 0.0, "baseline_std": 0.0, "batch_completions": 0,
                "gold": [], "significance": 4.0, **ROLLOUT_DEFAULTS["length"]}

    def setup(self) -> None:
        p = self.p
        self.base = Baseline(p["baseline_rows"])
        if p["baseline_mean"] > 0:
            self.base.value = float(p["baseline_mean"])
        self.spread_base = Baseline(p["baseline_rows"])
        if p["baseline_mean"] > 0 and p["baseline_std"] > 0:
            self.spread_base.value = _expected_range(p["batch_completions"]) * p["baseline_std"] / p["baseline_mean"]
        self.ewma = Ewma(p["smooth"])
        self.slow = Ewma(0.2)
        self.spread_ewma = Ewma(0.2)
        self.spread_log = Ewma(0.2)  # in log space: a collapse (10x down in a few rows) shows twice as fast
        self.trend = RollingCorrelation(p["trend_rows"])
        self.progress = RewardProgress(p["gold"])
        self.len_rows = 0
        self.len_noise = DiffNoise(20)
        self.spread_noise = DiffNoise(20)
        self.log_range_base = Baseline(p["baseline_rows"])
        self.log_range = Ewma(0.2)
        self.log_range_noise = DiffNoise(20)

    def applies(self) -> bool:
        return self.family in ("grpo", "ppo", "online_dpo")

    def plan_short(self) -> None:
        self.trend = RollingCorrelation(self.rows(self.p["trend_rows"]))
        self.progress = RewardProgress.shortened(self)

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        length_rules(self, row)
        v = row.values
        p = self.p
        d = self.derived
        self.progress.push(v)
        L = v.get("completions/mean_length")
        c = v.get("completions/clipped_ratio")
        if L is not None and finite(L) and L >= 0:
            d["mean_length"] = L
            self.len_rows += 1
            e = self.ewma.push(L)
            slow = self.slow.push(L)
            self.len_noise.push(L)
            self.trend.push(float(self.len_rows), L)
            self.base.push(L)
            term = v.get("completions/mean_terminated_length")
            if term is not None and finite(term):
                gap = L - term
                d["truncation_gap"] = gap
                if L > 0 and (c is None or not finite(c)):
                    frac = gap / L
                    self.check("truncation-gap", frac > p["gap"], "warn", "completions/mean_terminated_length", term,
                               lambda: f"mean length {L:.0f} is {frac:.0%} above the mean length of completions that "
                               f"ended with EOS ({term:.0f}): many answers are cut off at max_completion_length "
                               "before they conclude. Raise the limit or find out why the model rambles.",
                               for_=p["truncation_for"], clear=5)
            if self.base.ready and self.base.value > 0:
                b = self.base.value
                ratio = e / b
                d["vs_baseline"] = ratio
                self.check("length-explosion", ratio > p["explode"], "warn", "completions/mean_length", L,
                           lambda: f"completions are {ratio:.1f}x their starting length ({b:.0f} -> "
                           f"{e:.0f} tokens; the line, {p['explode']:g}x, is the post's baseline ratio): length bias. "
                           "If reward rose with it, the policy is being paid for "
                           "verbosity; add a length penalty or check the reward.", for_=p["for"])
                self.check("length-collapse", ratio < p["collapse"], "warn", "completions/mean_length", L,
                           lambda: f"completions shrank to {ratio:.2f}x their starting length "
                           f"({b:.0f} -> {e:.0f} tokens; the line, {p['collapse']:g}x, is the post's baseline ratio): "
                           "terse collapse, often a reward that "
                           "punishes length or rewards an empty answer.", for_=p["for"])
                self._drift(L, slow / b, b, slow)
        mn, mx = v.get("completions/min_length"), v.get("completions/max_length")
        if L is not None and mn is not None and mx is not None and finite(L) and finite(mn) and finite(mx) and L > 0:
            self._spread(L, mn, mx, c)
        if c is not None and finite(c):
            d["clipped_ratio"] = c
            self.check("truncation", c > p["truncation"], "warn", "completions/clipped_ratio", c,
                       lambda: f"{c:.0%} of completions hit max_completion_length: rewards are computed on cut-off "
                       "answers. Raise max_completion_length, or penalise overlong answers (DAPO-style).",
                       for_=p["truncation_for"], clear=5)
        eos = v.get("val/num_eos_tokens")
        if eos is not None and finite(eos):
            d["num_eos_tokens"] = eos
            self.check("no-eos", eos <= 0, "warn", "val/num_eos_tokens", eos,
                       lambda: "no completion ends with an EOS token: every sample is truncated, so the reward "
                       "model scores unfinished text (check the stop token / generation config).", for_=10)

    def _drift(self, L: float, ratio: float, b: float, slow: float) -> None:
        """Mean change vs the baseline (the post's > 30 %) and a steady trend, both with the reward as context."""
        p = self.p
        d = self.derived
        pct = ratio - 1.0
        # the reward's context and the trend's t-statistic only where a rule could use them (they cost a row)
        lo = min(p["trend_now"], p["drift"])
        moved = abs(pct) >= (_as_fall(lo) if pct < 0 else lo)  # a fall's lines are read on a log scale (below)
        improving = self.progress.improving(now=True) if moved and pct < 0 else True
        t = self.trend.t_stat() if moved and self.trend.full else 0.0
        d["length_trend_t"] = t
        # the smoothed level and the 10-row baseline are both noisy estimates: only a move that stands
        # `significance` of their combined standard errors away from the baseline counts
        sd = self.len_noise.sigma() * _BASE_EWMA_SD if len(self.len_noise) >= 10 else math.inf
        if abs(slow - b) < p["significance"] * sd:
            pct = 0.0
        # past the line by the smoothed level's own noise: a healthy drift of 20-25 % plus one noisy stretch is not
        # a 30 % change
        past = abs(pct) - (p["drift_sd"] * sd / b if sd < math.inf else 0.0) > p["drift"]
        self.check("length-grew", past and pct > 0, "warn", "completions/mean_length", L,
                   lambda: f"mean length is {pct:+.0%} vs the baseline ({b:.0f} -> {slow:.0f} tokens), past the "
                   f"{p['drift']:.0%} that deserves a look: the model is learning that verbosity pays. Check the "
                   "reward for a length bias; consider length normalisation or a brevity penalty.",
                   for_=p["drift_for"], clear=10)
        self.check("length-shrank", past and pct < 0 and not improving, "warn", "completions/mean_length", L,
                   lambda: f"mean length is {pct:+.0%} vs the baseline ({b:.0f} -> {slow:.0f} tokens) and the reward "
                   "is not improving: the model is learning that short answers are safer. Check the reward "
                   "distribution for penalties it avoids by saying less.", for_=p["drift_for"], clear=10)
        self.check("length-shorter-concise", past and pct < 0 and improving, "info", "completions/mean_length", L,
                   lambda: f"mean length is {pct:+.0%} vs the baseline while the reward keeps improving: the model "
                   "is getting more concise. Usually healthy; read a few samples to be sure nothing is cut.",
                   for_=p["drift_for"], clear=10)
        # A steady trend, early: where the slope of the last `trend_rows` rows takes the mean by the end of the run
        # (the callback knows max_steps); without it, the change so far must reach `trend_min`.
        # A climb is carried on as a straight line in tokens (compounded, a straight line in log space, a steady
        # +0.3 % a row read as +14,000 % by step 2,000); a fall as a straight line in log space, so it nears -100 %
        # and never passes it. The rows left come from the planned rows, which start at the log's first step (a
        # resumed run's first row is not step 0).
        slope = self.trend.slope() if self.trend.full else 0.0
        rows_left = max(0.0, self.planned_rows - self.rows_seen) if self.max_steps > 0 else 0.0
        if slope >= 0 or slow <= 0:
            projected = pct + slope / b * rows_left
        else:
            projected = math.expm1(max(math.log1p(max(pct, -0.999)) + slope / slow * rows_left, -50.0))
        d["length_projected"] = projected
        # the lines are ratios, read on a log scale: a fall to 1/(1 + x) of the baseline is as far as a rise to 1 + x
        # (+45 % by the end matches -31 %; lengths are close to lognormal)
        tgt, now, least = p["trend_target"], p["trend_now"], p["trend_min"]
        if pct < 0:
            tgt, now, least = _as_fall(tgt), _as_fall(now), _as_fall(least)
        far = (abs(projected) >= tgt and abs(pct) >= now) or abs(pct) >= least
        steady = self.trend.full and abs(t) >= p["trend_t"] and far and pct * t > 0
        course = f"{projected:+.0%}" if projected < 9.0 else "more than 10x the baseline"
        where = f", on course for {course} by step {self.max_steps}" if abs(pct) < least else ""
        self.check("length-trend-up", steady and t > 0, "warn", "completions/mean_length", L,
                   lambda: f"length is steadily increasing ({pct:+.0%} vs the baseline{where}, trend t={t:.0f} over "
                   f"the last {self.trend.size} logged steps): a length bias in the reward is being learned. Add "
                   "length normalisation or a brevity penalty before it explodes.", for_=p["trend_for"], clear=10)
        self.check("length-trend-down", steady and t < 0 and not improving, "warn",
                   "completions/mean_length", L,
                   lambda: f"length is steadily decreasing ({pct:+.0%} vs the baseline{where}, trend t={t:.0f}) while "
                   "the reward does not improve: the model learns to say less. Check which penalty it avoids.",
                   for_=p["trend_for"], clear=10)

    def _spread(self, L: float, mn: float, mx: float, clipped: float | None) -> None:
        """Within-batch length spread (max - min) / mean vs its start: variance change and collapse."""
        p = self.p
        d = self.derived
        spread = (mx - mn) / L
        d["spread"] = spread
        if clipped is not None and finite(clipped) and clipped >= 0.95:
            return  # everything at the cap: min = max = cap measures the limit, not the policy's diversity
        self.spread_base.push(spread)
        se = self.spread_ewma.push(spread)
        sl = math.exp(self.spread_log.push(math.log(max(spread, 1e-3))))
        self.spread_noise.push(spread)
        sb = self.spread_base.value
        if sb != sb or sb <= 1e-3:
            return
        sratio = se / sb
        # a collapse is read on the smaller of the two means: a spread falling 10x in a few rows reaches the
        # collapse line in half the rows in log space, where a scale's changes are multiplicative
        se_c = min(se, sl)
        cratio = se_c / sb
        # the range of a small batch is a noisy estimate of its spread: only a change that stands out counts
        sd = self.spread_noise.sigma() * _BASE_EWMA_SD if len(self.spread_noise) >= 10 else math.inf
        significant = abs(se - sb) >= p["significance"] * sd
        var_ratio = sratio * sratio
        d["spread_vs_start"] = sratio
        d["variance_vs_baseline"] = var_ratio
        sig_c = abs(se_c - sb) >= p["significance"] * sd
        collapsed = cratio < p["spread_collapse"] and sig_c
        # however deep, a narrowing while the reward still clearly rises is sharpening: a fixed answer format (short
        # arithmetic answers) gives small batches identical lengths while the policy keeps getting better (issue #28)
        improving = self.progress.improving(now=True) if collapsed else True
        self.check("length-variance-collapse", collapsed and not improving, "warn", "completions/max_length",
                   spread,
                   lambda: f"the length spread within a batch fell to {cratio:.2f}x its start ((max - min) / mean "
                   f"{sb:.2f} -> {se_c:.2f}) while the reward is not improving: answers are converging on one "
                   "template, a sign of mode collapse. Raise the temperature or add an entropy bonus.",
                   for_=p["for"], clear=10)
        self.check("length-spread-narrowing", collapsed and improving, "info", "completions/max_length",
                   spread,
                   lambda: f"the length spread within a batch fell to {cratio:.2f}x its start while the reward keeps "
                   "improving: the policy is sharpening. Healthy unless samples look like one template.",
                   for_=p["for"], clear=10)
        vc = p["variance_change"]
        # a milder narrowing: the reward having risen over the run is enough to call it sharpening
        narrower = significant and var_ratio < 1 - vc and not collapsed and not self.progress.improving()
        log_grew = self._log_spread_grew(mn, mx, 1 + vc)  # every row: its statistics must not skip rows
        grew = (significant and var_ratio > 1 + vc) or log_grew
        changed = (grew and not collapsed) or narrower
        self.check("length-variance-change", changed, "warn", "completions/max_length", spread,
                   lambda: f"the length variance is {var_ratio:.2f}x the baseline's (spread (max - min) / mean "
                   f"{sb:.2f} -> {se:.2f}; {d.get('log_spread_vs_baseline', math.nan) ** 2:.2f}x on log(max / min)), "
                   f"past the {vc:.0%} change that deserves a look: the output distribution is changing shape. Read "
                   "samples; compare with the SFT model.", for_=p["drift_for"], clear=10)

    def _log_spread_grew(self, mn: float, mx: float, limit: float) -> bool:
        """The spread's growth read on log(max / min), against its own baseline, squared as a variance ratio.

        Lengths are close to lognormal, and the longest are cut at max_completion_length: when their log-spread
        grows 1.5-1.9x, (max - min) / mean grows only ~1.2x (the max sits at the cap, the mean moves with the
        tail), while log(max / min) grows with it, the shortest answers getting shorter.
        """
        if not (mn >= 1 and mx > mn):
            self.derived.pop("log_spread_vs_baseline", None)
            return False
        x = math.log(mx / mn)
        self.log_range_base.push(x)
        le = self.log_range.push(x)
        self.log_range_noise.push(x)
        lb = self.log_range_base.value
        if lb != lb or lb <= 1e-3 or len(self.log_range_noise) < 10:
            return False
        ratio = le / lb
        self.derived["log_spread_vs_baseline"] = ratio
        sd = self.log_range_noise.sigma() * _BASE_EWMA_SD
        return le - lb >= self.p["significance"] * sd and ratio * ratio > limit


_EWMA_SD = math.sqrt(0.2 / (2 - 0.2))
"""Standard deviation of an EWMA(0.2) of independent noise, in units of the noise's own sigma."""
_EWMA10_SD = math.sqrt(0.1 / (2 - 0.1))
"""The same for an EWMA(0.1)."""
_BASE_EWMA_SD = math.sqrt(0.2 / (2 - 0.2) + 1.57 / 10)
"""Standard error of an EWMA(0.2) minus the median of 10 earlier rows (pi/2 / n: a median's variance)."""


def _expected_range(n: int) -> float:
    """Expected max - min of ``n`` normal draws, in sigmas (Blom's approximation); 16 when n is unknown."""
    from statistics import NormalDist

    n = int(n) if n and n >= 2 else 16
    return 2.0 * NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


class EntropyGauge(Gauge):
    """Policy entropy: sharpening or collapse (by context), and spikes (forgetting).

    Entropy falls in every policy that learns; what it means depends on the run around it. Falling
    while the reward (and the gold reward, when logged) keeps rising is sharpening: ``info``.
    Falling while the reward is flat, or while nearly every group has lost its reward spread (zero-std
    groups also pile up when prompts get solved, so below 90 % they count only with a flat reward), is
    mode collapse: ``warn``, then ``stop`` if it goes on; a collapsing length spread is reported with it.
    Below 0.2x its start it is a warning whatever the reward does (few alternatives are sampled any more).
    There is deliberately no absolute floor (Part III's "below 1.0"): where entropy starts is a property
    of the model family (a base model near 1.5, an instruct model near 0.3), not of the run's health —
    on real healthy GRPO runs that floor was most of the false alarms. The warning holds ``for`` (8) rows:
    a noisy reward's trend dips under the line for a few rows now and then while a policy sharpens.
    A reward that has stopped rising because it sits near its ceiling (a [0, 1] success rate smoothed at or above
    ``saturated_level``) is not "not improving": a solved task leaves little to explore, and real healthy GRPO runs
    at 0.85-0.93 sharpen exactly so; below ``deep_ratio`` it still warns.
    """

    id = "entropy"
    title = "Policy entropy"
    inputs = ("entropy", "objective/entropy", "policy/entropy_avg")
    outputs = ("entropy", "entropy_ewma", "vs_start")
    defaults = {"collapse_ratio": 0.7, "sharpening_ratio": 0.5, "deep_ratio": 0.2, "stop_ratio": 0.2, "stop_for": 20,
                "for": 8,
                "smooth": 0.2, "spike_z": 8.0, "baseline_rows": 10, "zero_std_rise": 0.3, "zero_std_alone": 0.9,
                "saturated_level": 0.8, "gold": []}

    def setup(self) -> None:
        self.level = RewardLevel()
        self.base = Baseline(self.p["baseline_rows"])
        self.ewma = Ewma(self.p["smooth"])
        self.win = RollingWindow(30)
        self.progress = RewardProgress(self.p["gold"])
        self.zero = Ewma(0.3)
        self.zero_base = Baseline(self.p["baseline_rows"])
        self.spread = Ewma(0.2)
        self.spread_base = Baseline(self.p["baseline_rows"])

    def applies(self) -> bool:
        return self.family in ("grpo", "ppo", "online_dpo")

    def plan_short(self) -> None:
        self.progress = RewardProgress.shortened(self)

    def _context(self, v: Mapping[str, float]) -> None:
        """The signals that say whether a falling entropy is sharpening or collapse."""
        self.progress.push(v)
        self.level.push(v.get("reward", v.get("objective/scores")))
        f = v.get("frac_reward_zero_std")
        if f is not None and finite(f):
            self.zero.push(f)
            self.zero_base.push(f)
        L, mn, mx = v.get("completions/mean_length"), v.get("completions/min_length"), v.get("completions/max_length")
        if L and mn is not None and mx is not None and finite(L) and finite(mn) and finite(mx) and L > 0:
            c = v.get("completions/clipped_ratio")
            if c is None or not finite(c) or c < 0.95:
                s = (mx - mn) / L
                self.spread.push(s)
                self.spread_base.push(s)

    def _why_collapse(self) -> list[str]:
        """The collapse signs present now (empty: the context says sharpening)."""
        reasons = []
        prog = self.progress
        sat = self.level.smooth
        saturated = sat == sat and sat >= self.p["saturated_level"]  # near the ceiling: nothing left to climb
        flat = prog.known() and not prog.improving() and not saturated
        if flat:
            reasons.append("the reward is not improving" + (" (or the gold reward is not)" if prog.gold_keys else ""))
        zb, ze = self.zero_base.value, self.zero.mean
        # zero-std groups piling up while the reward still rises are mostly solved prompts: they count on their
        # own only once nearly every group has lost its signal
        if zb == zb and ze >= max(0.5, zb + self.p["zero_std_rise"]) and (flat or ze >= self.p["zero_std_alone"]):
            reasons.append(f"zero-std groups rose to {ze:.0%} (from {zb:.0%})")
        if reasons:
            sb = self.spread_base.value
            if sb == sb and sb > 1e-3 and self.spread.mean < 0.5 * sb:
                reasons.append(f"the length spread fell to {self.spread.mean / sb:.2f}x its start")
        return reasons

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        v = row.values
        self._context(v)
        key = next((k for k in self.inputs if k in v), None)
        if key is None:
            return
        h = v[key]
        if not finite(h):
            return
        p = self.p
        d = self.derived
        d["entropy"] = h
        e = self.ewma.push(h)
        d["entropy_ewma"] = e
        self.base.push(h)
        b = self.base.value
        if b == b and b > 0:
            rel = e / b
            d["vs_start"] = rel
            falling = rel < p["collapse_ratio"]
            context = self._why_collapse() if falling else []
            if not self.progress.known():  # no reward logged at all: no context, only a halving counts
                halved = rel < p["sharpening_ratio"]
                context = ["no reward is logged to tell sharpening from collapse"] if halved else []
            reasons = list(context)
            if rel < p["deep_ratio"] and not reasons:  # however well the reward does, few alternatives are left
                reasons.append(f"it is below {p['deep_ratio']}x its start: the policy hardly samples alternatives "
                               "any more, which caps what it can still learn")
            why = "; ".join(reasons)
            self.check("entropy-collapse", bool(reasons), "warn", key, h,
                       lambda: f"entropy fell to {rel:.2f}x its start ({b:.3g} -> {e:.3g}) and {why}: mode collapse, "
                       "the policy has stopped exploring. Raise the temperature, use clip-higher (epsilon_high), "
                       "add an entropy bonus, or filter prompts by difficulty.", for_=p["for"])
            self.check("entropy-collapse-persistent", bool(context) and rel < p["stop_ratio"], "stop", key, h,
                       lambda: f"entropy has stayed below {p['stop_ratio']}x its start ({e:.3g}) for {p['stop_for']} "
                       f"logged steps and {why}: the policy has collapsed and further steps learn nothing. Stop and "
                       "resume from an earlier checkpoint with more exploration.", for_=p["stop_for"])
            self.check("entropy-sharpening", rel < p["sharpening_ratio"] and not reasons, "info", key, h,
                       lambda: f"entropy fell to {rel:.2f}x its start ({b:.3g} -> {e:.3g}) while the reward keeps "
                       "improving: the policy is sharpening on what it learned. Normal; watch for the reward "
                       "stalling.", for_=p["for"], clear=10)
        if len(self.win) >= 10:
            z = robust_z(h, self.win, floor=1e-6)
            self.check("entropy-spike", z > p["spike_z"], "info", key, h,
                       lambda: f"entropy jumped ({z:.0f} robust sigmas): possible forgetting or a bad batch.",
                       clear=3)
        self.win.push(h)


class RewardSignalGauge(Gauge):
    """GRPO extras: is there still a learning signal inside the groups?

    With group-relative advantages a group whose rewards are all equal
    contributes nothing; ``frac_reward_zero_std`` is the robust measure (the
    meaning of ``reward_std`` changed across TRL versions, so it is used only
    when the fraction is not logged). Over half the groups without spread is a
    warning only when they are mostly failed prompts and the reward is not
    rising: with a fraction f uniform at success rate p, at least f - p of the
    groups failed every completion whatever the prompt mix, half the uniform
    ones once p <= f / 2. Above 1/2 (a group is all-correct with chance p^G and
    all-wrong with (1-p)^G, so the uniform ones are mostly solved, whatever G),
    or while the reward rises (the entropy gauge's test of progress), they are
    prompts being solved: ``info``. A signed reward has no level: the fixed line
    decides, as before.
    """

    id = "reward_signal"
    title = "Reward signal (GRPO)"
    inputs = ("frac_reward_zero_std", "reward_std")
    outputs = ("reward_std", "frac_zero_std", "frac_zero_std_ewma", "dead_components", "length_reward_corr",
               *ROLLOUT_OUTPUTS["reward_signal"])
    defaults = {"zero_std_warn": 0.5, "zero_std_stop": 0.99, "for": 5, "stop_for": 10, "smooth": 0.3,
                "no_update_for": 3, "std_low": 0.05, "std_low_alpha": 1e-4, "component_dead": 0.01, "component_for": 10,
                "gold": [],
                **ROLLOUT_DEFAULTS["reward_signal"]}

    def setup(self) -> None:
        self.progress = RewardProgress(self.p["gold"])
        self.level = RewardLevel(self.p["smooth"])
        self.zero = Ewma(self.p["smooth"])
        self.low_streak = 0  # reward_std rows under std_low in a row, now
        self.low_rows = 0  # ... and before this streak: rows under it, of std_rows read
        self.std_rows = 0
        self.comp_fns: list[str] = []
        self.corr = RollingCorrelation(30)
        self._components: tuple[tuple[str, str, str], ...] = ()
        self._row_width = -1

    def applies(self) -> bool:
        return self.family in GROUP_FAMILIES

    def plan_short(self) -> None:
        self.progress = RewardProgress.shortened(self)

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["_row_width"] = -1  # the component key cache is not saved: a resumed gauge must scan the next row
        return out

    def _std_low(self, std: float) -> None:
        """``reward-std-low`` as a runs test: a streak of k rows under the floor when this run's rows fall under
        it at rate q (counted before the streak, Laplace-smoothed) has chance q^k; it warns past the declared
        false-alarm rate ``std_low_alpha`` per row, while the reward is not rising. A small batch's reward_std is a
        mean of a few group stds that are 0 by chance (4 groups of 2 at p = 0.3: 15 % of rows all zero), so its
        own rate, not the fixed floor alone, says when a streak is news: 3 rows where batches never dip under it,
        14 where half the rows do."""
        p = self.p
        if std < p["std_low"]:
            self.low_streak += 1
        else:
            self.low_rows += self.low_streak
            self.std_rows += self.low_streak + 1
            self.low_streak = 0
        k = self.low_streak
        q = (self.low_rows + 1.0) / (self.std_rows + 2.0)
        news = k > 0 and k * math.log(1.0 / q) >= math.log(1.0 / p["std_low_alpha"])
        self.check("reward-std-low", news and not self.progress.improving(), "warn", "reward_std", std,
                   lambda: f"reward_std has stayed under {p['std_low']} for {k} logged steps in a row (this run's "
                   f"batches dip under it on {q:.0%} of steps: chance {q ** k:.1g}): completions in a group score "
                   "alike, so there is little signal left to learn from.", clear=p["for"])

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        reward_signal_rules(self, row)
        v = row.values
        p = self.p
        d = self.derived
        self.progress.push(v)
        self.level.push(v.get("reward"))
        f = v.get("frac_reward_zero_std")
        std = v.get("reward_std")
        if std is not None and finite(std):
            d["reward_std"] = std
        has_frac = f is not None and finite(f)
        if has_frac:
            ze = self.zero.push(f)
            d["frac_zero_std"] = f
            d["frac_zero_std_ewma"] = ze
            self.check("zero-std-dead", f >= p["zero_std_stop"], "stop", "frac_reward_zero_std", f,
                       lambda: f"every group has identical rewards for {p['stop_for']} logged steps: advantages "
                       "are all zero and the policy receives no gradient. The task is either solved or "
                       "impossible for this model: change the prompts or the reward.", for_=p["stop_for"])
            # groups losing their spread are mostly prompts being solved when the (smoothed) reward sits on the
            # success side of its range, or has been rising over the run (the entropy gauge's test of progress)
            solved = self.level.success_side(smoothed=True) or self.progress.improving()
            # ... and mostly failed prompts when the level leaves no other reading: a reward p >= the all-correct
            # share a (p = a + the mixed groups' mean x their share), so at least f - p of the groups failed every
            # completion, whatever the mix of prompt difficulties; p <= f / 2 makes those at least half the uniform
            # groups. Without a reward level the fixed line alone decides, as before.
            lv = self.level.smooth
            failing = lv != lv or lv <= ze / 2
            self.check("zero-std-high", ze > p["zero_std_warn"] and failing and not solved, "warn",
                       "frac_reward_zero_std", f,
                       lambda: f"{ze:.0%} of groups have zero reward variance"
                       + (f" at a success rate near {lv:.0%}: most of them fail every completion, so the learning "
                          "signal is vanishing (prompts too hard for the model)" if lv == lv else
                          ": the learning signal is vanishing (prompts too easy or too hard)")
                       + ". Filter prompts by difficulty or raise num_generations.",
                       for_=p["for"], clear=5)
            self.check("zero-std-solved", ze > p["zero_std_warn"] and solved, "info", "frac_reward_zero_std", f,
                       lambda: f"{ze:.0%} of groups have zero reward variance while the reward "
                       + ("keeps climbing" if lv != lv or lv <= 0.5 else f"sits near {lv:.0%} of its range")
                       + ": prompts are being solved and stop teaching anything. Add harder prompts when it nears "
                       "100 %.",
                       for_=p["for"], clear=5)
        # One unambiguous row: no group had any reward spread and the optimizer got a zero gradient —
        # the step changed nothing (the seed's dead-run signal, made specific to group-relative training).
        g = v.get("grad_norm")
        # A small batch scores every group alike by chance ((p^G + (1-p)^G)^groups: 6 % of rows at p = 1/2 with 4
        # groups of 2), so one such row is no evidence: three in a row are (chance 2e-4 per row there). On the
        # success side with the reward still moving they are solved batches (gradients/grad-zero-saturated says
        # so), not a stalled run.
        no_spread = (has_frac and f >= p["zero_std_stop"]) or (not has_frac and std is not None and std == 0.0)
        solved_batch = self.level.success_side() and not self.level.frozen
        self.check("no-update-step", no_spread and g is not None and g == 0.0 and not solved_batch, "warn",
                   "grad_norm", g,
                   lambda: f"at step {self.step} every group scored its completions identically and grad_norm is 0, "
                   f"for {self.held('no-update-step')} logged steps in a row: these steps changed nothing. If it "
                   "goes on, the run is dead (prompts too easy/hard, reward constant).", for_=p["no_update_for"])
        if not has_frac and std is not None and finite(std):  # older TRL: reward_std is all there is
            self._std_low(std)
        # Partial rewards: a component whose std stays ~0 is dead weight.
        if len(v) != self._row_width:  # re-scan for reward components only when the row's shape changes
            self._row_width = len(v)
            self._components = tuple(
                (k, k[8:-4], f"rewards/{k[8:-4]}/mean") for k in v if k.startswith("rewards/") and k.endswith("/std")
            )
        dead = 0
        for k, fn, mean_key in self._components:
            val = v.get(k)
            if val is None or not finite(val):
                continue
            mean = v.get(mean_key)
            is_dead = val < p["component_dead"]
            dead += is_dead
            self.check(f"reward-component-dead:{fn}", is_dead, "warn", k, val,
                       lambda fn=fn, mean=mean: f"reward function '{fn}' has had std < {p['component_dead']} "
                       f"(mean {mean if mean is None else round(mean, 4)}) for "
                       f"{self.held(f'reward-component-dead:{fn}')} logged steps: it scores every completion alike "
                       "and adds no signal.",
                       for_=p["component_for"], clear=10)
        d["dead_components"] = float(dead)
        r, L = v.get("reward"), v.get("completions/mean_length")
        if r is not None and L is not None and finite(r) and finite(L):
            self.corr.push(r, L)
            if self.corr.full:
                corr = self.corr.corr()
                d["length_reward_corr"] = corr
                self.check("length-reward-correlation", corr > 0.8, "info", "completions/mean_length", L,
                           lambda: f"reward and completion length move together (corr {corr:.2f}): check for "
                           "length hacking.", for_=5, clear=10)
