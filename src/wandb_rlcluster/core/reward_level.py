"""The reward gauge's level: flat-lined, on a plateau, or held at its ceiling."""

from __future__ import annotations

import math

from .bounded import RewardLevel
from .gauge import Gauge
from .part import GaugePart
from .reward_series import RewardSeries
from .rule import Example, Rule
from .sequential import ar1_inflation
from .stats import (
    RollingWindow,
    RunningRegression,
)
from .streams import grpo


class RewardLevelPart(GaugePart):
    """Is the reward learning at all: flat-lined (no signal), a plateau (no upward trend over the run), or held at
    its ceiling (the task solved)."""

    def __init__(self, gauge: Gauge, series: RewardSeries) -> None:
        super().__init__(gauge)
        self.series = series
        self.trend = RunningRegression()
        self.flat = RollingWindow(gauge.p["flat_rows"])
        self.flat_rows = 0
        self.level = RewardLevel()  # the task score as a success rate: a reward at its ceiling has nothing to climb

    def observe(self, key: str, r: float, gold: float | None) -> None:
        """One reward row (``gold``: the task score beside a shaped reward, verl)."""
        g = self.gauge
        p = g.p
        self.flat.push(r)
        self.level.push(gold if gold is not None else r)
        sat = self.level.smooth
        saturated = self.series.saturated = sat == sat and sat >= p["saturated_level"]
        # Flat-lined reward: no learning signal at all.
        span = p["flat_span"] * max(1.0, abs(r))
        # the O(1) variance rules most rows out before the O(window) min/max is needed
        flat = self.flat.full and self.flat.var() <= span * span and (self.flat.max() - self.flat.min()) <= span
        self.flat_rows = self.flat_rows + 1 if flat else 0
        # a success rate held near its ceiling is the task solved, not a reward without signal nor a stalled run
        held = flat
        flat = flat and not saturated
        g.check("reward-flatline", flat, "warn", key, r,
                lambda: f"{key} has been pinned at {r:.4g} for {p['flat_rows']} logged steps: every "
                "completion gets the same score (format penalty? broken reward function?). There is no "
                "learning signal.")
        long_flat = flat and self.flat_rows + p["flat_rows"] >= p["flat_stop_rows"]
        g.check("reward-flatline-persistent", long_flat, "stop", key, r,
                lambda: f"{key} has not moved for {p['flat_stop_rows']} logged steps: the run cannot learn. "
                "Stop and fix the reward before spending more compute.")
        held = self._plateau(key, r, flat, saturated) or held
        g.check("reward-saturated", held and saturated, "info", key, r,
                lambda: f"{key} holds near its ceiling ({sat:.0%} success): the task is solved, so there is little "
                "left to learn and no plateau or flatline to fix. Harder prompts would give a signal again.",
                for_=p["flat_rows"], clear=10)

    def _plateau(self, key: str, r: float, flat: bool, saturated: bool) -> bool:
        """Plateau: no significant upward trend over the whole run so far, and a flat enough one: even at the top of
        its confidence interval (AR(1)-widened), the slope would add under ``plateau_gain`` row-noise sigmas over the
        planned run (the rows so far where max_steps is unknown). A slow verifier reward whose t is still under 1
        at row 80 of 700 is not yet a plateau (issue #28: 12 of 100 healthy ``binomial`` runs warned on held-out
        seeds); a reward flat for 400 rows is. Whether the reward stalled (before its ceiling says it is solved)."""
        g = self.gauge
        p = g.p
        d = g.derived
        r_noise = self.series.r_noise
        self.trend.push(float(g.rows_seen), r)
        r_noise.push(r)
        if g.rows_seen < g.min_rows(p["min_rows"], p["warmup_share"]):
            return False
        t = self.trend.t_stat()
        d["trend_t"] = t
        m1 = self.series.first.mean()
        stalled = t < p["plateau_t"] and not flat
        if stalled and p["plateau_gain"] > 0 and len(r_noise) >= 10:
            rho = r_noise.rho
            sig = r_noise.sigma() / math.sqrt(1.0 - rho)
            horizon = max(g.planned_rows, g.rows_seen) if g.max_steps > 0 else g.rows_seen
            ucb = self.trend.slope() + p["plateau_z"] * self.trend.slope_se() * ar1_inflation(rho)
            d["plateau_gain_ucb"] = ucb * horizon / sig if sig > 0 else math.inf
            stalled = ucb * horizon < p["plateau_gain"] * sig
        held = stalled
        stalled = stalled and not saturated
        g.check("reward-plateau", stalled, "warn", key, r,
                lambda: f"reward is not improving: no upward trend over {g.rows_seen} logged steps "
                f"(t={t:.1f}; started near {m1:.3g}, now {d['reward_ewma']:.3g}). The policy is stable but "
                f"not learning; {g.fix('reward-plateau')}.",
                for_=p["plateau_for"], clear=10)
        return held


#: The reward level's rules (``core/catalog.py`` collects them through ``reward.RULES``).
LEVEL_RULES: tuple[Rule, ...] = (
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
)
