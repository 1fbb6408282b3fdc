"""Gauge 12, generation length: drift, trend, explosion, collapse, spread, truncation.

Length *creeping* and the length *spread* collapsing are read against the run's own start (or the SFT model's
measured lengths) and noise; answers getting shorter or more alike while the reward keeps rising is a sharpening
policy, not a failing one.
"""

from __future__ import annotations

import math

from .gauge import Gauge, finite
from .keys import Row
from .kl import KLGauge, TeacherReading
from .reward_progress import RewardProgress
from .rollouts import LENGTH_ROLLOUT_RULES, ROLLOUT_DEFAULTS, ROLLOUT_OUTPUTS, length_rules
from .rule import INSTRUMENTS, POST, Example, Rule
from .sequential import ar1_inflation
from .stats import Baseline, DiffNoise, Ewma, RollingCorrelation, RollingWindow
from .streams import after, grpo, ppo, ramp

ENTROPY_KEYS = ("entropy", "objective/entropy", "policy/entropy_avg")
"""The policy's token entropy, as the entropy gauge reads it."""


def _as_fall(rise: float) -> float:
    """A rise line read on a log scale as a fall: to 1 / (1 + x) of the baseline is as far as up to 1 + x."""
    return rise / (1.0 + rise)


def _expected_range(n: int) -> float:
    """Expected max - min of ``n`` normal draws, in sigmas (Blom's approximation); 16 when n is unknown."""
    from statistics import NormalDist

    n = int(n) if n and n >= 2 else 16
    return 2.0 * NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


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
                "gold": [], "significance": 4.0, "shrink_now": 0.1, "entropy_rise": 0.1, **ROLLOUT_DEFAULTS["length"]}

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
        # a run that distils: is the KL to its teacher below where it started (the student nearer the teacher)?
        self.teacher = TeacherReading({**KLGauge.defaults, **KLGauge.family_defaults.get(self.family, {})}["warn"])
        self.teacher_kl_start = Baseline(KLGauge.defaults["start_rows"])
        self.teacher_kl = Ewma(0.2)
        self.len_rows = 0
        self.recent_len = RollingWindow(45)  # the smoothed length over the rows RewardProgress reads "now" on
        self.len_noise = DiffNoise(20)
        self.spread_noise = DiffNoise(20)
        self.log_range_base = Baseline(p["baseline_rows"])
        self.log_range = Ewma(0.2)
        self.log_range_noise = DiffNoise(20)
        self.entropy_base = Baseline(p["baseline_rows"])  # the policy's entropy: a narrowing beside a rising one is a
        self.entropy = Ewma(0.2)  # format, not a collapse

    def applies(self) -> bool:
        return self.family in ("grpo", "ppo", "online_dpo")

    def plan_short(self) -> None:
        self.trend = RollingCorrelation(self.rows(self.p["trend_rows"]))
        self.progress = RewardProgress.shortened(self)
        self.recent_len = RollingWindow(self.rows(45))

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        length_rules(self, row)
        v = row.values
        p = self.p
        d = self.derived
        self.progress.push(v)
        h = next((v[k] for k in ENTROPY_KEYS if k in v), None)
        if h is not None and finite(h):
            self.entropy_base.push(h)
            self.entropy.push(h)
        kl = v.get("objective/kl", v.get("kl"))
        if kl is not None and finite(kl) and self.teacher.push(v, kl, row.step, self.rows_seen) == "teacher":
            self.teacher_kl_start.push(kl)
            self.teacher_kl.push(kl)
        L = v.get("completions/mean_length")
        c = v.get("completions/clipped_ratio")
        if L is not None and finite(L) and L >= 0:
            d["mean_length"] = L
            self.len_rows += 1
            e = self.ewma.push(L)
            slow = self.slow.push(L)
            self.recent_len.push(slow)
            self.len_noise.push(L)
            self.trend.push(float(self.len_rows), L)
            self.base.push(L)
            self._truncation_gap(L, v.get("completions/mean_terminated_length"), c)
            self._vs_baseline(L, e, slow)
        mn, mx = v.get("completions/min_length"), v.get("completions/max_length")
        if L is not None and mn is not None and mx is not None and finite(L) and finite(mn) and finite(mx) and L > 0:
            self._spread(L, mn, mx, c)
        if c is not None and finite(c):
            d["clipped_ratio"] = c
            cut = c > p["truncation"]
            self.check("truncation", cut, "warn", "completions/clipped_ratio", c,
                       (lambda: f"{c:.0%} of completions hit max_completion_length: rewards are computed on cut-off "
                        "answers. Raise max_completion_length, or penalise overlong answers (DAPO-style).")
                       if cut else "",
                       for_=p["truncation_for"], clear=5)
        eos = v.get("val/num_eos_tokens")
        if eos is not None and finite(eos):
            d["num_eos_tokens"] = eos
            self.check("no-eos", eos <= 0, "warn", "val/num_eos_tokens", eos,
                       lambda: "no completion ends with an EOS token: every sample is truncated, so the reward "
                       "model scores unfinished text (check the stop token / generation config).", for_=10)

    def _truncation_gap(self, L: float, term: float | None, c: float | None) -> None:
        """The mean length against the mean length of the completions that ended with EOS (where no clipped ratio
        is logged): answers cut off at max_completion_length."""
        p = self.p
        d = self.derived
        if term is not None and finite(term):
            gap = L - term
            d["truncation_gap"] = gap
            if L > 0 and (c is None or not finite(c)):
                frac = gap / L
                gapped = frac > p["gap"]
                self.check("truncation-gap", gapped, "warn", "completions/mean_terminated_length", term,
                           (lambda: f"mean length {L:.0f} is {frac:.0%} above the mean length of completions "
                            f"that ended with EOS ({term:.0f}): many answers are cut off at max_completion_length "
                            "before they conclude. " + self.fix("truncation-gap", sentence=True))
                           if gapped else "",
                           for_=p["truncation_for"], clear=5)

    def _vs_baseline(self, L: float, e: float, slow: float) -> None:
        """The smoothed length against its baseline: the post's explosion and collapse ratios, then the drift."""
        p = self.p
        d = self.derived
        if not (self.base.ready and self.base.value > 0):
            return
        b = self.base.value
        ratio = e / b
        d["vs_baseline"] = ratio
        # message closures only for a rule that holds this row (a quiet rule never reads one)
        over = ratio > p["explode"]
        self.check("length-explosion", over, "warn", "completions/mean_length", L,
                   (lambda: f"completions are {ratio:.1f}x their starting length ({b:.0f} -> "
                    f"{e:.0f} tokens; the line, {p['explode']:g}x, is the post's baseline ratio): length bias. "
                    "If reward rose with it, the policy is being paid for "
                    f"verbosity; {self.fix('length-explosion')}.") if over else "", for_=p["for"])
        under = ratio < p["collapse"]
        self.check("length-collapse", under, "warn", "completions/mean_length", L,
                   (lambda: f"completions shrank to {ratio:.2f}x their starting length "
                    f"({b:.0f} -> {e:.0f} tokens; the line, {p['collapse']:g}x, is the post's baseline "
                    "ratio): terse collapse, often a reward that "
                    "punishes length or rewards an empty answer.") if under else "", for_=p["for"])
        self._drift(L, slow / b, b, slow)

    def _follows_teacher(self) -> bool:
        """The run distils (``TeacherReading``) and its KL to the teacher is below where it started: a length that grew
        meanwhile brought the student nearer its teacher (a long-reasoning teacher writes long), where a length bias
        in the reward would have taken it away."""
        start = self.teacher_kl_start.value
        return self.teacher.target == "teacher" and start == start and self.teacher_kl.mean < start

    def _drift(self, L: float, ratio: float, b: float, slow: float) -> None:
        """Mean change vs the baseline (the post's > 30 %) and a steady trend, both with the reward as context."""
        p = self.p
        d = self.derived
        pct = ratio - 1.0
        # the reward's context and the trend's t-statistic only where a rule could use them (they cost a row)
        lo = min(p["trend_now"], p["drift"])
        moved = abs(pct) >= (_as_fall(lo) if pct < 0 else lo)  # a fall's lines are read on a log scale (below)
        improving = self.progress.improving(now=True) if moved and pct < 0 else True
        # a slope's t-statistic over autocorrelated rows overstates itself by ar1_inflation(rho): deflated
        t = self.trend.t_stat() / ar1_inflation(self.len_noise.rho) if moved and self.trend.full else 0.0
        d["length_trend_t"] = t
        # the smoothed level and the 10-row baseline are both noisy estimates: only a move that stands
        # `significance` of their combined standard errors away from the baseline counts
        sd = self.len_noise.level_se(0.2, 10) if len(self.len_noise) >= 10 else math.inf
        if abs(slow - b) < p["significance"] * sd:
            pct = 0.0
        # past the line by the smoothed level's own noise: a healthy drift of 20-25 % plus one noisy stretch is not
        # a 30 % change
        past = abs(pct) - (p["drift_sd"] * sd / b if sd < math.inf else 0.0) > p["drift"]
        # message closures only for a rule that holds this row (a quiet rule never reads one)
        grew = past and pct > 0 and not self._follows_teacher()
        self.check("length-grew", grew, "warn", "completions/mean_length", L,
                   (lambda: f"mean length is {pct:+.0%} vs the baseline ({b:.0f} -> {slow:.0f} tokens), past the "
                    f"{p['drift']:.0%} that deserves a look: the model is learning that verbosity pays. Check the "
                    "reward for a length bias; consider length normalisation or a brevity penalty.") if grew else "",
                   for_=p["drift_for"], clear=10)
        # a length that fell while the reward climbed and now holds beside a reward that holds is a concise policy at
        # rest, not one learning to say less: the warning needs the length to have fallen over the rows the reward's
        # "not improving now" is read on
        fell_now = self.recent_len.max() - slow >= max(p["shrink_now"] * b, p["significance"] * sd
                                                      if sd < math.inf else 0.0)
        shrank = past and pct < 0 and not improving and fell_now
        self.check("length-shrank", shrank, "warn", "completions/mean_length", L,
                   (lambda: f"mean length is {pct:+.0%} vs the baseline ({b:.0f} -> {slow:.0f} tokens) and the "
                    "reward is not improving: the model is learning that short answers are safer. Check the reward "
                    "distribution for penalties it avoids by saying less.") if shrank else "",
                   for_=p["drift_for"], clear=10)
        concise = past and pct < 0 and improving
        self.check("length-shorter-concise", concise, "info", "completions/mean_length", L,
                   (lambda: f"mean length is {pct:+.0%} vs the baseline while the reward keeps improving: the model "
                    "is getting more concise. Usually healthy; read a few samples to be sure nothing is cut.")
                   if concise else "",
                   for_=p["drift_for"], clear=10)
        _trend(self, L, pct, t, improving, fell_now, b, slow)

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
        # every row from the first: its baseline is the run's first rows, as the spread's (read from the rows after
        # the spread's baseline, it was whatever ten rows followed them)
        log_grew = _log_spread_grew(self, mn, mx, 1 + p["variance_change"])
        sb = self.spread_base.value
        if sb != sb or sb <= 1e-3:
            return
        sratio = se / sb
        # a collapse is read on the smaller of the two means: a spread falling 10x in a few rows reaches the
        # collapse line in half the rows in log space, where a scale's changes are multiplicative
        se_c = min(se, sl)
        cratio = se_c / sb
        # the range of a small batch is a noisy estimate of its spread: only a change that stands out counts
        sd = self.spread_noise.level_se(0.2, 10) if len(self.spread_noise) >= 10 else math.inf
        significant = abs(se - sb) >= p["significance"] * sd
        var_ratio = sratio * sratio
        d["spread_vs_start"] = sratio
        d["variance_vs_baseline"] = var_ratio
        sig_c = abs(se_c - sb) >= p["significance"] * sd
        collapsed = cratio < p["spread_collapse"] and sig_c
        # however deep, a narrowing while the reward still clearly rises is sharpening: a fixed answer format (short
        # arithmetic answers) gives small batches identical lengths while the policy keeps getting better (issue #28)
        improving = self.progress.improving(now=True) if collapsed else True
        # the lengths converged while the entropy rose: the tokens are more varied, not less; one answer format (a
        # fixed JSON schema, a tool call) fixes the length, not the content -- no mode collapse
        fmt = collapsed and not improving and self._entropy_rose()
        collapse = collapsed and not improving and not fmt
        self.check("length-fixed-format", fmt, "info", "completions/max_length", spread,
                   (lambda: f"the length spread within a batch fell to {cratio:.2f}x its start ((max - min) / mean "
                    f"{sb:.2f} -> {se_c:.2f}) while the policy's entropy rose to {self.entropy.mean:.3g} from "
                    f"{self.entropy_base.value:.3g}: the answers share one format of fixed length (a JSON schema, a "
                    "tool call), and within it the tokens grow more varied, not less. Not mode collapse.")
                   if fmt else "",
                   for_=p["for"], clear=10)
        # message closures only for a rule that holds this row (a quiet rule never reads one)
        self.check("length-variance-collapse", collapse, "warn", "completions/max_length",
                   spread,
                   (lambda: f"the length spread within a batch fell to {cratio:.2f}x its start ((max - min) / mean "
                    f"{sb:.2f} -> {se_c:.2f}) while the reward is not improving: answers are converging on one "
                    "template, a sign of mode collapse. " + self.fix("length-variance-collapse", sentence=True))
                   if collapsed else "",
                   for_=p["for"], clear=10)
        self.check("length-spread-narrowing", collapsed and improving, "info", "completions/max_length",
                   spread,
                   (lambda: f"the length spread within a batch fell to {cratio:.2f}x its start while the reward "
                    "keeps improving: the policy is sharpening. Healthy unless samples look like one template.")
                   if collapsed else "",
                   for_=p["for"], clear=10)
        self._variance_change(spread, se, sb, sratio, var_ratio, significant, collapsed, log_grew)


    def _variance_change(self, spread: float, se: float, sb: float, sratio: float, var_ratio: float,
                         significant: bool, collapsed: bool, log_grew: bool) -> None:
        """``length-variance-change``: the spread grown or narrowed past ``variance_change`` (not a collapse)."""
        p = self.p
        d = self.derived
        vc = p["variance_change"]
        # a milder narrowing: the reward having risen over the run is enough to call it sharpening
        narrower = (significant and var_ratio < 1 - vc and not collapsed and not self.progress.improving()
                    and not self._entropy_rose())  # narrower beside a rising entropy: a format (as above)
        # (max - min) / mean also grows when only the mean falls: answers getting shorter under a max pinned at the
        # cap leave the range in tokens where it was, and the shape has not widened
        lb = self.base.value
        in_tokens = sratio * self.slow.mean / lb if lb == lb and lb > 0 else sratio
        grew = (significant and var_ratio > 1 + vc and in_tokens * in_tokens > 1 + vc) or log_grew
        changed = (grew and not collapsed) or narrower
        self.check("length-variance-change", changed, "warn", "completions/max_length", spread,
                   (lambda: f"the length variance is {var_ratio:.2f}x the baseline's (spread (max - min) / mean "
                    f"{sb:.2f} -> {se:.2f}; {d.get('log_spread_vs_baseline', math.nan) ** 2:.2f}x on log(max / min)), "
                    f"past the {vc:.0%} change that deserves a look: the output distribution is changing shape. "
                    + self.fix("length-variance-change", sentence=True)) if changed else "",
                   for_=p["drift_for"], clear=10)

    def _entropy_rose(self) -> bool:
        """The policy's entropy (where logged) sits `entropy_rise` above its start."""
        b = self.entropy_base.value
        return b == b and b > 0 and self.entropy.mean >= (1.0 + self.p["entropy_rise"]) * b


