"""Gauge 10, KL to the reference policy: level, growth, noise, spikes, sign.

The post's KL lines (0.5 warn, 1.0 stop, per token) come last: KL *growing* and KL *noisy* are read against the
series' own noise and level, so a runaway is caught while it is still below the warn line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .fields import slot_names
from .gauge import Gauge, finite
from .keys import Row
from .rule import INSTRUMENTS, POST, Example, Rule
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
from .streams import after, grpo, ppo, ramp

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
TEACHER_COST_RATIO = 2.0
"""A reference whose log-prob pass costs this many times the policy's own over the same batch (verl's
``timing_s/ref`` vs ``timing_s/old_log_prob``) is a larger model than the policy: with a KL already past the warn line
at the first step it is a teacher, not a copy of the initial policy."""



class TeacherReading:
    """``to: auto``: is the run's KL measured to a teacher (on-policy distillation) or to the reference?

    A key naming a teacher (`TEACHER_MARKS`) in the first rows says so; so does a KL past the warn line at the run's
    first step, before any update, to a reference that costs `TEACHER_COST_RATIO` times the policy to score (a larger
    model: distillation configured through the reference alone names no teacher in its keys). Neither in the first
    `TEACHER_SCAN_ROWS` rows: the reference. The KL gauge judges the KL by it; the length gauge reads a length that
    follows the teacher by it."""

    __slots__ = ("target", "key", "evidence", "warn", "kl_rows")

    def __init__(self, warn: float, target: str = "") -> None:
        self.target = target  # "teacher", "reference", or "" while still reading
        self.key = ""  # the key that named a teacher
        self.evidence = ""  # what said "teacher" without such a key
        self.warn = warn
        self.kl_rows = 0

    def push(self, v: Mapping[str, float], kl: float, step: float, rows_seen: int) -> str:
        """Read one row with a KL (``rows_seen``: the gauge's train rows so far); returns the target so far."""
        if self.target:
            return self.target
        self.kl_rows += 1
        self.key = next((k for k in v if any(m in k.lower() for m in TEACHER_MARKS)), "")
        ref_t, own_t = v.get("ref_logprob_time"), v.get("policy_logprob_time")
        if self.key:
            self.target = "teacher"
        elif (self.kl_rows == 1 and step <= 1 and kl > self.warn and ref_t is not None and own_t is not None
              and finite(ref_t) and finite(own_t) and own_t > 0 and ref_t >= TEACHER_COST_RATIO * own_t):
            self.target = "teacher"
            self.evidence = (f"a KL of {kl:.3g} at step {step:g}, before any update, to a reference that took "
                             f"{ref_t / own_t:.1f}x the policy's time to score the same batch (a larger model)")
        elif rows_seen >= TEACHER_SCAN_ROWS:
            self.target = "reference"
        return self.target

    def why(self) -> str:
        """What says the run distils, for a message."""
        return f"the key {self.key}" if self.key else self.evidence or "your configuration (kl: to: teacher)"

    def state_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in slot_names(self)}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        for k in slot_names(self):
            if k in state:
                setattr(self, k, state[k])


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
                "zero_rows": 10, "negative": -0.01, "spike_z": 10.0, "spike_min": 0.1, "start_rows": 5,
                "spike_repeat": 3,
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
        self.zero_rows = 0  # rows whose KL is exactly 0.0, while every row so far has been (-1 once one was not)
        self.note = ""
        # what the KL is measured to: "reference" (the initial policy; the post's lines), "teacher" (on-policy
        # distillation), or "" while `to: auto` is still reading the first rows
        self.reading = TeacherReading(self.p["warn"], "" if self.p["to"] == "auto" else str(self.p["to"]))

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
        # to a teacher, the reference's lines (warn, stop, high at the start, pinned at 0) do not apply; the rules
        # read against the KL's own course do: a student running away from its teacher is as much a warning as a
        # policy running away from its reference
        if self.reading.push(v, kl, row.step, self.rows_seen) == "teacher":
            e = _teacher(self, key, kl)
            self.slope.push(row.step, kl)
            d["kl_slope"] = self.slope.slope()
            self._relative(key, kl, e, n)
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
                   for_=1 if _past_warn(self, kl) and above else p["for"], clear=p["clear"])
        self._relative(key, kl, e, n)
        self.start.push(kl)
        if self.start.ready and not self.start_checked:
            self.start_checked = True
            s = self.start.value
            self.check("kl-high-at-start", s > p["warn"], "warn", key, s,
                       lambda: f"{key} is already {s:.3g} in the first {p['start_rows']} logged steps, before the "
                       "policy has had time to move: the reference model is not the initial policy, or "
                       "generation settings (temperature, chat template) differ between sampling and scoring.")
        if _exactly_zero(self, key, kl):
            return  # a placeholder, not a measurement: no rule below reads it
        if self.rows_seen >= p["near_zero_rows"]:
            med, spread = self.win.robust()
            # pinned at 0, not an estimator scattered around it: a per-sequence estimate that goes negative half the
            # time (RLOO, PPO) has a median near 0 while the policy moves slowly; its spread says it is measuring
            pinned = abs(med) < p["near_zero"] and spread < NEAR_ZERO_SPREAD * p["near_zero"]
            self.check("kl-near-zero", pinned, "warn", key, kl,
                       (lambda: f"{key} has stayed ~0 (median {med:.2g}) for {self.rows_seen} logged steps: the "
                        "policy is not moving away from the reference (beta too high, LR too low, or the reference is "
                        "updated with the policy).") if pinned else "", for_=20, clear=10)

    def _relative(self, key: str, kl: float, e: float, n: int) -> None:
        """The rules read against the KL's own course, whatever it is measured to: negative on average, growing,
        noisy, spiking."""
        p = self.p
        d = self.derived
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
                        "one batch the model handles very differently from the reference; "
                        f"{self.fix('kl-spike')}. One spike that is gone the next step is not a trend.")
                       if spike else "", clear=3)
            count = len(rows)
            repeated = count >= p["spike_repeat"] and _spikes_stand_out(self, count, n)
            self.check("kl-spike-repeated", repeated, "warn", key, kl,
                       (lambda: f"{key} has spiked {count} times in the last {p['spike_repeat_rows']} logged steps "
                        f"(now {kl:.3g}): the spikes repeat, so the updates are unstable, not one odd batch. "
                        + self.fix("kl-spike-repeated", sentence=True)) if repeated else "",
                       clear=p["spike_repeat_rows"] // 5)
        self.win.push(kl)

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

        self.check("kl-growing", growing, "warn", key, kl,
                   (lambda: f"{key} is growing ({e:.3g} now, {s1:+.3g} per logged step, trend t={t:.0f}) and "
                    + _growth_why(p['warn'], soon, accel, w, ahead, left, s_end, self.span.size, line_end)
                    + ": runaway policy "
                    "drift, caught before the level line. Raise beta or lower the learning "
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



def _teacher(g: KLGauge, key: str, kl: float) -> float:
    """A KL to a teacher: large from the first step by design (the student is not the teacher yet) and falling as
    it learns, so the reference's lines (drifting away, high at the start, pinned at 0) mean nothing: it is said
    once (info)."""
    d = g.derived
    d["kl"] = kl
    d["to_teacher"] = 1.0  # read by the shipped alert rules: the reference's lines are not this KL's
    e = g.ewma.push(kl)
    d["kl_ewma"] = e
    why = g.reading.why()
    g.note = f"KL to a teacher (on-policy distillation, from {why}), not to the reference"
    above = kl > g.p["warn"]
    g.check("kl-to-teacher", above, "info", key, kl,
               (lambda: f"{key} {kl:.3g} is a KL to a teacher ({why} says the run distils): it starts high by "
                "design and should fall as the student learns, so the reference's lines (0.5 warn, 1.0 stop) do "
                "not apply; what matters is that it falls.") if above
               else "", clear=10**9)
    # the teacher's stop line, read from where the student started: twice as far from the teacher as the untrained
    # student was (the reference's stop is twice its warn line) is distillation going backwards
    p = g.p
    g.start.push(kl)
    s0 = g.start.value
    ratio = p["stop"] / p["warn"]
    away = s0 == s0 and s0 > 0 and e > ratio * s0
    g.check("kl-teacher-diverging", away, "stop", key, kl,
               (lambda: f"{key} {e:.3g} is {e / s0:.1f}x its start ({s0:.3g}), a KL to the teacher: the student is "
                "moving away from the model it distils, not towards it. "
                + g.fix("kl-teacher-diverging", sentence=True)) if away else "",
               for_=p["for"], clear=p["clear"])
    return e


def _exactly_zero(g: KLGauge, key: str, kl: float) -> bool:
    """A KL of exactly 0.0 on every row so far: the KL term is switched off (beta = 0, ``use_kl_loss: false``),
    the number a placeholder. A measured KL is never exactly 0 once the policy has taken a step (an estimate over
    sampled tokens of a moving policy carries rounding at least), so this is not a policy that does not move; a
    policy that is not updated at all is the gradient and learning-rate gauges' finding."""
    if g.zero_rows < 0 or kl != 0.0:
        g.zero_rows = -1
        return False
    g.zero_rows += 1
    rows = g.p["zero_rows"]
    if g.zero_rows >= rows:
        g.note = "the KL term is switched off: exactly 0 on every row (a placeholder)"
    g.check("kl-term-off", g.zero_rows >= rows, "info", key, kl,
            lambda: f"{key} has been exactly 0 on all {g.zero_rows} logged steps: the KL term is switched "
            "off (beta = 0, use_kl_loss false, or kl_ctrl off), so the logged value is a placeholder, not a "
            "measurement: nothing holds the policy near the reference and the KL rules have nothing to read. "
            "Intended for many GRPO recipes; if you meant to regularise, set beta / kl_coef above 0.",
            clear=10**9)
    return True


def _spikes_stand_out(g: KLGauge, count: int, n: int) -> bool:
    """More spikes in the window than the run's own spike rate before it explains (Poisson tail below
    ``spike_repeat_p``): heavy-tailed KL estimates spike now and then all run long, and over a long run a few
    land close together by chance."""
    p = g.p
    w = p["spike_repeat_rows"]
    before = max(g.spikes_seen - count, 0)  # a checkpoint from before the rate was kept has none
    rows_before = max(n - w - g.spike_from, 0)
    lam = w * (before + 0.5) / (rows_before + 100.0)  # half a spike per 100 rows a priori
    return bool(poisson_tail(count, lam) < p["spike_repeat_p"])


def _past_warn(g: KLGauge, kl: float) -> bool:
    """The warn line's sequential evidence (issue #28): a one-sided CUSUM of (kl - warn) / noise (the robust
    row-to-row noise, prewhitened by its AR(1) coefficient from the warm-up), each row clipped at ``warn_clip``
    sigmas so that one outlier (either way) cannot decide, its threshold from the ARL0 budget
    (``arl_for(warn_sooner)``). True once it has crossed: a KL far past the line is warned on its second row,
    not its third; the ``for``-row hold still decides where the noise is not known yet or the CUSUM is slower."""
    p = g.p
    arl = _ARL.get(g.warn_sooner)
    if arl is None:
        arl = _ARL[g.warn_sooner] = arl_for(g.warn_sooner)
    if g.warn_cusum.arl != arl:
        g.warn_cusum = Cusum(k=p["warn_k"], arl=arl)
    sd = g.noise.cached_sigma()  # as kl-noisy last read it (from row 20): reading it again moves nothing
    if not sd > 0:
        return False
    if g.warn_cusum.s <= 0.0:  # rho is read between excursions: a jump must not teach the test its noise
        g.warn_rho = g.ar.rho
    c = p["warn_clip"]
    return g.warn_cusum.push(min(max((kl - p["warn"]) / sd, -c), c), g.warn_rho)


def _growth_why(warn: float, soon: bool, accel: bool, w: int, ahead: float, left: float, s_end: float,
                span: int, line_end: float) -> str:
    """Why ``kl-growing`` fired: on course to pass the warn line within a window, or by the end of the run (built
    only when the rule fires: the growth rule runs on every row past the warm-up)."""
    if soon:
        return (f"{'accelerating and ' if accel else ''}on course to pass {warn} within about {w} logged "
                "steps")
    when = ("by the end of the run" if ahead >= left
            else f"within {ahead:.0f} logged steps, as long as it has run so far")
    return (f"still climbing ({s_end:+.3g} per logged step over the last {span}), on course to pass "
            f"{line_end:.3g} {when} (about {left:.0f} logged steps left)")


_KL_LINES = "KL > 0.5 is a warning and KL > 1.0 is a stop sign"

#: The KL gauge's rules (``core/catalog.py`` collects every module's).
RULES: tuple[Rule, ...] = (
    Rule(
        "kl", "kl-warn", severities=("warn",),
        reads="kl (GRPO, per token) / objective/kl (PPO, per sequence)",
        test="level above a line, held `for` rows, or sooner where a CUSUM of (kl - line) in the row noise (AR(1) "
             "prewhitened, rows clipped at `warn_clip` sigmas, reference `warn_k`) crosses its ARL0-budget threshold",
        params=("warn", "for", "warn_k", "warn_clip"),
        means="the policy drifts far from the reference",
        fix="watch the reward; consider a larger beta",
        seed=_KL_LINES, seed_source=POST,
        origin="PPO/Online DPO log a per-sequence sum: their lines are per family",
        budgeted=True,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.05 + 0.6 * ramp(i, 60, 20) + 0.005 * g.normal()),
            lambda i, g: grpo(i, g, kl=0.05 + 0.005 * g.normal()), 100, 60, 80, "kl"),
    ),
    Rule(
        "kl", "kl-stop", severities=("stop",),
        reads="kl / objective/kl",
        test="level above a line, held `for` rows (stop)",
        params=("stop", "for"),
        means="the policy ran away from the reference",
        fix="stop; raise beta or lower the LR; resume earlier",
        seed=_KL_LINES, seed_source=POST,
        origin="per family, as kl-warn",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.05 + 1.2 * ramp(i, 60, 20) + 0.005 * g.normal()),
            lambda i, g: grpo(i, g, kl=0.05 + 0.005 * g.normal()), 100, 60, 80, "kl"),
    ),
    Rule(
        "kl", "kl-negative", severities=("warn",),
        reads="EWMA of the KL estimate",
        test="below `negative`, held 5 rows",
        params=("negative",),
        means="the estimator gets mismatched log-probs",
        fix="align sampling and training settings; check the reference",
        seed="k3 is never negative", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.02 - 0.1 * after(i, 60) + 0.005 * g.normal()),
            lambda i, g: grpo(i, g, kl=0.02 + 0.005 * g.normal()), 100, 60, 66, "kl"),
    ),
    Rule(
        "kl", "kl-spike", severities=("info",),
        reads="KL",
        test="robust z above `spike_z` vs the window, and above `spike_min` (info)",
        params=("spike_z", "spike_min"),
        means="one batch the model handles very differently",
        fix="investigate that batch",
        seed="KL suddenly spiking: Often indicates a batch of data that the model handles very differently from the "
             "reference.",
        seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal() + (0.8 if i == 60 else 0.0)),
            lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal()), 100, 60, 60, "kl"),
    ),
    Rule(
        "kl", "kl-spike-repeated", severities=("warn",),
        reads="KL spikes within `spike_repeat_rows`",
        test="`spike_repeat` spikes and a Poisson tail below `spike_repeat_p` vs the run's own rate",
        params=("spike_repeat", "spike_repeat_rows", "spike_repeat_p"),
        means="the updates are unstable",
        fix="lower the learning rate or raise beta",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal() + (0.8 if i in (60, 70, 80) else 0.0)),
            lambda i, g: grpo(i, g, kl=0.05 + 0.003 * g.normal()), 100, 60, 80, "kl"),
    ),
    Rule(
        "kl", "kl-high-at-start", severities=("warn",),
        reads="mean KL of the first `start_rows` rows",
        test="above the warn line once",
        params=("start_rows", "warn"),
        means="the reference is not the initial policy, or sampling and scoring differ",
        fix="check the reference model, temperature and chat template",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=1.0 + 0.05 * g.normal()),
            lambda i, g: grpo(i, g, kl=0.002 * i + 0.002 * g.normal()), 100, 1, 5, "kl"),
    ),
    Rule(
        "kl", "kl-to-teacher", severities=("info",),
        reads="kl / verl actor/kl_loss beside a key naming distill or teacher (verl actor/distillation/*, "
              "distill_loss, teacher_kl) in the first rows; or past `warn` at step 1, before any update, to a "
              "reference whose log-prob pass costs 2x the policy's (verl timing_s/ref vs timing_s/old_log_prob: a "
              "larger model); or `to: teacher`",
        test="above the warn line (info, once); kl-warn, kl-stop, kl-high-at-start and kl-near-zero do not apply",
        params=("to", "warn"),
        means="the KL is to a teacher (on-policy distillation): high from the start by design, it falls as the "
              "student learns",
        fix="nothing; watch that it falls",
        origin="the post's lines measure drift from the reference (the initial policy); a teacher is another model",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g, kl=0.1 + 0.5 * math.exp(-i / 40) + 0.02 * g.normal()),
                                  "distill/teacher_mass": 0.8},
            lambda i, g: grpo(i, g, kl=0.002 * i + 0.002 * g.normal()), 100, 1, 1, "kl"),
    ),
    Rule(
        "kl", "kl-teacher-diverging", severities=("stop",),
        reads="a KL to a teacher (kl-to-teacher): its EWMA vs its first `start_rows` rows",
        test="above `stop` / `warn` (2x) times its start, held `for`",
        params=("stop", "warn", "start_rows", "for"),
        means="the student is moving away from the teacher it distils",
        fix="stop; check the learning rate, the reward's weight against the KL term and the samples",
        origin="the reference's stop line is twice its warn line; a teacher's KL is read from where the student "
               "started",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g, kl=0.5 + 1.5 * ramp(i, 60, 40) + 0.02 * g.normal()),
                                  "distill/teacher_mass": 0.8},
            lambda i, g: {**grpo(i, g, kl=0.1 + 0.5 * math.exp(-i / 40) + 0.02 * g.normal()),
                          "distill/teacher_mass": 0.8},
            120, 60, 100, "kl"),
    ),
    Rule(
        "kl", "kl-near-zero", severities=("warn",),
        reads="median and spread of KL over the window after `near_zero_rows` rows",
        test="|median| below `near_zero` and its spread pinned too (under 10x it: not an estimate scattered around "
             "0), held 20; a KL exactly 0.0 on every row is kl-term-off instead",
        params=("near_zero", "near_zero_rows"),
        means="the policy is not moving (beta too high, LR too low)",
        fix="lower beta or raise the learning rate",
        seed="KL near zero throughout training: Your KL penalty (beta) is too high.", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=1e-6 * abs(g.normal())),
            lambda i, g: grpo(i, g, kl=0.02 + 0.005 * g.normal()), 100, 1, 70, "kl"),
    ),
    Rule(
        "kl", "kl-term-off", severities=("info",),
        reads="KL on every row so far",
        test="exactly 0.0 on each of the first `zero_rows` rows and every row since (info, once); the other KL rules "
             "do not read a placeholder",
        params=("zero_rows",),
        means="the KL term is switched off (beta = 0, use_kl_loss false): the logged 0 is a placeholder, not a policy "
              "that does not move",
        fix="nothing if intended; set beta / kl_coef above 0 to regularise",
        origin="issue 47: a healthy verl GRPO run without a KL term logs 0.0 on every row, and kl-near-zero read it as "
               "a policy that does not move; a measured KL of a moving policy is never exactly 0",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.0), lambda i, g: grpo(i, g, kl=0.02 + 0.005 * g.normal()),
            100, 1, 12, "kl"),
    ),
    Rule(
        "kl", "kl-growing", severities=("warn",),
        reads="KL slope, acceleration and projection vs its own noise",
        test="slope t (deflated for AR(1) noise) above `grow_t`, projected past the warn line within a window (by "
             "acceleration only past 2 standard errors) or by the run's end; held",
        params=("grow_t", "grow_min", "grow_accel", "grow_for", "grow_end"),
        means="runaway policy drift, before the line",
        fix="raise beta or lower the learning rate",
        seed="KL growing without bound: Runaway policy drift.", seed_source=POST,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, kl=0.03 * math.exp(max(0, i - 100) / 25) + 0.003 * g.normal()),
            lambda i, g: grpo(i, g, kl=0.02 + 0.04 * i / 200 + 0.004 * g.normal()), 200, 100, 160, "kl"),
    ),
    Rule(
        "kl", "kl-noisy", severities=("warn",),
        reads="KL row-to-row noise / its median level; share of negative estimates; a noise CUSUM",
        test="noise ratio above `noisy_cv` and `noisy_ratio` x earlier (not for an estimate scattered around 0), a "
             "negative share rising 3 binomial errors from a rare start, or the CUSUM past `noisy_h`; held",
        params=("noisy_cv", "noisy_ratio", "noisy_negative", "noisy_h", "noisy_for"),
        means="unstable optimisation",
        fix="lower the learning rate for this KL penalty",
        seed="KL noisy with high variance: Unstable optimisation.", seed_source=POST,
        example=Example(
            "ppo", lambda i, g: ppo(i, g, kl_noise=0.5 + 4.5 * ramp(i, 100, 100)), ppo, 200, 100, 160, "objective/kl"),
    ),
)
