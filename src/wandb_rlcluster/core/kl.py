"""Gauge 10, KL to the reference policy: level, growth, noise, spikes, sign.

The post's KL lines (0.5 warn, 1.0 stop, per token) come last: KL *growing* and KL *noisy* are read against the
series' own noise and level, so a runaway is caught while it is still below the warn line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .gauge import Gauge, finite
from .keys import Row
from .sequential import Ar1, Cusum, ar1_inflation, arl_for
from .stats import (
    Baseline,
    DiffNoise,
    Ewma,
    NoiseCusum,
    OctaveMean,
    RollingCorrelation,
    RollingSlope,
    RollingWindow,
    poisson_tail,
    robust_z,
)

ACCEL_SE = 2.0
"""``kl-growing`` calls a climb accelerating only where its last 20 rows' slope exceeds the last 40's by this many of
its standard errors (deflated for autocorrelation)."""
NEAR_ZERO_SPREAD = 10.0
"""``kl-near-zero`` needs the KL's robust spread under this many times its ``near_zero`` line as well as its median:
a KL estimate scattered around 0 is an estimator measuring a slowly moving policy, not a collapse (issue #28)."""


TEACHER_MARKS = ("distill", "teacher")
"""A key naming one of these (verl's ``actor/distillation/*``, ``distill_loss``, a custom ``teacher_kl``) says the run
distils from a teacher: its KL term (verl's reference *is* the teacher there) is the distance to that teacher."""
TEACHER_SCAN_ROWS = 10
"""The rows ``to: auto`` reads the keys on before it settles on a KL to the reference."""

_ARL: dict[int, float] = {}
"""``arl_for(warn_sooner)`` by ``warn_sooner``: kl-warn's test reads it on every row."""


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
               "kl_negative_share", "to_teacher")
    defaults = {"warn": 0.5, "stop": 1.0, "for": 3, "clear": 10, "near_zero": 1e-4, "near_zero_rows": 50,
                "negative": -0.01, "spike_z": 10.0, "spike_min": 0.1, "start_rows": 5, "spike_repeat": 3,
                "spike_repeat_rows": 25, "spike_repeat_p": 1e-3, "grow_rows": 20, "grow_t": 4.0, "grow_min": 0.2,
                "grow_accel": 1.3, "grow_accel_max": 3.0, "grow_for": 3, "grow_end": 1.0, "grow_end_keep": 0.9,
                "grow_span_share": 0.125,
                "noisy_ratio": 3.0, "noisy_cv": 0.3, "noisy_negative": 0.2, "noisy_for": 5, "noisy_min": 0.01,
                "noisy_c": 3.0, "noisy_p1": 0.3, "noisy_h": 8.0, "warn_k": 0.5, "warn_clip": 4.0, "to": "auto"}
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
        # what the KL is measured to: "reference" (the initial policy; the post's lines), "teacher" (on-policy
        # distillation), or "" while `to: auto` is still reading the keys
        self.target = "" if self.p["to"] == "auto" else str(self.p["to"])
        self.teacher_key = ""

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
        if not self.target:
            self._read_target(v)
        if self.target == "teacher":
            self._teacher(key, kl)
            return
        d["to_teacher"] = 0.0  # the shipped kl-warn/kl-stop alert rules read it (a missing value would silence them)
        d["kl"] = kl
        e = self.ewma.push(kl)
        d["kl_ewma"] = e
        self.slope.push(row.step, kl)
        d["kl_slope"] = self.slope.slope()
        # a message closure is built only for a rule that holds this row (a quiet rule never reads it)
        above = kl > p["stop"]
        self.check("kl-stop", above, "stop", key, kl,
                   (lambda: f"{key} {kl:.3g} has been above {p['stop']} for {self.held('kl-stop')} logged steps: the "
                    "policy has run away from the reference and reward gains are likely over-optimisation. Stop, then "
                    "raise beta or lower the learning rate and resume from an earlier checkpoint.") if above else "",
                   for_=p["for"], clear=p["clear"])
        above = kl > p["warn"]
        self.check("kl-warn", above, "warn", key, kl,
                   (lambda: f"{key} {kl:.3g} is above {p['warn']} for {self.held('kl-warn')} logged steps: drifting "
                    "far from the reference. Watch whether reward still improves; consider a larger beta.")
                   if above else "",
                   for_=1 if self._past_warn(kl) and above else p["for"], clear=p["clear"])
        below = e < p["negative"]
        self.check("kl-negative", below, "warn", key, kl,
                   (lambda: f"{key} is negative on average ({e:.3g}): the estimator is being fed mismatched "
                    "log-probs (sampling temperature/top-k differ from the training forward pass, or the "
                    "reference model differs).") if below else "", for_=5)
        self._growth(key, kl, e, float(n))
        self._noise(key, kl)
        if len(self.win) >= 10:
            z = robust_z(kl, self.win, floor=1e-6)
            d["kl_z"] = z
            spike = z > p["spike_z"] and kl > p["spike_min"]
            if self.spike_from < 0:
                self.spike_from = n
            rows = self.spike_rows  # ascending: the rows that left the window are at its front
            if spike and (not rows or rows[-1] != n - 1):
                rows.append(n)  # one entry per spike, however many rows it lasts
                self.spikes_seen += 1
            while rows and rows[0] <= n - p["spike_repeat_rows"]:
                del rows[0]
            self.check("kl-spike", spike, "info", key, kl,
                       (lambda: f"{key} spiked to {kl:.3g} ({z:.0f} robust sigmas above its recent median): often "
                        "one batch the model handles very differently from the reference; investigate that batch. One "
                        "spike that is gone the next step is not a trend.") if spike else "", clear=3)
            count = len(rows)
            repeated = count >= p["spike_repeat"] and self._spikes_stand_out(count, n)
            self.check("kl-spike-repeated", repeated, "warn", key, kl,
                       (lambda: f"{key} has spiked {count} times in the last {p['spike_repeat_rows']} logged steps "
                        f"(now {kl:.3g}): the spikes repeat, so the updates are unstable, not one odd batch. Lower "
                        "the learning rate or raise beta.") if repeated else "", clear=p["spike_repeat_rows"] // 5)
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
                       (lambda: f"{key} has stayed ~0 (median {med:.2g}) for {self.rows_seen} logged steps: the "
                        "policy is not moving away from the reference (beta too high, LR too low, or the reference is "
                        "updated with the policy).") if pinned else "", for_=20, clear=10)

    def _read_target(self, v: Mapping[str, float]) -> None:
        """``to: auto``: a KL beside distillation keys is a KL to a teacher; none in the first rows, the reference."""
        self.teacher_key = next((k for k in v if any(m in k.lower() for m in TEACHER_MARKS)), "")
        if self.teacher_key:
            self.target = "teacher"
        elif self.rows_seen >= TEACHER_SCAN_ROWS:
            self.target = "reference"

    def _teacher(self, key: str, kl: float) -> None:
        """A KL to a teacher: large from the first step by design (the student is not the teacher yet) and falling as
        it learns, so the reference's lines (drifting away, high at the start, pinned at 0) mean nothing: it is said
        once (info)."""
        d = self.derived
        d["kl"] = kl
        d["to_teacher"] = 1.0  # read by the shipped alert rules: the reference's lines are not this KL's
        e = self.ewma.push(kl)
        d["kl_ewma"] = e
        why = f"the key {self.teacher_key}" if self.teacher_key else "your configuration (kl: to: teacher)"
        self.note = f"KL to a teacher (on-policy distillation, from {why}), not to the reference"
        above = kl > self.p["warn"]
        self.check("kl-to-teacher", above, "info", key, kl,
                   (lambda: f"{key} {kl:.3g} is a KL to a teacher ({why} says the run distils): it starts high by "
                    "design and should fall as the student learns, so the reference's lines (0.5 warn, 1.0 stop) do "
                    "not apply; what matters is that it falls.") if above
                   else "", clear=10**9)

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
        arl = _ARL.get(self.warn_sooner)
        if arl is None:
            arl = _ARL[self.warn_sooner] = arl_for(self.warn_sooner)
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
                   (lambda: f"{key} is growing ({e:.3g} now, {s1:+.3g} per logged step, trend t={t:.0f}) and "
                    f"{why()}: runaway policy drift, caught before the level line. Raise beta or lower the learning "
                    "rate now; in PPO check that clipping is working.") if growing else "",
                   for_=p["grow_for"], clear=p["clear"])

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
        # and an estimator negative that often from the start (nb >= noisy_negative) goes negative by its nature;
        # the standard error only where the share crossed the line (most rows it is under it)
        noisy_neg = (nb < p["noisy_negative"] and neg >= p["noisy_negative"]
                     and neg >= nb + max(p["noisy_negative"], 3.0 * math.sqrt(
                         max(nb, 0.0) * max(1.0 - nb, 0.0) / max(len(self.negatives), 1))))
        noisy_seq = self.cusum.s > p["noisy_h"]  # rows far outside its usual noise, too many of them lately
        noisy = noisy_cv or noisy_neg or noisy_seq
        self.check("kl-noisy", noisy, "warn", key, kl,
                   (lambda: f"{key} has turned noisy: row-to-row noise {sig:.3g} is {cv:.1f}x its level {level:.3g} "
                    f"(earlier in the run {cb:.2f}x)" + (f", and {neg:.0%} of the recent estimates are negative"
                                                       if neg > 0 else "")
                    + ": unstable optimisation. The learning rate is probably too high for this KL penalty.")
                   if noisy else "",
                   for_=p["noisy_for"], clear=p["clear"])