def _trend(g: LengthGauge, L: float, pct: float, t: float, improving: bool, fell_now: bool, b: float,
           slow: float) -> None:
    """``length-trend-up`` / ``-down``: a steady trend, projected to the end of the run where its length is known."""
    p = g.p
    d = g.derived
    # A steady trend, early: where the slope of the last `trend_rows` rows takes the mean by the end of the run
    # (the callback knows max_steps); without it, the change so far must reach `trend_min`.
    # A climb is carried on as a straight line in tokens (compounded, a straight line in log space, a steady
    # +0.3 % a row read as +14,000 % by step 2,000); a fall as a straight line in log space, so it nears -100 %
    # and never passes it. The rows left come from the planned rows, which start at the log's first step (a
    # resumed run's first row is not step 0).
    slope = g.trend.slope() if g.trend.full else 0.0
    rows_left = max(0.0, g.planned_rows - g.rows_seen) if g.max_steps > 0 else 0.0
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
    steady = g.trend.full and abs(t) >= p["trend_t"] and far and pct * t > 0
    up = steady and t > 0 and not g._follows_teacher()
    # as length-shrank: a length that fell while the reward climbed and now creeps down beside a reward that holds
    # is a concise policy at rest; the steady fall must also show over the last 45 rows
    down = steady and t < 0 and not improving and fell_now
    where = ""
    if up or down:  # the projection's wording only for a message that may be read
        course = f"{projected:+.0%}" if projected < 9.0 else "more than 10x the baseline"
        where = f", on course for {course} by step {g.max_steps}" if abs(pct) < least else ""
    g.check("length-trend-up", up, "warn", "completions/mean_length", L,
               (lambda: f"length is steadily increasing ({pct:+.0%} vs the baseline{where}, trend t={t:.0f} over "
                f"the last {g.trend.size} logged steps): a length bias in the reward is being learned. Add "
                "length normalisation or a brevity penalty before it explodes.") if up else "",
               for_=p["trend_for"], clear=10)
    g.check("length-trend-down", down, "warn",
               "completions/mean_length", L,
               (lambda: f"length is steadily decreasing ({pct:+.0%} vs the baseline{where}, trend t={t:.0f}) "
                "while the reward does not improve: the model learns to say less. "
                + g.fix("length-trend-down", sentence=True))
               if down else "",
               for_=p["trend_for"], clear=10)


