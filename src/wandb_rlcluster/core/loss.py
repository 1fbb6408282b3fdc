"""Gauge 1: the loss landscape (level, trend, spikes, oscillation, volatility)."""

from __future__ import annotations

import math

from .gauge import finite
from .keys import Row
from .nonfinite import LOWER_LR, NAN, NonFiniteGauge, NonFiniteTracker
from .rule import INSTRUMENTS, Example, Rule
from .sequential import Ar1, Cusum, ar1_inflation
from .stats import (
    Ewma,
    OctaveMean,
    PeriodicFit,
    RollingSlope,
    RollingWindow,
    step_skew,
)
from .streams import after, ramp, sft

Q75_ABS_NORMAL = 1.1503
"""The upper quartile of |z| for a standard normal z."""

# Families whose "loss" is a surrogate or an RL objective: near zero, signed,
# and free to rise while the model improves. A loss-spike rule means nothing there.
SURROGATE_LOSS_FAMILIES = frozenset({"grpo", "ppo", "online_dpo"})


class LossGauge(NonFiniteGauge):
    """Gauge 1 — loss landscape: level, trend, spikes and volatility.

    A spike must hold ``spike_for`` logged rows to be a warning; a single row, however high, that is
    gone the next row is ``info`` (a bad batch), unless such rows repeat (``loss-spike-repeated``).
    ``loss-oscillating`` is convergence oscillation read from the train loss: its swing around a
    9-row running median (robust to spikes and to the drop at an epoch boundary) grown well past the
    swing over the run's previous octave, rows n/4 .. n/2 (a falling loss's relative noise grows slowly;
    an oscillation sets in within a few periods). The reference is read once it holds 16 swings, fewer in a
    run planned for under 100 logged rows (``Gauge.rows``). It also fires on the swing's period, which needs no
    clean early reference (an oscillation that sets in a third of the way into a short run has none): in the last
    ``osc_window`` rows (a third of a shorter run, at least 20) one sinusoid of 3.5 .. ``osc_window``/2.5 rows
    explains ``osc_share`` of the log loss's detrended variance, at an amplitude of ``osc_amp`` or more (the log
    swing: 0.12 is about +-12 %). Batch noise spreads over every period; a repeating swing does not. Read every
    ``osc_every`` train rows (a reading is ~40 dot products; it holds in between, and the rule's hold spans two).
    Two healthy shapes repeat too and are not read as a swing: the drop at each epoch boundary of a multi-epoch run
    (a staircase: a period within 15 % of the rows per epoch, where the log has TRL's ``epoch``), and any swing whose
    row-to-row steps are skewed past ``osc_skew`` (down in one step, back in a slow drift: a staircase without an
    epoch counter). Data served in repeating blocks of sources also swings periodically, and is reported: the loss
    does oscillate, though the learning rate is then not the cause.
    """

    id = "loss"
    title = "Loss landscape"
    inputs = ("loss", "eval_loss")
    outputs = ("loss", "loss_ewma", "loss_trend", "spike_ratio", "volatility_ratio", "eval_loss", "oscillation",
               "loss_shift_z")
    defaults = {"window": 20, "spike_ratio": 2.0, "spike_ratio_now": 5.0, "spike_for": 2, "spike_min_rows": 10,
                "nonfinite_for": 3, "nonfinite_window": 50, "var_ratio": 4.0, "spike_repeat": 3,
                "spike_repeat_rows": 50, "osc_ratio": 2.2, "osc_min": 0.12, "osc_for": 5, "osc_window": 32,
                "osc_share": 0.65, "osc_amp": 0.12, "osc_every": 3, "osc_grow": 2.0,
                "osc_skew": 1.0, "zero_for": 5, "shift_k": 1.5, "shift_clip": 2.0, "shift_floor": 0.15,
                "shift_level": 9,
                "shift_arl": 20000.0}

    def setup(self) -> None:
        self.nonfinite_rows = {}  # NonFiniteTracker: the row of the last NaN/Inf, per metric
        self.hist = RollingWindow(self.p["window"])
        self.recent = RollingWindow(5)
        self.ewma = Ewma(0.1)
        self.trend = RollingSlope(50)
        self.long_var = RollingWindow(5 * self.p["window"])
        self.spike_rows: list[int] = []
        self.local = RollingWindow(9)
        self.swing = RollingWindow(20)
        self.swing_ref = OctaveMean()  # the swing earlier in the run: a falling loss's relative noise grows slowly
        self.swing_warmup = 16  # swings in that reference before the rule reads it
        self.period = PeriodicFit(self.p["osc_window"])  # the log loss's last rows, for the swing's period
        self.periodic = False  # the last reading found a repeating swing (it holds until the next reading)
        self.amp_ref = OctaveMean()  # the fitted swing's amplitude over the previous octave of readings
        self.period_rows = math.nan  # its period, in logged rows
        self.period_amp = 0.0  # its amplitude in log loss
        self.period_pushes = 0  # train rows read (eval rows must not set the reading's cadence)
        self.epoch_rows = math.nan  # logged train rows per epoch, where the log has an epoch counter
        self.level = RollingWindow(self.p["shift_level"])  # the loss before any upward excursion: the shift's reference
        self.steps = RollingWindow(self.p["window"])  # |row-to-row change| of the loss: its noise, free of the trend
        self.shift = Cusum(self.p["shift_k"], self.budget(self.p["shift_arl"]))
        self.ar = Ar1(prior=20.0, clip=4.0)  # the loss noise's AR(1) coefficient, read on the warm-up
        self.shift_prev = math.nan  # the previous train loss
        self.zero_run = 0  # train rows in a row whose loss is exactly 0.0
        self.nonzero_seen = False  # a train loss other than exactly 0 seen

    def plan_long(self) -> None:
        w = min(int(self.p["osc_window"]), max(20, int(self.planned_rows) // 3))
        if w != self.period.size:
            self.period = PeriodicFit(w)

    def plan_short(self) -> None:
        # a 50-row run would spend 45 rows filling the median, the swing window and this warm-up
        self.swing_warmup = self.rows(16)

    def observe(self, row: Row) -> None:
        loss = row.values.get("loss")
        if loss is None or row.kind != "train":
            ev = row.values.get("eval_loss")
            if ev is not None and finite(ev):
                self.derived["eval_loss"] = ev
            return
        if NonFiniteTracker.check(self, "loss", loss, "loss"):
            return
        d = self.derived
        d["loss"] = loss
        d["loss_ewma"] = self.ewma.push(loss)
        self.trend.push(row.step, loss)
        d["loss_trend"] = self.trend.slope()
        if self.family in SURROGATE_LOSS_FAMILIES:
            return  # a surrogate's level says nothing: no spike or volatility rules, nothing to keep
        if self._exactly_zero(loss):
            return  # not a measured loss: no level, spike or swing to read in it
        spiky = self._spikes(loss)
        self._shift_up(loss)
        self._oscillation(loss, row.values.get("epoch"))
        if not spiky:  # keep the spike out of the reference it is judged against
            self.hist.push(loss)
        self.recent.push(loss)
        self.long_var.push(loss)
        if self.long_var.full:
            vr = self.recent.var() / max(self.long_var.var(), 1e-12)
            d["volatility_ratio"] = vr
            self.check(
                "loss-volatile", vr > self.p["var_ratio"] and self.recent.full, "info", "loss", loss,
                "loss variance over the last 5 steps is far above its longer-run level: training is "
                "getting noisier.",
                for_=3,
            )


    def _spikes(self, loss: float) -> bool:
        """The loss against its running mean: a spike held ``spike_for`` rows, a single huge row, repeated huge
        rows; whether this row spiked (it stays out of the reference)."""
        d = self.derived
        ref = self.hist.mean()
        spiky = False
        n = self.rows_seen
        # judge against a half-filled window too: a spike in the first 20 rows of a short run is still a spike
        if len(self.hist) >= self.p["spike_min_rows"] and ref > 1e-3:
            ratio = loss / ref
            d["spike_ratio"] = ratio
            spiky = ratio > self.p["spike_ratio"]
            huge = ratio > self.p["spike_ratio_now"]
            self.check(
                "loss-spike", spiky, "warn", "loss", loss,
                lambda: f"loss {loss:.4g} is {ratio:.1f}x its running mean {ref:.4g} for {self.p['spike_for']} logged "
                "steps: a spike (bad batch, LR too high, or data-order problem). Check grad_norm at the same steps.",
                for_=self.p["spike_for"], clear=3,
            )
            if huge and (not self.spike_rows or self.spike_rows[-1] != n - 1):
                self.spike_rows.append(n)
            self.spike_rows = [r for r in self.spike_rows if r > n - self.p["spike_repeat_rows"]]
            self.check(
                "loss-spike-single", huge, "info", "loss", loss,
                lambda: f"loss {loss:.4g} jumped to {ratio:.1f}x its running mean {ref:.4g} at step {self.step}: "
                "one bad batch if it is gone the next step; a warning if it stays or repeats.", clear=3,
            )
            count = len(self.spike_rows)
            self.check(
                "loss-spike-repeated", count >= self.p["spike_repeat"], "warn", "loss", loss,
                lambda: f"the loss has jumped past {self.p['spike_ratio_now']:.0f}x its running mean {count} times "
                f"in the last {self.p['spike_repeat_rows']} logged steps: not one bad batch but unstable training. "
                + self.fix("loss-spike-repeated", sentence=True), clear=10,
            )
        return spiky

    def _exactly_zero(self, loss: float) -> bool:
        """A supervised or preference loss of exactly 0.0 is not a model that learned everything (a cross-entropy
        over real tokens is never exactly 0): no token counts toward it. From the first row, nothing is being
        learned (every label masked: a completion-only collator whose template never matches, prompts past
        max_length); after rows that were not 0, the loss broke at that step."""
        if loss != 0.0:
            self.zero_run = 0
            self.nonzero_seen = True
            return False
        self.zero_run += 1
        held = self.zero_run >= self.p["zero_for"]
        start = not self.nonzero_seen
        self.check("loss-zero", held and start, "stop", "loss", loss,
                   lambda: f"the loss has been exactly 0 on every logged step since the first ({self.zero_run} so "
                   "far): nothing is being learned. No token counts toward it: every label is masked (-100), e.g. a "
                   "completion-only collator whose response template never matches, or prompts longer than "
                   "max_length. " + self.fix("loss-zero", sentence=True), clear=1)
        self.check("loss-went-zero", held and not start, "warn", "loss", loss,
                   lambda: f"the loss has been exactly 0 for the last {self.zero_run} logged steps, after steps "
                   "where it was not: the loss broke here (labels masked from this point, empty batches, or a loss "
                   "scaled to 0), not a model that learned everything. "
                   + self.fix("loss-went-zero", sentence=True), clear=1)
        return True

    def _step_noise(self) -> float:
        """The loss's row noise from its row-to-row changes: their upper quartile, scaled to a sigma (Gaussian:
        q75 |x_t - x_t-1| = 1.15 sigma sqrt 2). A quartile rather than the median: a heavy-tailed batch loss
        (a mixture of easy and hard batches) is wider than its median change says."""
        d = sorted(self.steps.values())
        return d[(3 * len(d)) // 4] / (Q75_ABS_NORMAL * math.sqrt(2.0)) if d else 0.0

    def _shift_up(self, loss: float) -> None:
        """A sudden lasting rise of the loss (a corrupted shard, a bad data source, a learning-rate jump): Page's
        CUSUM of the row's z against the median of the loss before the rise, its threshold from the ARL0 budget.
        The noise scale comes from the row-to-row changes (a falling loss's spread around its median is mostly
        trend), floored at ``shift_floor`` of the level: a rise of a few per cent on a very smooth loss is not a
        data fault. A falling loss only pushes the chart down; one bad batch adds at most ``shift_clip`` and is gone
        the next row, so a large jump must hold a row or two."""
        ref = self.level
        z = 0.0
        if len(self.steps) >= self.p["spike_min_rows"]:
            med = ref.median()
            # the changes understate a correlated noise by sqrt(1 - rho) (AR(1), rho read on the warm-up), and a
            # CUSUM of correlated rows drifts as if each counted alone: each row's z is read in the noise's own
            # sigma and deflated by its AR(1) inflation (a sum of n such rows varies like n / inflation^2 free ones)
            rho = self.ar.value
            sigma = max(self._step_noise() / math.sqrt(1.0 - rho), ref.robust()[1], self.p["shift_floor"] * abs(med),
                        1e-12)
            z = min((loss - med) / sigma / ar1_inflation(rho), self.p["shift_clip"])
            self.derived["loss_shift_z"] = z
        alarm = self.shift.push(z)
        self.check(
            "loss-shift-up", alarm, "warn", "loss", loss,
            lambda: f"the loss rose to {loss:.4g} from a level of {ref.median():.4g} and has stayed up for "
            f"{self.shift.n - self.shift.since + 1} logged steps: not one bad batch but a lasting jump (corrupted or "
            "mislabelled data, a new data source, a learning-rate jump). Check the data loader and the learning rate "
            "at these steps.",
            clear=3,
        )
        if self.shift_prev == self.shift_prev:  # every row's change: its median is the noise, a jump or two aside
            self.steps.push(abs(loss - self.shift_prev))
        self.ar.push(loss)
        self.shift_prev = loss
        if self.shift.s <= 0.0:  # keep the excursion out of the level it is judged against
            ref.push(loss)

    def _oscillation(self, loss: float, epoch: float | None) -> None:
        """The loss swinging around its level (convergence oscillation): against its own early swing, or by its
        period."""
        p = self.p
        d = self.derived
        periodic = self._period(loss, epoch)
        grown = False
        msg = ""
        self.local.push(loss)
        if self.local.full:
            med = self.local.median()
            self.swing.push(loss - med)
            if self.swing.full:
                # in loss units against its own earlier swing (a loss converging to its floor gets relatively
                # noisier, not absolutely), and at least osc_min of the current level
                sw = self.swing.robust()[1]
                rel = sw / max(abs(med), 1e-12)
                d["oscillation"] = rel
                base = self.swing_ref.value
                self.swing_ref.push(sw)
                grown = (base == base and self.swing_ref.n >= self.swing_warmup and rel >= p["osc_min"]
                         and sw >= p["osc_ratio"] * base)
                if grown:
                    msg = (f"the loss swings {rel:.0%} around its running level, {sw / max(base, 1e-12):.1f}x its "
                           "swing earlier in the run")
        if not grown and periodic:
            a, per = self.period_amp, self.period_rows
            every = f"{per:.3g} logged rows" + (f" (~{per * self.step / self.period_pushes:.0f} steps)"
                                                 if self.step > self.period_pushes else "")
            msg = (f"the loss swings from {math.expm1(-a):+.0%} to {math.expm1(a):+.0%} around its trend (the fitted "
                   f"swing so far), repeating every {every}")
        self.check("loss-oscillating", grown or periodic, "warn", "loss", loss,
                   lambda: f"{msg}: it oscillates instead of converging (learning rate too high for this stage). "
                   + self.fix("loss-oscillating", sentence=True), for_=p["osc_for"], clear=10)

    def _period(self, loss: float, epoch: float | None) -> bool:
        """The swing's period: a sinusoid that explains most of the last rows' detrended log loss."""
        if not loss > 0.0:  # a hinge or shifted loss at or below 0: no log, no reading
            self.period.clear()
            self.periodic = False
            return False
        self.period.push(math.log(loss))
        self.period_pushes += 1
        if epoch is not None and finite(epoch) and epoch > 0:
            self.epoch_rows = self.period_pushes / epoch
        if self.period.full and not self.period_pushes % max(1, int(self.p["osc_every"])):  # the last reading holds
            share, amp, per = self.period.compute(self.p["osc_amp"])
            # a swing that has been this size since the first readings is the data's own rhythm (band-limited noise:
            # a data order, a cyclic sampler), not a learning rate gone too high, which sets a swing in and grows it
            base = self.amp_ref.value
            self.amp_ref.push(amp)
            found = (share >= self.p["osc_share"] and amp >= self.p["osc_amp"] and base == base
                     and amp >= self.p["osc_grow"] * base)
            # not an oscillation: the drop at each epoch boundary of a multi-epoch run (a staircase, its period the
            # epoch's) or any swing that goes one way in a step and back in a slow drift
            epoch = self.epoch_rows
            if found and epoch == epoch and abs(per - epoch) <= max(1.0, 0.15 * epoch):
                found = False
            if found and abs(step_skew(self.period.buf)) > self.p["osc_skew"]:
                found = False
            self.periodic = found
            self.period_rows, self.period_amp = per, amp
        return self.periodic



#: The loss gauge's rules (``core/catalog.py`` collects every module's).
LOSS_RULES: tuple[Rule, ...] = (
    Rule(
        "loss", "loss-nonfinite", severities=("info",),
        reads="loss",
        test="any NaN/Inf row (info: one isolated row is a skipped fp16 loss-scale step)",
        means="the loss is NaN or infinite on this row",
        fix="nothing for one row; if it repeats, see loss-nonfinite-repeated",
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=NAN if i == 60 else None), sft, 100, 60, 60, "loss"),
    ),
    Rule(
        "loss", "loss-nonfinite-repeated", severities=("warn",),
        reads="loss, and the row of its last NaN/Inf",
        test="a second NaN/Inf within `nonfinite_window` logged rows of the last",
        params=("nonfinite_window",),
        means="more than a skipped loss-scale step: the run is heading for divergence",
        fix="lower the learning rate or enable gradient clipping; resume from the last good checkpoint if it goes on",
        # two NaN losses 20 rows apart; the healthy run has two isolated fp16 skipped steps 60 rows apart
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=NAN if i in (40, 60) else None),
            lambda i, g: sft(i, g, loss=NAN if i in (10, 70) else None), 100, 60, 60, "loss"),
    ),
    Rule(
        "loss", "loss-nonfinite-persistent", severities=("stop",),
        reads="loss",
        test="NaN/Inf held `nonfinite_for` rows",
        params=("nonfinite_for",),
        means="the loss stays NaN/Inf: the weights are probably corrupted",
        fix=LOWER_LR,
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=NAN if i >= 60 else None), sft, 100, 60, 62, "loss"),
    ),
    Rule(
        "loss", "loss-zero", severities=("stop",),
        reads="loss (not for RL surrogate losses, which are 0 by construction on-policy)",
        test="exactly 0.0 on every row from the first, held `zero_for` rows (stop)",
        params=("zero_for",),
        means="nothing is being learned: no token counts toward the loss (every label masked)",
        fix="print one batch's labels: a completion-only collator's response template must match the tokenised "
            "prompt, and prompts must fit max_length",
        origin="issue 47: an SFT run whose loss was exactly 0.0 at every step (all labels masked) was 'OK'",
        example=Example("sft", lambda i, g: sft(i, g, loss=0.0), sft, 100, 1, 6, "loss"),
    ),
    Rule(
        "loss", "loss-went-zero", severities=("warn",),
        reads="loss (not for RL surrogate losses)",
        test="exactly 0.0 held `zero_for` rows after rows that were not",
        params=("zero_for",),
        means="the loss broke at that step: labels masked from there, empty batches, a loss scaled to 0",
        fix="check the batches and the data collator at that step",
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=0.0 if i >= 60 else None), sft, 100, 60, 65, "loss"),
    ),
    Rule(
        "loss", "loss-spike", severities=("warn",),
        reads="loss / mean of the last `window` non-spike rows (not for RL surrogate losses)",
        test="level ratio above a line, held `spike_for` rows",
        params=("spike_ratio", "spike_for", "window"),
        means="the loss stays well above its running mean: a bad batch, LR too high, or a data-order problem",
        fix="check grad_norm at the same steps; lower the learning rate if it repeats",
        seed="spike ratio > 2.0", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=3.5 if 60 <= i < 66 else None), sft, 100, 60, 61, "loss"),
    ),
    Rule(
        "loss", "loss-spike-single", severities=("info",),
        reads="loss / running mean",
        test="one row past `spike_ratio_now` (info)",
        params=("spike_ratio_now",),
        means="one batch the model handles badly",
        fix="nothing unless it repeats",
        seed="spike ratio > 2.0", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=9.0 if i == 60 else None), sft, 100, 60, 60, "loss"),
    ),
    Rule(
        "loss", "loss-spike-repeated", severities=("warn",),
        reads="rows past `spike_ratio_now` x the running mean",
        test="count of spikes within `spike_repeat_rows` rows",
        params=("spike_ratio_now", "spike_repeat", "spike_repeat_rows"),
        means="the loss keeps jumping: unstable training, not one bad batch",
        fix="lower the learning rate or tighten gradient clipping",
        seed="spike ratio > 2.0", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=9.0 if i in (60, 70, 80) else None), sft, 100, 60, 80, "loss"),
    ),
    Rule(
        "loss", "loss-shift-up", severities=("warn",),
        reads="loss vs the median of its last `shift_level` rows before the rise, in sigmas of its row-to-row changes "
              "(at least `shift_floor` of the level; not for RL surrogate losses)",
        test="Page's CUSUM for a shift of 2 x `shift_k` sigmas, each row clipped at `shift_clip` (a large jump must "
             "hold several rows); each row's z in the level's own noise (deflated for AR(1) noise)",
        params=("shift_k", "shift_clip", "shift_floor", "shift_level", "shift_arl"),
        means="the loss jumped and stays up: corrupted or mislabelled data, a new data source, a learning-rate jump",
        fix="check the data loader (the shard or source served at these steps) and the learning rate",
        seed="spike ratio > 2.0", seed_source=INSTRUMENTS,
        origin="the seed's spike ratio is a single-row test; a lasting jump is a change of level, decided by the "
               "sequential engine at its own budget (every SFT/DPO row is tested, and batch losses are heavy-tailed)",
        budgeted=True,
        budget_param="shift_arl",
        example=Example(
            "sft", lambda i, g: sft(i, g, noise=0.05, loss=None if i < 60 else 1.6 * (0.8 + 1.2 * math.exp(-i / 50))),
            lambda i, g: sft(i, g, noise=0.05), 100, 60, 75, "loss"),
    ),
    Rule(
        "loss", "loss-volatile", severities=("info",),
        reads="variance of the last 5 rows / variance of the last 5 x `window` rows",
        test="variance ratio above a line, held 3 rows (info)",
        params=("var_ratio",),
        means="training is getting noisier",
        fix="watch for spikes and the learning-rate schedule",
        seed="variance rising", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, noise=0.01 + 0.2 * after(i, 150)), sft, 200, 150, 180, "loss"),
    ),
    Rule(
        "loss", "loss-oscillating", severities=("warn",),
        reads="the loss's swing around a 9-row running median; a sinusoid fit of the log loss",
        test="swing vs its own earlier octave, or one period explaining most detrended variance at `osc_grow` x the "
             "fitted amplitude of the previous octave of readings (a swing that has been that size from the start is "
             "the data's rhythm); held `osc_for` rows",
        params=("osc_ratio", "osc_min", "osc_share", "osc_amp", "osc_grow", "osc_for"),
        means="the loss oscillates instead of converging",
        fix="lower the learning rate or decay it sooner",
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=(0.8 + 1.2 * math.exp(-i / 50)) * (1 + 0.3 * ramp(i, 100, 20)
                                                                                 * math.sin(2 * math.pi * i / 8))),
            sft, 200, 100, 140, "loss"),
    ),
)
