"""The reward gauge's change points: a jump up, a drop, a fall from its peak."""

from __future__ import annotations

import math

from .gauge import Gauge
from .part import GaugePart
from .reward_series import RewardSeries, noise_floor
from .rule import Example, Rule
from .sequential import ar1_inflation, ewma_var_factor
from .stats import (
    ShiftDetector,
)
from .streams import grpo, ramp


class RewardShiftPart(GaugePart):
    """Change points against the reward's own noise: a jump up (``info``), a drop or a fall from its peak (``warn``).
    """

    def __init__(self, gauge: Gauge, series: RewardSeries) -> None:
        super().__init__(gauge)
        self.series = series
        p = gauge.p
        self.shift = ShiftDetector(k=p["shift_k"], h=p["shift_h"], alpha=p["shift_alpha"], warmup=p["window"],
                                   clip=p["shift_clip"])
        self.up_since = 0
        self.down_since = 0
        self.peak_e = -math.inf  # the reward EWMA's highest point since the start window filled
        self.peak_step = 0
        self.peak_row = 0
        self.drop_rows = 0

    def observe(self, key: str, r: float, e: float) -> None:
        g = self.gauge
        p = g.p
        d = g.derived
        first = self.series.first
        det = self.shift
        up_from = g.step if det.up <= 0 else self.up_since
        down_from = g.step if det.down <= 0 else self.down_since
        det.push(r, floor=noise_floor(first.mean()), deflate=ar1_inflation(self.series.r_noise.ar1.lower()))
        self.up_since, self.down_since = up_from, down_from
        d["shift_up"] = det.up
        d["shift_down"] = det.down
        ref = det.ref
        g.check("reward-shift-up", det.up > p["shift_h"], "info", key, r,
                lambda: f"{key} shifted up since step {self.up_since} (now {e:.3g}, {det.z:+.1f} sigma of its own "
                "noise): a jump, not the run's slow trend. Often the policy found something; if length or KL "
                "jumped with it, or a gold reward did not, it found a loophole. Read samples from that step.",
                clear=10)
        drop = self._fell_from_peak(e, det)
        g.check("reward-shift-down", (det.down > p["shift_h"] and self._material_at_ceiling(e)) or drop, "warn",
                key, r,
                lambda: (f"{key} fell from its peak {self.peak_e:.3g} (step {self.peak_step}) to {e:.3g}, losing "
                         f"{(self.peak_e - e) / max(self.peak_e - first.mean(), 1e-12):.0%} of what the run "
                         "had gained" if drop else
                         f"{key} dropped since step {self.down_since} (now {e:.3g}, reference {ref:.3g}, "
                         f"{det.z:+.1f} sigma of its own noise)")
                + ": the policy lost something it had (forgetting, a collapse, or a harder slice of prompts). "
                + g.fix("reward-shift-down", sentence=True), clear=10)

    def _material_at_ceiling(self, e: float) -> bool:
        """A drop the CUSUM found is a loss, unless the score holds at its ceiling and gave back under
        ``ceiling_drop_share`` of what the run gained to get there.

        A bounded score's noise shrinks near its ceiling (a success rate's spread is p(1 - p)), so the CUSUM's
        sigmas read a point or less of wander at 0.96 as a shift: that is a solved task's batch-to-batch slice of
        prompts, not the policy losing what it learned. A score saturated from its first rows has gained nothing,
        so any drop the CUSUM finds still counts."""
        if not self.series.saturated:
            return True
        first = self.series.first
        gain = self.peak_e - first.mean() if first.full else 0.0
        return gain <= 0 or self.peak_e - e >= self.gauge.p["ceiling_drop_share"] * gain

    def _fell_from_peak(self, e: float, det: ShiftDetector) -> bool:
        """The reward's EWMA fell from its peak by ``drop_share`` of what the run had gained, within
        ``drop_within`` rows of that peak, for ``drop_for`` rows.

        The CUSUM misses a fall that comes while the reward is still learning fast: its noise scale includes the
        learning, and its slow reference follows the fall. A real gain (``drop_gain_sigma`` row sigmas) and a
        fall far outside the EWMA's own noise (``drop_sigma``) keep a flat, wandering run out of it.
        """
        g = self.gauge
        p = g.p
        first = self.series.first
        if not first.full or p["drop_share"] <= 0:
            return False
        rows = self.series.reward_rows
        if e > self.peak_e:
            self.peak_e, self.peak_step, self.peak_row = e, g.step, rows
        gain, fall = self.peak_e - first.mean(), self.peak_e - e
        recent = self.drop_rows > 0 or rows - self.peak_row <= p["drop_within"]
        fell = recent and gain > 0 and fall >= p["drop_share"] * gain
        if fell:  # the noise scale (a median of 30 residuals) only where the shares already say "fell"
            row_sigma = det.sigma()
            # the EWMA's own noise under the reward's AR(1) (issue #28): its peak wanders further than independent
            # rows would let it
            ewma_sd = row_sigma * math.sqrt(ewma_var_factor(0.1, self.series.r_noise.rho))
            fell = (row_sigma == row_sigma and gain > p["drop_gain_sigma"] * row_sigma
                    and fall >= p["drop_sigma"] * ewma_sd)
        self.drop_rows = self.drop_rows + 1 if fell else 0
        return self.drop_rows >= g.warn_rows(p["drop_for"])


#: The reward shifts' rules (``core/catalog.py`` collects them through ``reward.RULES``).
SHIFT_RULES: tuple[Rule, ...] = (
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
)