def _log_spread_grew(g: LengthGauge, mn: float, mx: float, limit: float) -> bool:
    """The spread's growth read on log(max / min), against its own baseline, squared as a variance ratio.

    Lengths are close to lognormal, and the longest are cut at max_completion_length: when their log-spread
    grows 1.5-1.9x, (max - min) / mean grows only ~1.2x (the max sits at the cap, the mean moves with the
    tail), while log(max / min) grows with it, the shortest answers getting shorter.
    """
    if not (mn >= 1 and mx > mn):
        g.derived.pop("log_spread_vs_baseline", None)
        return False
    x = math.log(mx / mn)
    g.log_range_base.push(x)
    le = g.log_range.push(x)
    g.log_range_noise.push(x)
    lb = g.log_range_base.value
    if lb != lb or lb <= 1e-3 or len(g.log_range_noise) < 10:
        return False
    ratio = le / lb
    g.derived["log_spread_vs_baseline"] = ratio
    sd = g.log_range_noise.level_se(0.2, 10)
    return le - lb >= g.p["significance"] * sd and ratio * ratio > limit


_LEN_DEV = ("Any significant deviation (> 30% change in mean or > 50% change in variance) during RL deserves "
            "investigation.")

#: The length gauge's rules (``core/catalog.py`` collects every module's).
RULES: tuple[Rule, ...] = (
    Rule(
        "length", "length-explosion", severities=("warn",),
        reads="EWMA (`smooth`) of completions/mean_length / its first `baseline_rows` rows",
        test="ratio above a line, held `for` rows",
        params=("explode", "for", "smooth"),
        means="length bias",
        fix="add a length penalty or check the reward",
        seed="baseline ratio < 0.5 or > 2.0", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, length=200 * (1 + 1.5 * ramp(i, 60, 10))),
            lambda i, g: grpo(i, g, length=200 * (1 + 0.3 * i / 100)), 100, 60, 75, "completions/mean_length"),
    ),
    Rule(
        "length", "length-collapse", severities=("warn",),
        reads="EWMA of mean length / baseline",
        test="ratio below a line, held `for` rows",
        params=("collapse", "for"),
        means="terse collapse",
        fix="check for a reward that punishes length",
        seed="baseline ratio < 0.5 or > 2.0", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, length=200 * (1 - 0.7 * ramp(i, 60, 10))),
            lambda i, g: grpo(i, g, length=200 * (1 - 0.2 * i / 100)), 100, 60, 75, "completions/mean_length"),
    ),
    Rule(
        "length", "length-grew", severities=("warn",),
        reads="slow EWMA of mean length vs the baseline",
        test="past `drift` by its own noise and `significance` standard errors, held `drift_for`; not in a run that "
             "distils while its KL to the teacher is below its start (kl-to-teacher: the student's length follows its "
             "teacher's)",
        params=("drift", "drift_sd", "significance", "drift_for"),
        means="verbosity pays",
        fix="length normalisation or a brevity penalty",
        seed=_LEN_DEV, seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, 100, 40))), grpo, 200, 100, 150,
            "completions/mean_length"),
    ),
    Rule(
        "length", "length-shrank", severities=("warn",),
        reads="slow EWMA of mean length vs the baseline, with the reward's progress",
        test="as length-grew, downwards, while the reward is not improving now, and fallen by `shrink_now` of the "
             "baseline (and `significance` errors) over the same last 45 rows: a length that fell while the reward "
             "climbed and now holds is a concise policy",
        params=("drift", "significance", "drift_for", "shrink_now"),
        means="short answers are safer for the policy",
        fix="check the reward for penalties it avoids by saying less",
        seed="Length steadily decreasing: The model is learning that short responses are safer.", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.4 * ramp(i, 100, 40))),
            lambda i, g: grpo(i, g, reward=0.4), 200, 100, 150, "completions/mean_length"),
    ),
    Rule(
        "length", "length-shorter-concise", severities=("info",),
        reads="as length-shrank",
        test="the same fall while the reward improves (info)",
        params=("drift", "significance", "drift_for"),
        means="the model is getting more concise",
        fix="read a few samples",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200, length=200 * (1 - 0.4 * ramp(i, 100, 40))),
            lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200), 200, 100, 150, "completions/mean_length"),
    ),
    Rule(
        "length", "length-trend-up", severities=("warn",),
        reads="mean length trend over `trend_rows` and its projection to the planned end",
        test="t >= `trend_t` and on course for `trend_target` (or past `trend_min`), held `trend_for`; not in a run "
             "that distils while its KL to the teacher is below its start (as length-grew)",
        params=("trend_t", "trend_target", "trend_now", "trend_min", "trend_for"),
        means="a length bias is being learned",
        fix="length normalisation or a brevity penalty",
        seed="Length steadily increasing: The model is learning that verbosity is rewarded.", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, 100, 100))),
            lambda i, g: grpo(i, g, length=200 * (1 + 0.15 * i / 200)), 200, 100, 170, "completions/mean_length",
            {"max_steps": 200}),
    ),
    Rule(
        "length", "length-trend-down", severities=("warn",),
        reads="as length-trend-up, on a log scale",
        test="the same, falling, reward not improving now, and fallen by `shrink_now` of the baseline over the last "
             "45 rows (as length-shrank: a length that fell while the reward climbed and now creeps is a concise "
             "policy at rest)",
        params=("trend_t", "trend_target", "trend_min", "trend_for", "shrink_now"),
        means="the model learns to say less",
        fix="check which penalty it avoids",
        seed="Length steadily decreasing: The model is learning that short responses are safer.", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.45 * ramp(i, 100, 100))),
            lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.15 * i / 200)), 200, 100, 170,
            "completions/mean_length", {"max_steps": 200}),
    ),
    Rule(
        "length", "length-variance-collapse", severities=("warn",),
        reads="within-batch spread (max - min) / mean vs its start",
        test="below `spread_collapse` x start past `significance` errors while the reward is not clearly rising now "
             "(however deep); held `for`",
        params=("spread_collapse", "significance", "for"),
        means="answers converge on one template",
        fix="raise the temperature or add an entropy bonus",
        seed="Length variance collapsing: Even if mean length stays stable, collapsing variance indicates mode "
             "collapse.",
        seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4, spread=1.2 - 1.0 * ramp(i, 100, 40)),
            lambda i, g: grpo(i, g, reward=0.4), 200, 100, 150, "completions/max_length"),
    ),
    Rule(
        "length", "length-fixed-format", severities=("info",),
        reads="as length-variance-collapse, and the policy's entropy vs its first `baseline_rows`",
        test="the collapse of length-variance-collapse while the smoothed entropy is `entropy_rise` above its start "
             "(info); held `for`",
        params=("spread_collapse", "entropy_rise", "for"),
        means="one answer format of fixed length (a JSON schema, a tool call); the tokens within it grow more varied",
        fix="nothing; read a few samples to confirm the format",
        origin="issue 47: three agent runs answering in a fixed JSON format (constant reply length) under an entropy "
               "bonus read as mode collapse",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g, reward=0.4, spread=1.2 - 1.0 * ramp(i, 100, 40)),
                                  "entropy": 0.6 * (1 + 0.5 * ramp(i, 100, 40)) + 0.01 * g.normal()},
            lambda i, g: grpo(i, g, reward=0.4), 200, 100, 150, "completions/max_length"),
    ),
    Rule(
        "length", "length-spread-narrowing", severities=("info",),
        reads="as length-variance-collapse",
        test="the same narrowing while the reward clearly rises now (info)",
        params=("spread_collapse", "significance", "for"),
        means="the policy is sharpening",
        fix="read samples for one template",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200, spread=1.2 - 0.95 * ramp(i, 100, 40)),
            lambda i, g: grpo(i, g, reward=0.3 + 0.4 * i / 200), 200, 100, 150, "completions/max_length"),
    ),
    Rule(
        "length", "length-variance-change", severities=("warn",),
        reads="spread ratio squared (and log(max/min)) vs the baseline",
        test="past `variance_change` and `significance` errors, held `drift_for`; a growth of (max - min) / mean "
             "counts only if the range in tokens grew too (a mean falling under a max pinned at the cap is not a "
             "wider shape)",
        params=("variance_change", "significance", "drift_for"),
        means="the output distribution changes shape",
        fix="read samples; compare with the SFT model",
        seed=_LEN_DEV, seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, spread=1.2 + 0.8 * ramp(i, 100, 30)), grpo, 200, 100, 140,
            "completions/max_length"),
    ),
    Rule(
        "length", "truncation", severities=("warn",),
        reads="completions/clipped_ratio",
        test="level above a line, held `truncation_for` rows",
        params=("truncation", "truncation_for"),
        means="rewards are computed on cut-off answers",
        fix="raise max_completion_length or penalise overlong answers",
        seed="If completions/clipped_ratio is high (> 20%), many responses are hitting the maximum length limit.",
        seed_source=POST,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "completions/clipped_ratio": 0.02 + 0.3 * after(i, 60)}, grpo, 100, 60,
            62, "completions/clipped_ratio"),
    ),
    Rule(
        "length", "truncation-gap", severities=("warn",),
        reads="(mean_length - mean_terminated_length) / mean_length, where clipped_ratio is absent",
        test="above `gap`, held `truncation_for` rows",
        params=("gap", "truncation_for"),
        means="many answers are cut off",
        fix="raise the limit or find out why the model rambles",
        seed="A large gap between these two metrics indicates frequent truncation", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: {k: v for k, v in grpo(i, g).items() if k != "completions/clipped_ratio"}
            | {"completions/mean_terminated_length": 200 * (0.99 - 0.3 * ramp(i, 60, 20))},
            lambda i, g: {k: v for k, v in grpo(i, g).items() if k != "completions/clipped_ratio"}, 100, 60, 75,
            "completions/mean_terminated_length"),
    ),
    Rule(
        "length", "no-eos", severities=("warn",),
        reads="val/num_eos_tokens (PPO)",
        test="0, held 10 rows",
        means="no completion ends: the reward scores unfinished text",
        fix="check the stop token and generation config",
        example=Example(
            "ppo", lambda i, g: ppo(i, g, eos=0.0 if i >= 60 else 30.0), ppo, 100, 60, 69, "val/num_eos_tokens"),
    ),
    *LENGTH_ROLLOUT_RULES,
)
