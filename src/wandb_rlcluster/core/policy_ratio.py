"""Gauge 11, the policy ratio: importance ratio, clip fractions (PPO; off-policy GRPO) and PPO's value function.

Clipping *growing* often precedes a KL explosion (the seed post), so the clip fraction's trend is read against its
own start and noise as well as the post's level lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .gauge import Gauge, finite
from .keys import Row
from .rule import POST, Example, Rule
from .sequential import ar1_inflation
from .stats import Baseline, DiffNoise, Ewma, RollingCorrelation, RollingSlope, RollingWindow
from .streams import after, grpo, ppo, ramp


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
                "value_t": 3.0, "value_clip": 0.3, "value_warmup": 10}
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
        self.value_clip_rows = 0
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
            self._ratio(ratio)
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
                   "large; KL explosion usually follows. " + self.fix("clip-stop", sentence=True), for_=p["for"])
        self.check("clip-high", clip > p["clip_warn"], "warn", key, clip,
                   lambda: f"clip fraction {clip:.0%} is above {p['clip_warn']:.0%} ({self._clip_line_source()}): "
                   "updates are too aggressive.", for_=p["warn_for"])
        self.check("clip-low", self.rows_seen > 20 and ce < p["clip_low"], "info", key, clip,
                   lambda: f"clip fraction ~{ce:.2%} on an off-policy run: updates are very timid; a larger LR "
                   "would learn faster.", for_=10)
        self._clip_growth(key, clip, ce)

    def _ratio(self, ratio: float) -> None:
        """The policy ratio against the post's two bands."""
        p = self.p
        d = self.derived
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
        # autocorrelated noise: the slope's t read over correlated rows is deflated by their AR(1) inflation, and the
        # changes' sigma under-reads the level's noise by sqrt(1 - rho) (issue 47's calibration grid)
        rho = self.clip_noise.rho
        t = self.clip_trend.t_stat() / ar1_inflation(rho)
        sig = self.clip_noise.sigma() / math.sqrt(1.0 - rho)
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
                   "tokens move far more than others in each update, the trust region is fraying. "
                   + self.fix("ratio-variance", sentence=True), for_=3, clear=10)

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
            self.value_clip_rows += 1
            high = vc > p["value_clip"]
            # a fresh value head fits the first returns from nothing: its predictions move far in the first updates
            # and are clipped, whatever the policy does (a critic fact of PPO's warm-up, not the policy's clip)
            warming = self.value_clip_rows <= p["value_warmup"]
            self.check("value-clip-warmup", high and warming, "info", "val/clipfrac_avg", vc,
                       lambda: f"{vc:.0%} of the critic's value predictions are clipped in its warm-up (row "
                       f"{self.value_clip_rows} of {p['value_warmup']}): a fresh value head moving to the returns. "
                       "Normal early in PPO; it warns if it lasts.", clear=p["value_warmup"])
            self.check("value-clip-high", high and not warming, "warn", "val/clipfrac_avg", vc,
                       lambda: f"{vc:.0%} of the critic's value predictions are clipped after its warm-up: the value "
                       "function moves too far per update (value loss unstable). Lower the critic's learning rate "
                       "or widen cliprange_value.", for_=3)


