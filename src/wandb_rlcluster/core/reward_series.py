"""The reward series the reward gauge's parts share: where it started, its smoothed level, its row noise, its rows,
and whether the task score sits at its ceiling."""

from __future__ import annotations

import math

from .gauge import Gauge
from .part import GaugePart
from .stats import DiffNoise, Ewma, RollingWindow

PREFERENCE_FAMILIES = frozenset({"dpo", "kto", "orpo"})

EWMA10_SD = math.sqrt(0.1 / (2 - 0.1))
"""The standard deviation of an EWMA(0.1) of independent rows, in row sigmas."""


def noise_floor(level: float) -> float:
    """A noise floor for a series at ``level``: a constant start must not make every change infinite sigmas."""
    return 1e-3 * max(1.0, abs(level)) if level == level else 1e-3


class RewardSeries(GaugePart):
    """The trained reward (``reward`` or ``objective/scores``) as every reward part reads it."""

    def __init__(self, gauge: Gauge) -> None:
        super().__init__(gauge)
        self.first = RollingWindow(gauge.p["window"])  # frozen once full: the start of the run
        self.r_noise = DiffNoise(30)  # the reward's row noise and its AR(1): the plateau's scale
        self.ewma = Ewma(0.1)
        self.reward_rows = 0
        self.saturated = False  # the task score's smoothed level at its ceiling (this row)

    def push(self, r: float) -> float:
        """Count a finite reward row, smooth it, keep it in the start window; its EWMA."""
        d = self.gauge.derived
        self.reward_rows += 1
        d["reward"] = r
        e = self.ewma.push(r)
        d["reward_ewma"] = e
        if not self.first.full:
            self.first.push(r)
        return e
