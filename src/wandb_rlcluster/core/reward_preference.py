"""The reward gauge's preference part: the DPO family's margin, accuracy and chosen/rejected rewards."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .gauge import Gauge, finite
from .keys import Row
from .part import GaugePart
from .reward_volatility import RewardVolatilityPart
from .rule import POST, Example, Rule
from .sequential import ar1_inflation
from .stats import (
    Baseline,
    DiffNoise,
    Ewma,
    HalfRunTrend,
    RollingCorrelation,
    RunningRegression,
)
from .streams import dpo, ramp


class RewardPreferencePart(GaugePart):
    """The DPO family's margin, accuracy and chosen/rejected rewards (and a reward model's accuracy): the margin
    collapsing, shrinking, negative or on a plateau, accuracy at chance, the chosen reward falling or running away.
    """

    def __init__(self, gauge: Gauge, volatility: RewardVolatilityPart) -> None:
        super().__init__(gauge)
        self.volatility = volatility
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

    def plan_long(self) -> None:
        # a chosen reward running away climbs over a share of the run, not a fixed number of rows: in a run logged
        # every step, 30 rows of per-step noise hide a climb that 5 % of a 1400-row run shows plainly
        g = self.gauge
        w = round(g.p["runaway_share"] * g.planned_rows)
        if w > 30:
            self.chosen_recent = RollingCorrelation(w)
            self.rejected_recent = RollingCorrelation(w)

    def observe_reward_model(self, v: Mapping[str, float]) -> None:
        """A reward model's training: its accuracy near chance."""
        g = self.gauge
        acc = v.get("accuracy")
        if acc is not None and finite(acc):
            a = self.acc.push(acc)
            g.derived["accuracy_ewma"] = a
            chance = g.rows_seen >= g.p["dpo_min_rows"] and a < g.p["accuracy_chance"]
            g.check("accuracy-chance", chance, "warn", "accuracy", acc,
                    lambda: f"reward-model accuracy {a:.2f} is near chance after {g.rows_seen} steps.",
                    for_=10)

    def observe(self, row: Row) -> None:
        v = row.values
        m = v.get("rewards/margins")
        c, rj = v.get("rewards/chosen"), v.get("rewards/rejected")
        if m is None and c is not None and rj is not None:
            m = c - rj
        acc = v.get("rewards/accuracies")
        if m is None or not finite(m):
            return
        me, collapsed = self._margin(m)
        warm = self.pref_rows >= self.gauge.p["dpo_min_rows"]
        if acc is not None and finite(acc):
            self._accuracy(m, me, acc, warm, collapsed)
        if c is not None and finite(c):
            self._chosen(v, c, rj, me, warm, collapsed)

    def _margin(self, m: float) -> tuple[float, bool]:
        """The margin's level, volatility and fall from its peak (collapse); its EWMA and whether it collapsed."""
        g = self.gauge
        d = g.derived
        p = g.p
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
            vol = self.volatility
            vol.judge("rewards/margins", m, self.margin_noise.sigma() / level, vol.noise_ref,
                      p["volatile_ratio"], vol.margin_warmup, (m - m_prev) / level,
                      vol.margin_warmup)  # its warm-up is already 30 rows (shortened in a short run)
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
        g.check("margin-collapse", collapsed, "warn", "rewards/margins", m,
                lambda: f"reward margin fell to {me:.3g} from a peak of {peak:.3g}: chosen and rejected are "
                "converging and the preference signal is being undone (LR too high, noisy pairs, beta too low).",
                for_=5)
        self._shrinking(m, me, warm, collapsed)
        g.check("margin-negative", warm and me < 0, "warn", "rewards/margins", m,
                lambda: f"reward margin is negative ({me:.3g}): the policy now prefers the rejected answers. "
                + g.fix("margin-negative", sentence=True), for_=5)
        return me, collapsed

    def _shrinking(self, m: float, me: float, warm: bool, collapsed: bool) -> None:
        """The same convergence, early: a steady fall from the peak, far beyond the EWMA's own noise (the peak of a
        noisy EWMA sits high by itself), over the second half of the run so far, the last 30 rows, or the rows
        since the peak (the half-run fit still holds the climb to a late peak, and 30 per-step rows are noise)."""
        g = self.gauge
        p = g.p
        peak = self.margin_peak
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
        g.derived["margin_recent_t"] = rt
        g.check("margin-shrinking", shrinking, "warn", "rewards/margins", m,
                lambda: f"chosen and rejected rewards are converging: the margin fell {1 - me / peak:.0%} from its "
                f"peak {peak:.3g} to {me:.3g} and keeps falling (trend t={rt:.1f}). The model is losing the "
                "preference it learned: lower the learning rate, check for noisy pairs, keep the best checkpoint.",
                for_=p["margin_shrink_for"], clear=10)

    def _accuracy(self, m: float, me: float, acc: float, warm: bool, collapsed: bool) -> None:
        """Accuracy near chance while the margin does not climb; the margin stopped growing with accuracy low."""
        g = self.gauge
        p = g.p
        a = self.acc.push(acc)
        g.derived["accuracy_ewma"] = a
        # Near chance while the margin still climbs is a slow start, not a failure to learn.
        chance = warm and a < p["accuracy_chance"] and not self.margin_trend.t_stat() > p["margin_learning_t"]
        g.check("accuracy-chance", chance, "warn", "rewards/accuracies", acc,
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
        g.check("margin-plateau", plateau, "warn", "rewards/margins", m,
                lambda: f"the reward margin has stopped growing at {me:.3g} ({grown:+.0%} over the last "
                f"{half.rows()} steps, half the run) with accuracy only {a:.2f}: the model stopped learning "
                "from the preference data early. The learning rate may be too low, or the data's signal is "
                "exhausted (people overestimate it).", for_=p["margin_plateau_for"], clear=10)

    def _chosen(self, v: Mapping[str, float], c: float, rj: float | None, me: float, warm: bool,
                collapsed: bool) -> None:
        """The chosen reward drifting down while the margin grows (``info``), or climbing without bound."""
        g = self.gauge
        ce = self.chosen.push(c)
        self.chosen_start.push(c)
        self.chosen_recent.push(float(self.pref_rows), c)
        g.derived["chosen_ewma"] = ce
        # The trap: chosen reward falling while the margin grows is common and often harmless.
        healthy_margin = me > 0 and not collapsed
        falling = self.chosen_start.ready and ce < self.chosen_start.value - 0.1 and healthy_margin
        g.check("chosen-reward-falling", warm and falling, "info", "rewards/chosen", c,
                lambda: f"chosen reward drifts down ({ce:.3g}) while the margin grows ({me:.3g}): likelihood "
                "displacement, common in DPO and usually harmless. "
                + g.fix("chosen-reward-falling", sentence=True),
                for_=10, clear=20)
        # Unbounded growth: chosen keeps climbing past +runaway_level while the rejected side does not fall.
        if rj is not None and finite(rj):
            self.rejected.push(rj)
        if rj is not None and finite(rj):
            self.rejected_recent.push(float(self.pref_rows), rj)
            self.rejected_half.push(rj)
        self.chosen_half.push(c)
        runaway, ct = self._runaway(ce, warm)
        kl = v.get("objective/kl", v.get("kl"))
        kl_txt = f"; KL to the reference is {kl:.3g}" if kl is not None and finite(kl) else \
            "; DPO logs no KL, but a chosen reward of +1 is already a large log-ratio to the reference"
        g.check("chosen-reward-runaway", runaway, "warn", "rewards/chosen", c,
                lambda: f"chosen reward keeps climbing ({ce:.3g}, trend t={ct:.1f}) while the rejected reward "
                f"does not fall{kl_txt}: unbounded growth, the policy exploits the implicit reward rather than "
                "learning the preference. " + g.fix("chosen-reward-runaway", sentence=True), for_=5, clear=10,
                long_hold=False)  # its window is a share of the run already (runaway_share)

    def _runaway(self, ce: float, warm: bool) -> tuple[bool, float]:
        """Whether the chosen reward runs away (and its trend t): a climb that is slowing down is the pair being
        learned (fast at first, then settling); a runaway keeps its pace or speeds up: the slope over the run's
        later half against the average slope since the start."""
        p = self.gauge.p
        ct = 0.0
        runaway = False
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
        return runaway, ct


_CONVERGE = ("If chosen and rejected rewards approach each other, the model is losing its ability to distinguish "
             "preferences.")


#: The preference rules (``core/catalog.py`` collects them through ``reward.RULES``).
PREFERENCE_RULES: tuple[Rule, ...] = (
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
)
