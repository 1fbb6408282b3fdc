"""Gauge 9, reward dynamics: improving, flat, volatile, shifting, hacked, over-optimised against a gold reward.

Most of the seed post's "what to watch for" items are trends and spreads, not level lines: the reward rules judge
the reward against its own start and its own row-to-row noise, per reward function and, when the user names one,
against a held-out gold reward (``GoldCoupling``), because signals that never look at a trusted reward cannot tell
hacking from learning. The DPO family's margin, accuracy and chosen/rejected rewards are read here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .bounded import RewardLevel
from .gauge import Gauge, finite
from .keys import Row
from .rollouts import REWARD_ROLLOUT_RULES, ROLLOUT_DEFAULTS, ROLLOUT_OUTPUTS, reward_rules
from .rule import INSTRUMENTS, POST, Example, Maker, Rule
from .sequential import Ar1, NoiseRiseCusum, ar1_inflation, ar1_var_factor, bounded_mean_sd, ewma_var_factor
from .stats import (
    Baseline,
    DiffNoise,
    Ewma,
    HalfRunTrend,
    OctaveMean,
    RollingCorrelation,
    RollingWindow,
    RunningRegression,
    ScaleRef,
    ShiftDetector,
)
from .streams import GOLD, dpo, grpo, ramp, reward_components, with_gold

PREFERENCE_FAMILIES = frozenset({"dpo", "kto", "orpo"})


BINOMIAL_LEVELS = (0.05, 0.95)
"""The success rates between which a [0, 1] reward's row noise is read against its binomial noise (reward-volatile)."""


def _floor(level: float) -> float:
    """A noise floor for a series at ``level``: a constant start must not make every change infinite sigmas."""
    return 1e-3 * max(1.0, abs(level)) if level == level else 1e-3


def _names(fns: list[str]) -> str:
    """Reward function names quoted and joined, for a message."""
    return ", ".join(f"'{o}'" for o in fns)


class _Component:
    """One reward function's running picture: where it started, its smoothed level, ceiling and spread."""

    __slots__ = ("start", "std_start", "mean", "std", "peak", "metric")

    def __init__(self, window: int, fn: str = "") -> None:
        self.start = RollingWindow(window)  # frozen once full
        self.std_start = RollingWindow(window)
        self.mean = Ewma(0.1)
        self.std = Ewma(0.2)
        self.peak = -math.inf
        self.metric = f"rewards/{fn}/mean"  # formatted once (not state: rebuilt from the function's name)

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


