"""The reward gauge's length-paid hacking: gains that track the completion length."""

from __future__ import annotations

from .gauge import Gauge, finite
from .part import GaugePart
from .reward_series import RewardSeries
from .reward_shift import RewardShiftPart
from .rule import POST, Example, Rule
from .stats import (
    Baseline,
    RollingCorrelation,
)
from .streams import grpo, ramp


class RewardHackingPart(GaugePart):
    """The reward paying for length: gains far beyond its start with completions growing with it
    (``reward-hacking``), or a jump after which it follows the completion length row by row
    (``reward-pays-length``)."""

    def __init__(self, gauge: Gauge, series: RewardSeries, shifts: RewardShiftPart) -> None:
        super().__init__(gauge)
        self.series = series
        self.shifts = shifts
        p = gauge.p
        self.len_base = Baseline(10)
        self.rl = RollingCorrelation(30)  # (reward, length) pairs
        self.pays = RollingCorrelation(p["pays_window"])  # (length, reward) since the reward's jump began
        self.pays_jump = False  # the reward crossed shift_h by a jump of pays_jump_z sigmas or more in one row

    def observe(self, key: str, r: float, length: float | None) -> None:
        """Hacking: reward gains far beyond its start, length growing with it."""
        if length is None or not finite(length) or length <= 0:
            return
        g = self.gauge
        p = g.p
        first = self.series.first
        self.len_base.push(length)
        self.rl.push(r, length)
        if self.len_base.ready and first.full and self.rl.full:
            lr = self.rl.mean_y() / max(self.len_base.value, 1e-9)
            sigma = max(first.std(), 1e-3 * max(1.0, abs(first.mean())))
            gain = (self.rl.mean_x() - first.mean()) / sigma
            corr = self.rl.corr()
            g.derived["length_corr"] = corr
            hack = lr > p["hack_length_ratio"] and corr > p["hack_corr"] and gain > p["hack_gain_sigma"]
            g.check("reward-hacking", hack, "warn", key, r,
                    lambda: f"reward is up {gain:.1f} sigma while completions grew {lr:.1f}x and track it "
                    f"(corr {corr:.2f}): the policy may be paying for length, not quality. "
                    + g.fix("reward-hacking", sentence=True),
                    for_=3)
        self._pays_length(key, r, length)

    def _pays_length(self, key: str, r: float, length: float) -> None:
        """The reward jumped far outside its own noise (the shift detector crossed ``shift_h`` on a row
        ``pays_jump_z`` sigmas out: a jump, not a slow climb adding up) and, row by row from that row on, it follows
        the mean completion length (correlation ``pays_corr`` over ``pays_rows`` rows or more): the reward now pays
        for length. A reward that starts paying per token jumps at once while the length has not grown yet, so this
        comes long before the length itself looks wrong (``reward-hacking``)."""
        g = self.gauge
        p = g.p
        det = self.shifts.shift
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
        shifts = self.shifts
        g.check("reward-pays-length", pays, "warn", key, r,
                lambda: f"{key} jumped at step {shifts.up_since} ({det.z:+.1f} sigma of its own noise) and since then "
                f"follows the mean completion length row by row (corr {corr:.2f} over {n} steps): the reward pays "
                "for length. Check the reward function (a per-token or per-character term, a missing length "
                "normalisation) and read samples; add a length penalty.", clear=10)


def _pays_length(row: dict[str, float], on: bool) -> dict[str, float]:
    """A GRPO row whose reward, once ``on``, pays per token of its completions (a reward function's length term)."""
    if on:
        row["reward"] = 0.02 * row["completions/mean_length"]
    return row


#: The length-paid hacking rules (``core/catalog.py`` collects them through ``reward.RULES``).
HACKING_RULES: tuple[Rule, ...] = (
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
)