#: The policy-ratio gauge's rules (``core/catalog.py`` collects every module's).
RULES: tuple[Rule, ...] = (
    Rule(
        "policy_ratio", "ratio-warn", severities=("warn",),
        reads="val/ratio (PPO)",
        test="outside a band, held `warn_for` rows",
        params=("ratio_warn", "warn_for"),
        means="updates drift off-policy",
        fix="lower the learning rate or PPO epochs",
        seed="Values consistently above 1.5 or below 0.7 indicate that consecutive policy updates are too drastic.",
        seed_source=POST,
        example=Example(
            "ppo", lambda i, g: ppo(i, g, ratio=1.0 + 0.7 * after(i, 60)), ppo, 100, 60, 62, "val/ratio"),
    ),
    Rule(
        "policy_ratio", "ratio-stop", severities=("warn",),
        reads="val/ratio (PPO)",
        test="outside the wider band, held `for` rows",
        params=("ratio_stop", "for"),
        means="updates are far off-policy: the trust region is gone",
        fix="lower the learning rate or PPO epochs",
        seed="If it regularly exceeds 2.0 or drops below 0.5, the policy updates are too aggressive", seed_source=POST,
        origin="the post warns here, it does not stop: a warning despite the name (kept for alerts.yaml)",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, ratio=1.0 + 1.3 * after(i, 60)), ppo, 100, 60, 62, "val/ratio"),
    ),
    Rule(
        "policy_ratio", "clip-high", severities=("warn",),
        reads="policy/clipfrac_avg (PPO) / clip_ratio/region_mean (GRPO)",
        test="level above a line, held `warn_for` rows",
        params=("clip_warn", "warn_for"),
        means="updates are too aggressive",
        fix="lower the learning rate or num_iterations",
        seed="Clip fraction too high (> 30%): Most of your updates are being clipped.", seed_source=POST,
        origin="GRPO's line is 40 %, from the series' GRPO guidance (Part III of the series: 'total clip > 40 % "
               "excessive ... 10–30 % usually healthy'); the post's 30 % is PPO's",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, clip=0.12 + 0.23 * after(i, 60)), lambda i, g: ppo(i, g, clip=0.12), 100, 60,
            63, "policy/clipfrac_avg"),
    ),
    Rule(
        "policy_ratio", "clip-stop", severities=("stop",),
        reads="clip fraction",
        test="level above a line, held `for` rows (stop)",
        params=("clip_stop", "for"),
        means="each update is far too large: KL explosion usually follows",
        fix="stop; lower LR or num_iterations",
        origin="no seed line: 50 % (GRPO 60 %) is the product's own stop, above the seed's warn lines",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, clip=0.12 + 0.5 * after(i, 60)), lambda i, g: ppo(i, g, clip=0.12), 100, 60,
            63, "policy/clipfrac_avg"),
    ),
    Rule(
        "policy_ratio", "clip-low", severities=("info",),
        reads="EWMA of the clip fraction, off-policy runs only",
        test="below `clip_low`, held 10 (info)",
        params=("clip_low",),
        means="updates are very timid",
        fix="a larger learning rate would learn faster",
        seed="Clip fraction too low (< 1%): Almost no clipping is happening.", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, clip=0.05 - 0.047 * after(i, 40)), lambda i, g: grpo(i, g, clip=0.05),
            100, 40, 70, "clip_ratio/region_mean"),
    ),
    Rule(
        "policy_ratio", "clip-growing", severities=("warn",),
        reads="clip fraction trend vs its start and noise",
        test="trend t (deflated for AR(1) noise) above `grow_t`, up `grow_abs`, `grow_sigma` of the level's noise "
             "and `grow_ratio` x the start, held `grow_for`",
        params=("grow_t", "grow_abs", "grow_ratio", "grow_sigma", "grow_for"),
        means="updates getting more aggressive",
        fix="lower the learning rate before it passes the clip line",
        seed="Clip fraction growing over time: The optimisation is becoming increasingly aggressive.", seed_source=POST,
        example=Example(
            "ppo", lambda i, g: ppo(i, g, clip=0.06 + 0.3 * ramp(i, 100, 100)), ppo, 200, 100, 170,
            "policy/clipfrac_avg"),
    ),
    Rule(
        "policy_ratio", "ratio-variance", severities=("warn",),
        reads="EWMA of val/ratio_var (else the ratio's spread) vs its start",
        test="above `ratio_var_x` x start and `ratio_var_min`, held 3",
        params=("ratio_var_x", "ratio_var_min"),
        means="the trust region is fraying",
        fix="lower the learning rate or the number of PPO epochs",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, ratio_var=0.001 + 0.03 * ramp(i, 100, 30)), ppo, 200, 100, 130,
            "val/ratio_var"),
    ),
    Rule(
        "policy_ratio", "value-loss-growing", severities=("warn",),
        reads="EWMA of loss/value_avg vs its start; trend",
        test="`value_growth` x start and t >= `value_t`, held 3",
        params=("value_growth", "value_t"),
        means="the value function cannot follow the returns",
        fix="lower the LR, check reward scale, smaller vf_coef",
        seed="Value function: Value loss, value clipping. (PPO only.)", seed_source=POST,
        example=Example(
            "ppo", lambda i, g: ppo(i, g, value_loss=0.8 + 4.0 * ramp(i, 100, 100)), ppo, 200, 100, 170,
            "loss/value_avg"),
    ),
    Rule(
        "policy_ratio", "value-clip-high", severities=("warn",),
        reads="val/clipfrac_avg",
        test="level above a line, held 3",
        params=("value_clip",),
        means="the value function moves too far per update",
        fix="lower the LR or widen cliprange_value",
        seed="Value function: Value loss, value clipping. (PPO only.)", seed_source=POST,
        origin="waits out the critic's warm-up (`value_warmup` value rows): a fresh value head is clipped while it "
               "moves to the first returns (value-clip-warmup)",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, value_clip=0.05 + 0.45 * ramp(i, 100, 30)), ppo, 200, 100, 130,
            "val/clipfrac_avg"),
    ),
    Rule(
        "policy_ratio", "value-clip-warmup", severities=("info",),
        reads="val/clipfrac_avg (TRL PPO; verl critic/vf_clipfrac)",
        test="above `value_clip` within the critic's first `value_warmup` value rows (info)",
        params=("value_clip", "value_warmup"),
        means="a fresh value head moving to the returns: a fact of PPO's critic, not the policy's clip",
        fix="nothing; it warns (value-clip-high) if it lasts past the warm-up",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, value_clip=0.45 * (1 - ramp(i, 1, 8))), ppo, 200, 1, 3, "val/clipfrac_avg"),
    ),
)