_EWMA10_SD = math.sqrt(0.1 / (2 - 0.1))
"""Standard deviation of an EWMA(0.1) of independent noise, in units of the noise's own sigma."""


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
               "margin_peak", "chosen_ewma", "reward_noise", "volatility_ratio", "volatile_evidence", "shift_up",
               "shift_down", "gold", "gold_ewma", "gold_peak", "proxy_gold_gap", "proxy_gain_since_gold_peak",
               "gold_trend_t", "gold_half_t", "margin_recent_t", "plateau_gain_ucb", "gold_drop",
               "proxy_headroom_gain", "gold_headroom_gain", "gold_share_ucb",
               *ROLLOUT_OUTPUTS["reward"])
    defaults = {
        "window": 15, "min_rows": 50, "warmup_share": 0.08, "plateau_t": 1.0, "plateau_for": 20,
        "plateau_gain": 2.0, "plateau_z": 2.0,
        "flat_span": 1e-2, "flat_rows": 20, "flat_stop_rows": 50,
        "hack_length_ratio": 1.5, "hack_corr": 0.6, "hack_gain_sigma": 3.0, "pays_rows": 6, "pays_window": 12,
        "pays_corr": 0.8, "pays_jump_z": 8.0,
        "volatile_ratio": 2.2, "volatile_warmup": 30, "volatile_ratio_rl": 1.8,
        "volatile_window": 30, "volatile_warmup_rl": 16, "volatile_arl": 20000.0, "volatile_tol": 1.25,
        # shift: a CUSUM (k sigmas allowance per row, h to fire, each row's fall clipped at shift_clip sigmas)
        "shift_k": 1.0, "shift_h": 12.0, "shift_clip": 4.0, "shift_alpha": 0.05,
        "drop_share": 0.4, "drop_sigma": 4.0, "drop_for": 5,
        "drop_within": 50, "drop_gain_sigma": 3.0, "ceiling_drop_share": 0.1,
        "gold": [], "gold_stall_rows": 15, "gold_gap_sigma": 3.0, "gold_for": 10, "gold_stall_t": 0.5, "gold_half": 0,
        "gold_alpha": 0.1, "gold_drop_se": 4.0, "gold_drop_for": 3, "gold_rho": 0.3, "gold_noise_rows": 60,
        "gold_explained_se": 2.0, "gold_stall_se": 4.0, "gold_rising_t": 2.0,
        "gold_share": 0.1, "gold_share_z": 2.0, "gold_share_for": 3,
        "component_gain_sigma": 4.0, "component_flat_sigma": 1.0, "component_for": 10, "component_dead": 0.01,
        "saturated_for": 50, "saturated_level": 0.8,
        "margin_collapse": 0.5, "margin_collapse_se": 3.0, "margin_peak_min": 0.2, "accuracy_chance": 0.55,
        "dpo_min_rows": 30,
        "margin_learning_t": 2.0, "margin_plateau_growth": 0.2, "plateau_accuracy": 0.7, "margin_plateau_for": 15,
        "margin_plateau_rows": 20,
        "margin_shrink": 0.15, "margin_shrink_t": -2.0, "margin_shrink_sd": 5.0, "margin_shrink_for": 6,
        "margin_peak_rows": 20,
        "runaway_level": 1.0, "runaway_t": 3.0, "runaway_settle": 0.67, "runaway_share": 0.05, "runaway_half_t": 5.0,
        **ROLLOUT_DEFAULTS["reward"],
    }

    def setup(self) -> None:
        w = self.p["window"]
        self.first = RollingWindow(w)  # frozen once full: the start of the run
        self.trend = RunningRegression()
        self.r_noise = DiffNoise(30)  # the reward's row noise and its AR(1): the plateau's scale
        self.flat = RollingWindow(self.p["flat_rows"])
        self.flat_rows = 0
        self.ewma = Ewma(0.1)
        self.len_base = Baseline(10)
        self.rl = RollingCorrelation(30)  # (reward, length) pairs
        self.pays = RollingCorrelation(self.p["pays_window"])  # (length, reward) since the reward's jump began
        self.pays_jump = False  # the reward crossed shift_h by a jump of pays_jump_z sigmas or more in one row
        self.noise_ref = OctaveMean()  # the DPO margin's relative noise earlier in the run
        self.margin_warmup = self.p["volatile_warmup"]
        # RL rewards: row-to-row changes in units of the within-group spread (reward_std), whose binomial
        # dependence on the success rate is the batch mean's too; their scale against the run's own earlier one
        self.vol = RollingWindow(self.p["volatile_window"])
        self.vol_ref = ScaleRef(self.p["volatile_warmup_rl"])
        # reward-volatile's test: RL rewards and DPO margins test different rises
        vr = self.p["volatile_ratio"] if self.family in PREFERENCE_FAMILIES else self.p["volatile_ratio_rl"]
        self.vol_test = NoiseRiseCusum(vr, self.budget(self.p["volatile_arl"]))
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
        self.saturated = False  # the task score's smoothed level at its ceiling (this row)
        # gold: the held-out reward functions, averaged into one series
        self.gold_keys = tuple(f"rewards/{g}/mean" for g in self.p["gold"])
        self.level = RewardLevel()  # the task score as a success rate: a reward at its ceiling has nothing to climb
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
        # the proxy's lead over the gold in shares of their headroom: both must be rates in [0, 1], and each gain is
        # read against the row-to-row noise of its own series
        self.gold_row_noise = DiffNoise(30)
        self.gold_unit = True
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
            c = _Component(self.p["window"], fn)
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
        gold = next((v[k] for k in self.gold_keys if k in v), None)  # the task score beside a shaped reward (verl)
        self.level.push(gold if gold is not None else r)
        sat = self.level.smooth
        saturated = self.saturated = sat == sat and sat >= p["saturated_level"]
        # Flat-lined reward: no learning signal at all.
        span = p["flat_span"] * max(1.0, abs(r))
        # the O(1) variance rules most rows out before the O(window) min/max is needed
        flat = self.flat.full and self.flat.var() <= span * span and (self.flat.max() - self.flat.min()) <= span
        self.flat_rows = self.flat_rows + 1 if flat else 0
        # a success rate held near its ceiling is the task solved, not a reward without signal nor a stalled run
        held = flat
        flat = flat and not saturated
        self.check("reward-flatline", flat, "warn", key, r,
                   lambda: f"{key} has been pinned at {r:.4g} for {p['flat_rows']} logged steps: every "
                   "completion gets the same score (format penalty? broken reward function?). There is no "
                   "learning signal.")
        long_flat = flat and self.flat_rows + p["flat_rows"] >= p["flat_stop_rows"]
        self.check("reward-flatline-persistent", long_flat, "stop", key, r,
                   lambda: f"{key} has not moved for {p['flat_stop_rows']} logged steps: the run cannot learn. "
                   "Stop and fix the reward before spending more compute.")
        # Plateau: no significant upward trend over the whole run so far, and a flat enough one: even at the top of
        # its confidence interval (AR(1)-widened), the slope would add under `plateau_gain` row-noise sigmas over the
        # planned run (the rows so far where max_steps is unknown). A slow verifier reward whose t is still under 1
        # at row 80 of 700 is not yet a plateau (issue #28: 12 of 100 healthy `binomial` runs warned on held-out
        # seeds); a reward flat for 400 rows is.
        self.trend.push(float(self.rows_seen), r)
        self.r_noise.push(r)
        if self.rows_seen >= self.min_rows(p["min_rows"], p["warmup_share"]):
            t = self.trend.t_stat()
            d["trend_t"] = t
            m1 = self.first.mean()
            stalled = t < p["plateau_t"] and not flat
            if stalled and p["plateau_gain"] > 0 and len(self.r_noise) >= 10:
                rho = self.r_noise.rho
                sig = self.r_noise.sigma() / math.sqrt(1.0 - rho)
                horizon = max(self.planned_rows, self.rows_seen) if self.max_steps > 0 else self.rows_seen
                ucb = self.trend.slope() + p["plateau_z"] * self.trend.slope_se() * ar1_inflation(rho)
                d["plateau_gain_ucb"] = ucb * horizon / sig if sig > 0 else math.inf
                stalled = ucb * horizon < p["plateau_gain"] * sig
            held = held or stalled
            stalled = stalled and not saturated
            self.check("reward-plateau", stalled, "warn", key, r,
                       lambda: f"reward is not improving: no upward trend over {self.rows_seen} logged steps "
                       f"(t={t:.1f}; started near {m1:.3g}, now {d['reward_ewma']:.3g}). The policy is stable but "
                       f"not learning; {self.fix('reward-plateau')}.",
                       for_=p["plateau_for"], clear=10)
        self.check("reward-saturated", held and saturated, "info", key, r,
                   lambda: f"{key} holds near its ceiling ({sat:.0%} success): the task is solved, so there is little "
                   "left to learn and no plateau or flatline to fix. Harder prompts would give a signal again.",
                   for_=p["flat_rows"], clear=10)
        std = v.get("reward_std")
        self.vol_unit = self.vol_unit and 0.0 <= r <= 1.0
        if std is not None and finite(std) and std > 0:
            scale = self.vol_std.push(std)
        elif self.vol_std.count:
            scale = self.vol_std.mean
        elif self.vol_unit:  # a success rate without its spread logged: the binomial noise its level gives
            # at its floor or ceiling nearly every completion scores alike: its noise says how few differ, nothing
            # about the optimisation, and would make the reference the climb off the floor is read against (nan:
            # the row's change is not measured)
            scale = 2.0 * bounded_mean_sd(e, 1.0) if BINOMIAL_LEVELS[0] <= e <= BINOMIAL_LEVELS[1] else math.nan
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
                           f"(corr {corr:.2f}): the policy may be paying for length, not quality. "
                           + self.fix("reward-hacking", sentence=True),
                           for_=3)
            self._pays_length(key, r, length)
        if len(v) != self._row_width:  # re-scan for reward components only when the row's shape changes
            self._row_width = len(v)
            gold_names = set(self.gold_keys)
            self._comp_keys = tuple(
                (k[8:-5], k, k[:-5] + "/std") for k in v
                if k.startswith("rewards/") and k.endswith("/mean") and k not in gold_names and k.count("/") == 2
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

    def _pays_length(self, key: str, r: float, length: float) -> None:
        """The reward jumped far outside its own noise (the shift detector crossed ``shift_h`` on a row
        ``pays_jump_z`` sigmas out: a jump, not a slow climb adding up) and, row by row from that row on, it follows
        the mean completion length (correlation ``pays_corr`` over ``pays_rows`` rows or more): the reward now pays
        for length. A reward that starts paying per token jumps at once while the length has not grown yet, so this
        comes long before the length itself looks wrong (``reward-hacking``)."""
        p = self.p
        det = self.shift
        if det.up <= p["shift_h"]:
            if len(self.pays.pts):  # the next jump is read from its own first row
                self.pays = RollingCorrelation(p["pays_window"])
            self.pays_jump = False
            return
        if not len(self.pays.pts):  # the row the detector crossed its line: a jump, or a slow climb adding up?
            self.pays_jump = det.z >= p["pays_jump_z"]
        if not self.pays_jump:
            return
        self.pays.push(length, r)
        n = len(self.pays.pts)
        corr = self.pays.corr() if n >= p["pays_rows"] else 0.0
        pays = corr >= p["pays_corr"]
        self.check("reward-pays-length", pays, "warn", key, r,
                   lambda: f"{key} jumped at step {self.up_since} ({det.z:+.1f} sigma of its own noise) and since then "
                   f"follows the mean completion length row by row (corr {corr:.2f} over {n} steps): the reward pays "
                   "for length. Check the reward function (a per-token or per-character term, a missing length "
                   "normalisation) and read samples; add a length penalty.", clear=10)

    def _stability(self, key: str, r: float, e: float, scale: float) -> None:
        """High reward variance (unstable optimisation) and change points, both against the run's own noise."""
        p = self.p
        d = self.derived
        dx = math.nan
        if self.vol_last == self.vol_last and scale == scale:
            dx = (r - self.vol_last) / max(scale, 1e-6)
            if len(self.vol) >= 10:  # a clipped statistic: one outlier row counts as VOL_CLIP robust sigmas, no more
                lim = VOL_CLIP * self.vol.robust()[1]
                if lim > 0:
                    dx = min(max(dx, -lim), lim)
            self.vol.push(dx)
        self.vol_last = r
        if len(self.vol) >= 10:
            # an RL reward's reference of 16 rows is not the run's noise yet (a real healthy GRPO run warned at step
            # 40 on one): its test reads from twice that
            self._volatility(key, r, self.vol.std() / math.sqrt(2.0), self.vol_ref, p["volatile_ratio_rl"],
                             p["volatile_warmup_rl"], dx, 2 * p["volatile_warmup_rl"])
        det = self.shift
        up_from = self.step if det.up <= 0 else self.up_since
        down_from = self.step if det.down <= 0 else self.down_since
        det.push(r, floor=_floor(self.first.mean()), deflate=ar1_inflation(self.r_noise.ar1.lower()))
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
        self.check("reward-shift-down", (det.down > p["shift_h"] and self._material_at_ceiling(e)) or drop, "warn",
                   key, r,
                   lambda: (f"{key} fell from its peak {self.peak_e:.3g} (step {self.peak_step}) to {e:.3g}, losing "
                            f"{(self.peak_e - e) / max(self.peak_e - self.first.mean(), 1e-12):.0%} of what the run "
                            "had gained" if drop else
                            f"{key} dropped since step {self.down_since} (now {e:.3g}, reference {ref:.3g}, "
                            f"{det.z:+.1f} sigma of its own noise)")
                   + ": the policy lost something it had (forgetting, a collapse, or a harder slice of prompts). "
                   + self.fix("reward-shift-down", sentence=True), clear=10)

    def _material_at_ceiling(self, e: float) -> bool:
        """A drop the CUSUM found is a loss, unless the score holds at its ceiling and gave back under
        ``ceiling_drop_share`` of what the run gained to get there.

        A bounded score's noise shrinks near its ceiling (a success rate's spread is p(1 - p)), so the CUSUM's
        sigmas read a point or less of wander at 0.96 as a shift: that is a solved task's batch-to-batch slice of
        prompts, not the policy losing what it learned. A score saturated from its first rows has gained nothing,
        so any drop the CUSUM finds still counts."""
        if not self.saturated:
            return True
        gain = self.peak_e - self.first.mean() if self.first.full else 0.0
        return gain <= 0 or self.peak_e - e >= self.p["ceiling_drop_share"] * gain

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
            # the EWMA's own noise under the reward's AR(1) (issue #28): its peak wanders further than independent
            # rows would let it
            ewma_sd = row_sigma * math.sqrt(ewma_var_factor(0.1, self.r_noise.rho))
            fell = (row_sigma == row_sigma and gain > p["drop_gain_sigma"] * row_sigma
                    and fall >= p["drop_sigma"] * ewma_sd)
        self.drop_rows = self.drop_rows + 1 if fell else 0
        return self.drop_rows >= self.warn_rows(p["drop_for"])

    def _volatility(self, key: str, x: float, sig: float, ref: OctaveMean | ScaleRef, limit: float,
                    warmup: int, dz: float, settle: int) -> None:
        """High reward (DPO: margin) variance: row-to-row noise grown ``limit`` times over its level earlier in the
        run, decided by a CUSUM for a noise rise (``NoiseRiseCusum``) with its threshold from ``volatile_arl``.

        Each row's change ``dz`` is standardised by the reference noise: the noise over the run's previous octave
        (rows n/4 .. n/2), not its first rows: early, fast learning is noisy, and a binary reward's noise moves with
        its success rate. For RL rewards the changes are in units of the within-group spread (``reward_std``), which
        moves with the success rate the same way, and the reference is also never below the run's long-run noise.
        A healthy run's noise drifts with its level and schedule up to ``volatile_tol`` times the reference: the test
        asks whether the noise is ``limit`` times *that* (N(0, (tol limit)^2) against N(0, tol^2) per row).
        It adds each row's evidence (a calm row takes some away), an outlier row counts as 3 sigmas at most:
        a ratio of two windowed noise estimates held 5 rows warned on 20 % of healthy runs under autocorrelated
        noise with Student-t outliers (issue #28). The ratio is read once the reference holds ``warmup`` rows, the
        test once it holds ``settle``.
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
        test = self.vol_test
        arl = self.budget(p["volatile_arl"])
        if test.ratio != limit or test.arl != arl:  # warn_sooner set after setup, or margins in an RL family
            test = self.vol_test = NoiseRiseCusum(limit, arl)
        if dz == dz and base > 0 and ref.n >= settle:
            test.push(dz / (math.sqrt(2.0) * base * p["volatile_tol"]))
        d["volatile_evidence"] = test.score()
        self.check("reward-volatile", test.alarm and vr > limit, "warn", key, x,
                   lambda: f"{key} now swings {vr:.1f}x as much from row to row as earlier in the run "
                   f"(noise {sig:.3g} vs {base:.3g}; the noise test has crossed its line since row {test.since} of "
                   f"its {test.n}): unstable optimisation. Lower the learning rate or raise the KL penalty (beta).",
                   clear=10)

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
        self.gold_row_noise.push(g)
        self.gold_unit = self.gold_unit and 0.0 <= g <= 1.0
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
        outpaced = self._gold_share(key, e, ge)
        self.check("proxy-outpaces-gold", outpaced, "warn", key, e,
                   lambda: self._outpaced_message(key, e, ge), for_=p["gold_share_for"], clear=10)
        self.check("gold-rising", self.gold_half.rows() >= 20 and ght >= p["gold_rising_t"] and not outpaced, "info",
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
        p, d = self.p, self.derived
        cp = self.coupling
        if cp.match and cp.match != key and cp.rho >= p["gold_rho"]:
            return False  # the gold shares its noise with one trained component: the coupled reading judges it
        if not (self.vol_unit and self.gold_unit) or len(self.gold_row_noise) < 10 or len(self.r_noise) < 10:
            return False
        w = len(self.first)
        se_p = self.r_noise.level_se(p["gold_alpha"], w)
        se_g = self.gold_row_noise.level_se(p["gold_alpha"], len(self.gold_first))
        p0, g0 = self.first.mean(), self.gold_first.mean()
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
        d, p0, g0 = self.derived, self.first.mean(), self.gold_first.mean()
        return (f"reward hacking: the proxy {key} rose from {p0:.3g} to {e:.3g}, {d['proxy_headroom_gain']:.0%} of "
                f"its way to 1, while the gold reward {self.gold_names} went from {g0:.3g} to {ge:.3g}, "
                f"{d['gold_headroom_gain']:.1%} of its way (at most {d['gold_share_ucb']:.0%} of the proxy's share "
                f"at {self.p['gold_share_z']:g} standard errors of each one's noise). The policy learns what the "
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
        m, lim = cp.match, self.p["gold_explained_se"]
        if lim <= 0 or not m or m == key or cp.rho < self.p["gold_rho"] or m not in comps_then or m not in cp.ep:
            return False
        fall = gold_then - gold_now
        unexplained = fall - cp.beta * (comps_then[m] - cp.ep[m])
        return bool(unexplained < lim * se and fall < self.p["gold_stall_se"] * se)

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
                c = comps[fn] = _Component(p["window"], fn)
            c.push(m, v.get(sk))
        ready = [(fn, c) for fn, c in comps.items() if c.start.full]
        if len(ready) < 2:
            return
        gains = [(c.gain(), fn, c) for fn, c in ready]
        rising = [x for x in gains if x[0] >= p["component_gain_sigma"]]
        flat = [fn for g, fn, _ in gains if g < p["component_flat_sigma"]]
        lead = rising[0] if len(rising) == 1 and len(flat) == len(gains) - 1 else None
        # most rows: no lead and nothing firing; the messages (and the list of flat functions in them) are built
        # only for a rule that holds this row
        for g, fn, c in gains:
            is_lead = lead is not None and lead[1] == fn
            pinned = False
            if is_lead and c.std.count > 0 and c.mean.mean >= c.peak - 0.05 * abs(c.peak - c.start.mean()):
                std0 = c.std_start.mean() if len(c.std_start) else math.nan
                pinned = c.std.mean <= p["component_dead"] or (std0 == std0 and c.std.mean <= 0.25 * std0)
            level = c.mean.mean
            # the rule ids stay f-strings in the calls: the rule catalog reads them from the source
            metric = c.metric
            self.check(f"reward-component-saturated:{fn}", pinned, "warn", metric, level,
                       (lambda fn=fn, g=g, level=level: f"reward function '{fn}' is pinned at its "
                       f"ceiling ({level:.3g}, every completion scores alike; up {g:.1f} sigma since the start) while "
                       f"{_names(flat)} stay flat: the policy has learned the easy part and gets no signal from it any "
                       "more; the task itself is not being learned. "
                       + self.fix("reward-component-saturated", sentence=True))
                       if pinned else "",
                       for_=p["saturated_for"], clear=10)
            self.check(f"reward-component-dominant:{fn}", is_lead and not pinned, "info", metric, level,
                       (lambda fn=fn, g=g, level=level: f"reward function '{fn}' carries the whole "
                       f"reward rise (up {g:.1f} sigma since the start, now {level:.3g}) while {_names(flat)} stay "
                       "flat: the policy optimises one component. If it is a format or length check, the task is not "
                       f"being learned; {self.fix('reward-component-dominant')}.")
                       if is_lead else "",
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
        m_prev = self.margin_noise.last
        self.margin_noise.push(m)
        if len(self.margin_noise) >= 10:  # relative to the margin's level: its noise grows as it grows
            level = max(abs(self.margin.mean), 0.05)
            self._volatility("rewards/margins", m, self.margin_noise.sigma() / level, self.noise_ref,
                             p["volatile_ratio"], self.margin_warmup, (m - m_prev) / level,
                             self.margin_warmup)  # its warm-up is already 30 rows (shortened in a short run)
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
        if collapsed:  # a fall the EWMA's own noise cannot make: the peak of a noisy EWMA sits high by chance
            se = self.margin_noise.level_se(0.1) if len(self.margin_noise) >= 10 else math.inf
            collapsed = peak - me >= p["margin_collapse_se"] * math.sqrt(2.0) * se
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
            # autocorrelated noise (a slow data order, a replay of pairs) makes runs of rows that a slope t read as
            # independent takes for a trend: the t is deflated by the AR(1) inflation of the noise, and the EWMA's
            # noise is read with it (the prewhitened statistics of issue 47's calibration grid)
            rt /= ar1_inflation(self.margin_noise.rho)
            sd = self.margin_noise.level_se(0.1) if len(self.margin_noise) >= 10 else math.inf
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
                   + self.fix("margin-negative", sentence=True), for_=5)
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
                       "displacement, common in DPO and usually harmless. "
                       + self.fix("chosen-reward-falling", sentence=True),
                       for_=10, clear=20)
            # Unbounded growth: chosen keeps climbing past +runaway_level while the rejected side does not fall.
            if rj is not None and finite(rj):
                self.rejected.push(rj)
            if rj is not None and finite(rj):
                self.rejected_recent.push(float(self.pref_rows), rj)
                self.rejected_half.push(rj)
            self.chosen_half.push(c)
            ct = 0.0
            runaway = False
            # a climb that is slowing down is the pair being learned (fast at first, then settling); a runaway keeps
            # its pace or speeds up: the slope over the run's later half against the average slope since the start
            whole = (ce - self.chosen_start.value) / max(self.pref_rows, 1) if self.chosen_start.ready else 0.0
            late = self.chosen_half.prev.slope() if self.chosen_half.rows() >= 10 else whole
            settling = whole > 0.0 and late < p["runaway_settle"] * whole
            if warm and ce > p["runaway_level"] and self.chosen_recent.full and not settling:
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
                       "learning the preference. " + self.fix("chosen-reward-runaway", sentence=True), for_=5, clear=10,
                       long_hold=False)  # its window is a share of the run already (runaway_share)


_CONVERGE = ("If chosen and rejected rewards approach each other, the model is losing its ability to distinguish "
             "preferences.")


def _pays_length(row: dict[str, float], on: bool) -> dict[str, float]:
    """A GRPO row whose reward, once ``on``, pays per token of its completions (a reward function's length term)."""
    if on:
        row["reward"] = 0.02 * row["completions/mean_length"]
    return row


def _outpacing(proxy0: float, proxy_gain: float, gold0: float, gold_gain: float, gold_sd: float) -> Maker:
    """A GRPO run whose proxy and gold rates both rise from row 40 over 100 rows, by the gains given: a gold
    gaining a sliver of its headroom beside a proxy gaining most of its own, or the two rising together."""
    def make(i: int, g: np.random.Generator) -> dict[str, float]:
        up = ramp(i, 40, 100)
        gold = min(1.0, max(0.0, gold0 + gold_gain * up + gold_sd * g.normal()))
        return {**grpo(i, g, reward=proxy0 + proxy_gain * up), "rewards/gold/mean": gold}
    return make


#: The reward gauge's rules (``core/catalog.py`` collects every module's).
RULES: tuple[Rule, ...] = (
    Rule(
        "reward", "reward-flatline", severities=("warn",),
        reads="reward / objective/scores over the last `flat_rows` rows",
        test="range within `flat_span` x level",
        params=("flat_span", "flat_rows"),
        means="every completion gets the same score: no learning signal",
        fix="check the reward function and format penalties",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), **({"reward": -0.1} if i >= 60 else {})}, grpo, 200, 60, 80, "reward"),
    ),
    Rule(
        "reward", "reward-flatline-persistent", severities=("stop",),
        reads="reward / objective/scores",
        test="flat for `flat_stop_rows` rows (stop)",
        params=("flat_span", "flat_stop_rows"),
        means="the run cannot learn",
        fix="stop and fix the reward",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), **({"reward": -0.1} if i >= 60 else {})}, grpo, 200, 60, 110, "reward"),
    ),
    Rule(
        "reward", "reward-plateau", severities=("warn",),
        reads="reward / objective/scores: trend over the whole run so far",
        test="regression t below `plateau_t` after `min_rows`, and the slope's upper bound (`plateau_z` AR(1)-widened "
             "standard errors) adding under `plateau_gain` row-noise sigmas over the planned run; held `plateau_for` "
             "rows",
        params=("plateau_t", "plateau_gain", "plateau_z", "plateau_for", "min_rows", "warmup_share"),
        means="the policy is stable but not learning",
        fix="check the learning rate, the task's difficulty and frac_reward_zero_std",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4), grpo, 200, 1, 80, "reward"),
    ),
    Rule(
        "reward", "reward-saturated", severities=("info",),
        reads="the task score (gold, e.g. verl critic/score) or the reward as a success rate",
        test="flat (reward-flatline's test) or stalled (reward-plateau's) with the smoothed level at or above "
             "`saturated_level` (info; those two stay quiet there)",
        params=("saturated_level", "flat_rows"),
        means="the task is solved: every completion scores alike, nothing left to climb",
        fix="nothing; harder prompts give a signal again",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.93), grpo, 200, 1, 90, "reward"),
    ),
    Rule(
        "reward", "reward-hacking", severities=("warn",),
        reads="reward gain in its early sigmas, completions/mean_length ratio and their correlation",
        test="length above `hack_length_ratio` x start, corr above `hack_corr`, gain above `hack_gain_sigma`, held 3",
        params=("hack_length_ratio", "hack_corr", "hack_gain_sigma"),
        means="the policy may be paid for length, not quality",
        fix="read samples; check KL; add a length penalty",
        seed="Reward hacking is the default failure mode.", seed_source=POST,
        example=Example(
            "grpo",
            lambda i, g: grpo(i, g, reward=0.3 + 0.5 * ramp(i, 100, 60), length=200 * (1 + 1.5 * ramp(i, 100, 60))),
            grpo, 200, 100, 150, "reward"),
    ),
    Rule(
        "reward", "reward-pays-length", severities=("warn",),
        reads="reward and completions/mean_length, row by row from the row the reward's shift detector crossed "
              "`shift_h`",
        test="the reward jumped far outside its noise (its CUSUM crossed `shift_h` on a row `pays_jump_z` sigmas out) "
             "and, since then, correlates with the mean length at `pays_corr` or more over `pays_rows` to "
             "`pays_window` rows",
        params=("shift_h", "pays_jump_z", "pays_rows", "pays_window", "pays_corr"),
        means="the reward now pays for length (a per-token or per-character term, a lost length normalisation)",
        fix="check the reward function and read samples; add a length penalty",
        seed="Reward hacking is the default failure mode.", seed_source=POST,
        origin="reward-hacking waits until the length has grown 1.5x; a reward that starts paying length jumps at "
               "once, and rows since the jump that follow the length are the same loophole read before the length "
               "grows",
        example=Example(
            "grpo", lambda i, g: _pays_length(grpo(i, g), i >= 100), grpo, 200, 100, 112, "reward"),
    ),
    Rule(
        "reward", "reward-shift-up", severities=("info",),
        reads="reward, residuals in its own noise units",
        test="two-sided CUSUM (k=`shift_k`, h=`shift_h`) with clipped residuals (info)",
        params=("shift_k", "shift_h", "shift_clip"),
        means="a jump, not the slow trend: the policy found something",
        fix="if length or KL jumped with it, read samples",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 100, 5)), grpo, 200, 100, 110, "reward"),
    ),
    Rule(
        "reward", "reward-shift-down", severities=("warn",),
        reads="reward: CUSUM residuals; EWMA vs its peak",
        test="CUSUM past `shift_h` (a score held at its ceiling: only once it gave back `ceiling_drop_share` of the "
             "run's gain), or a fall of `drop_share` of the gain held `drop_for` rows",
        params=("shift_h", "ceiling_drop_share", "drop_share", "drop_sigma", "drop_for"),
        means="the policy lost something it had",
        fix="check KL, entropy and samples at that step",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.6 - 0.35 * ramp(i, 100, 5)), grpo, 200, 100, 110, "reward"),
    ),
    Rule(
        "reward", "reward-volatile", severities=("warn",),
        reads="row-to-row reward changes clipped at 4 robust sigmas, in reward_std units (a [0, 1] reward without it: "
              "its binomial noise, rows at a success rate under 5 % or over 95 % not measured; DPO: margin noise / "
              "level)",
        test="a CUSUM for the noise rising `volatile_ratio(_rl)` x over `volatile_tol` x its previous octave (each "
             "row's z^2 clipped at 9), threshold from `volatile_arl`, while the windowed noise ratio is past the same "
             "line",
        params=("volatile_ratio_rl", "volatile_ratio", "volatile_tol", "volatile_arl", "volatile_warmup_rl"),
        means="unstable optimisation",
        fix="lower the learning rate or raise beta",
        seed="High reward variance: Unstable rewards suggest unstable optimisation.", seed_source=POST,
        origin="RL rewards use volatile_ratio_rl, DPO margins volatile_ratio",
        budgeted=True,
        budget_param="volatile_arl",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "reward": 0.3 + 0.3 * i / 200 + (0.05 + 0.3 * ramp(i, 100, 30))
                                  * g.normal()}, grpo, 200, 100, 140, "reward"),
    ),
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
    Rule(
        "reward", "reward-component-saturated", severities=("warn",),
        reads="rewards/<fn>/mean and /std per reward function",
        test="the one rising component pinned at its peak with std near 0, others flat, held `saturated_for` rows",
        params=("component_gain_sigma", "component_dead", "saturated_for"),
        means="the easy part is learned and gives no signal any more",
        fix="check the other functions' scale and weights",
        per_function=True,
        example=Example(
            "grpo",
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=min(1.0, 0.2 + 0.8 * ramp(i, 50, 40)), acc=0.3,
                                                            fmt_std=0.35 * (1 - ramp(i, 50, 40)))},
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=min(1.0, 0.2 + 0.8 * ramp(i, 50, 40)),
                                                      acc=0.3 + 0.3 * ramp(i, 50, 100),
                                                      fmt_std=0.35 * (1 - ramp(i, 50, 40)))},
            200, 50, 170, "rewards/fmt/mean"),
    ),
    Rule(
        "reward", "reward-component-dominant", severities=("info",),
        reads="rewards/<fn>/mean per reward function",
        test="one component up `component_gain_sigma`, the rest under `component_flat_sigma`, held `component_for` "
             "(info)",
        params=("component_gain_sigma", "component_flat_sigma", "component_for"),
        means="one component carries the whole rise",
        fix="log a held-out gold reward to tell hacking from learning",
        per_function=True,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=0.1 + 0.6 * ramp(i, 100, 100), acc=0.3)},
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=0.1 + 0.6 * ramp(i, 100, 100),
                                                      acc=0.3 + 0.3 * ramp(i, 100, 100))},
            200, 100, 160, "rewards/fmt/mean"),
    ),
    Rule(
        "reward", "accuracy-chance", severities=("warn",),
        reads="EWMA of rewards/accuracies (DPO family) or accuracy (reward model)",
        test="below `accuracy_chance` after `dpo_min_rows` while the margin is not climbing, held 10 rows",
        params=("accuracy_chance", "dpo_min_rows", "margin_learning_t"),
        means="the model is not learning the preference",
        fix="check the learning rate, beta and that chosen/rejected are right",
        origin="no seed line: 0.55 is the product's own (chance is 0.5)",
        example=Example(
            "dpo", lambda i, g: dpo(i, g, margin=0.02, acc=0.5), dpo, 200, 1, 60, "rewards/accuracies"),
    ),
    Rule(
        "reward", "margin-collapse", severities=("warn",),
        reads="EWMA of rewards/margins (rows clipped at 5 robust sigmas) vs its peak",
        test="below `margin_collapse` x peak and `margin_collapse_se` standard errors of the EWMA (AR(1)-aware) under "
             "it, held 5",
        params=("margin_collapse", "margin_collapse_se", "margin_peak_min", "dpo_min_rows"),
        means="the preference signal is being undone",
        fix="lower the LR, check for noisy pairs, raise beta",
        seed=_CONVERGE, seed_source=POST,
        example=Example(
            "dpo", lambda i, g: dpo(i, g, margin=1.2 * min(i, 100) / 100 - 1.1 * ramp(i, 100, 20), acc=0.8), dpo, 200,
            100, 130, "rewards/margins"),
    ),
    Rule(
        "reward", "margin-shrinking", severities=("warn",),
        reads="rewards/margins: fall from its peak and its trend",
        test="`margin_shrink` off the peak with t <= `margin_shrink_t`, past `margin_shrink_sd` noise, held",
        params=("margin_shrink", "margin_shrink_t", "margin_shrink_sd", "margin_shrink_for"),
        means="chosen and rejected are converging",
        fix="lower the learning rate; keep the best checkpoint",
        seed=_CONVERGE, seed_source=POST,
        example=Example(
            "dpo", lambda i, g: dpo(i, g, margin=1.2 * min(i, 100) / 100 - 0.9 * ramp(i, 100, 100), acc=0.8), dpo, 200,
            100, 160, "rewards/margins"),
    ),
    Rule(
        "reward", "margin-negative", severities=("warn",),
        reads="EWMA of rewards/margins",
        test="below 0 after `dpo_min_rows`, held 5",
        params=("dpo_min_rows",),
        means="the policy prefers the rejected answers",
        fix="check that chosen/rejected are not swapped",
        example=Example(
            "dpo", lambda i, g: dpo(i, g, margin=0.3 - 0.8 * ramp(i, 60, 20), acc=0.6), dpo, 200, 60, 90,
            "rewards/margins"),
    ),
    Rule(
        "reward", "margin-plateau", severities=("warn",),
        reads="rewards/margins growth over the second half; accuracy EWMA",
        test="growth under `margin_plateau_growth` while accuracy is below `plateau_accuracy`, held "
             "`margin_plateau_for`",
        params=("margin_plateau_growth", "plateau_accuracy", "margin_plateau_for"),
        means="the model stopped learning from the preference data early",
        fix="raise the learning rate or get more signal",
        seed="If rewards/margins plateaus early, your model has stopped learning from the preference data.",
        seed_source=POST,
        example=Example(
            "dpo", lambda i, g: dpo(i, g, margin=0.4 * min(1.0, i / 60), acc=0.5 + 0.1 * min(1.0, i / 60)),
            lambda i, g: dpo(i, g, acc=0.55 + 0.1 * i / 200), 200, 60, 150, "rewards/margins"),
    ),
    Rule(
        "reward", "chosen-reward-falling", severities=("info",),
        reads="EWMA of rewards/chosen vs its first 5 rows, with the margin",
        test="0.1 below its start while the margin grows, held 10 (info)",
        params=("dpo_min_rows",),
        means="likelihood displacement: common in DPO, usually harmless",
        fix="watch logps/chosen",
        example=Example(
            "dpo", lambda i, g: dpo(i, g, chosen=-0.5 * ramp(i, 40, 60)), dpo, 200, 40, 100, "rewards/chosen"),
    ),
    Rule(
        "reward", "chosen-reward-runaway", severities=("warn",),
        reads="rewards/chosen trend (windowed and half-run) vs rewards/rejected",
        test="chosen above `runaway_level` climbing at t >= `runaway_t` while rejected does not fall, held 5; not "
             "while the climb settles (its slope over the later half of the run under `runaway_settle` x its average "
             "since the start: the pair being learned)",
        params=("runaway_level", "runaway_t", "runaway_half_t", "runaway_settle"),
        means="the policy exploits the implicit reward",
        fix="raise beta or lower the learning rate",
        seed="Unbounded reward growth: If chosen rewards keep climbing without limit", seed_source=POST,
        example=Example(
            "dpo", lambda i, g: dpo(i, g, chosen=3.0 * ramp(i, 100, 100), rejected=-0.2), dpo, 200, 100, 170,
            "rewards/chosen"),
    ),
    *REWARD_ROLLOUT_RULES,
)
