"""The reward gauge's volatility: row-to-row noise grown past its level earlier in the run."""

from __future__ import annotations

import math

from .gauge import Gauge, finite
from .part import GaugePart
from .reward_series import PREFERENCE_FAMILIES
from .rule import POST, Example, Rule
from .sequential import NoiseRiseCusum, bounded_mean_sd
from .stats import (
    Ewma,
    OctaveMean,
    RollingWindow,
    ScaleRef,
)
from .streams import grpo, ramp

BINOMIAL_LEVELS = (0.05, 0.95)
"""The success rates between which a [0, 1] reward's row noise is read against its binomial noise (reward-volatile)."""

VOL_CLIP = 4.0
"""``reward-volatile`` reads the row-to-row changes clipped at this many robust (MAD) sigmas of the recent ones: a
Student-t(3) outlier row once made the noise look 2-12x larger for 30 rows (issue #28)."""


class RewardVolatilityPart(GaugePart):
    """High reward (DPO: margin) variance: row-to-row noise grown well past its level earlier in the run."""

    def __init__(self, gauge: Gauge) -> None:
        super().__init__(gauge)
        p = gauge.p
        self.noise_ref = OctaveMean()  # the DPO margin's relative noise earlier in the run
        self.margin_warmup = p["volatile_warmup"]
        # RL rewards: row-to-row changes in units of the within-group spread (reward_std), whose binomial
        # dependence on the success rate is the batch mean's too; their scale against the run's own earlier one
        self.vol = RollingWindow(p["volatile_window"])
        self.vol_ref = ScaleRef(p["volatile_warmup_rl"])
        # reward-volatile's test: RL rewards and DPO margins test different rises
        vr = p["volatile_ratio"] if gauge.family in PREFERENCE_FAMILIES else p["volatile_ratio_rl"]
        self.vol_test = NoiseRiseCusum(vr, gauge.budget(p["volatile_arl"]))
        self.vol_std = Ewma(0.1)
        self.vol_unit = True  # every reward so far in [0, 1]: a success rate, binomial noise when no spread is logged
        self.vol_last = math.nan

    def plan_short(self) -> None:
        g = self.gauge
        self.vol = RollingWindow(g.rows(g.p["volatile_window"]))
        self.margin_warmup = g.rows(g.p["volatile_warmup"])

    def observe(self, key: str, r: float, e: float, std: float | None) -> None:
        """An RL reward row: its change in units of the within-group spread, read against the run's earlier noise."""
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
        p = self.gauge.p
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
            self.judge(key, r, self.vol.std() / math.sqrt(2.0), self.vol_ref, p["volatile_ratio_rl"],
                       p["volatile_warmup_rl"], dx, 2 * p["volatile_warmup_rl"])

    def judge(self, key: str, x: float, sig: float, ref: OctaveMean | ScaleRef, limit: float,
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
        g = self.gauge
        p = g.p
        d = g.derived
        d["reward_noise"] = sig
        base = ref.value
        ref.push(sig)
        if base != base or ref.n < warmup:
            return
        vr = sig / max(base, 1e-12)
        d["volatility_ratio"] = vr
        test = self.vol_test
        arl = g.budget(p["volatile_arl"])
        if test.ratio != limit or test.arl != arl:  # warn_sooner set after setup, or margins in an RL family
            test = self.vol_test = NoiseRiseCusum(limit, arl)
        if dz == dz and base > 0 and ref.n >= settle:
            test.push(dz / (math.sqrt(2.0) * base * p["volatile_tol"]))
        d["volatile_evidence"] = test.score()
        g.check("reward-volatile", test.alarm and vr > limit, "warn", key, x,
                lambda: f"{key} now swings {vr:.1f}x as much from row to row as earlier in the run "
                f"(noise {sig:.3g} vs {base:.3g}; the noise test has crossed its line since row {test.since} of "
                f"its {test.n}): unstable optimisation. Lower the learning rate or raise the KL penalty (beta).",
                clear=10)


#: The reward volatility's rule (``core/catalog.py`` collects them through ``reward.RULES``).
VOLATILITY_RULES: tuple[Rule, ...] = (
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
)
