"""Gauges 1-8: the fundamentals that matter under any trainer (SFT through RL)."""

from __future__ import annotations

import math

from .bounded import RewardLevel
from .gauge import Gauge, finite
from .keys import Row
from .rollouts import ROLLOUT_DEFAULTS, ROLLOUT_INPUTS, ROLLOUT_OUTPUTS, samples_rules
from .sequential import Cusum
from .stats import (
    Baseline,
    Ewma,
    OctaveMean,
    PeriodicFit,
    RollingSlope,
    RollingWindow,
    robust_z,
    step_skew,
)

Q75_ABS_NORMAL = 1.1503
"""The upper quartile of |z| for a standard normal z."""

# Families whose "loss" is a surrogate or an RL objective: near zero, signed,
# and free to rise while the model improves. A loss-spike rule means nothing there.
SURROGATE_LOSS_FAMILIES = frozenset({"grpo", "ppo", "online_dpo"})


class NonFiniteTracker:
    """Shared NaN/Inf logic: one isolated bad value is ``info`` (fp16/bf16 dynamic loss scaling skips a step and
    logs its NaN/Inf norm, then carries on), a second within ``nonfinite_window`` logged rows a warning, a run of
    them a stop."""

    @staticmethod
    def check(gauge: LossGauge | GradientGauge, key: str, value: float, prefix: str) -> bool:
        bad = not finite(value)
        last = gauge.nonfinite_rows.get(prefix) if bad else None
        repeated = last is not None and gauge.rows_seen - last <= gauge.p["nonfinite_window"]
        if bad:
            gauge.nonfinite_rows[prefix] = gauge.rows_seen
        # message closures only for a rule that holds this row (a quiet rule never reads one)
        gauge.check(
            f"{prefix}-nonfinite", bad, "info", key, value,
            (lambda: f"{key} is {value} at step {gauge.step}. One bad step is usually a skipped fp16 "
             "loss-scale step; if it repeats, the run has diverged.") if bad else "",
        )
        gauge.check(
            f"{prefix}-nonfinite-repeated", repeated, "warn", key, value,
            (lambda: f"{key} is {value} at step {gauge.step}, again within {gauge.p['nonfinite_window']} logged "
             "steps of the last one: more than a skipped loss-scale step. Watch for divergence; lower the LR or "
             "enable gradient clipping.") if repeated else "", clear=gauge.p["nonfinite_window"],
        )
        gauge.check(
            f"{prefix}-nonfinite-persistent", bad, "stop", key, value,
            lambda: f"{key} has been NaN/Inf for {gauge.p['nonfinite_for']} logged steps: the weights are "
            "probably corrupted. Stop, lower the learning rate or enable gradient clipping, and resume "
            "from the last good checkpoint.",
            for_=gauge.p["nonfinite_for"],
        )
        return bad


class LossGauge(Gauge):
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
                "osc_share": 0.65, "osc_amp": 0.12, "osc_every": 3,
                "osc_skew": 1.0, "shift_k": 1.5, "shift_clip": 2.0, "shift_floor": 0.15, "shift_level": 9,
                "shift_arl": 20000.0}

    def setup(self) -> None:
        self.nonfinite_rows: dict[str, int] = {}  # NonFiniteTracker: the row of the last NaN/Inf, per metric
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
        self.period_rows = math.nan  # its period, in logged rows
        self.period_amp = 0.0  # its amplitude in log loss
        self.period_pushes = 0  # train rows read (eval rows must not set the reading's cadence)
        self.epoch_rows = math.nan  # logged train rows per epoch, where the log has an epoch counter
        self.level = RollingWindow(self.p["shift_level"])  # the loss before any upward excursion: the shift's reference
        self.steps = RollingWindow(self.p["window"])  # |row-to-row change| of the loss: its noise, free of the trend
        self.shift = Cusum(self.p["shift_k"], self.budget(self.p["shift_arl"]))
        self.shift_prev = math.nan  # the previous train loss

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
                "Lower the learning rate or tighten gradient clipping.", clear=10,
            )
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
            # the changes understate a correlated noise (AR(1): by sqrt(1 - rho)); the level's own spread does not
            sigma = max(self._step_noise(), ref.robust()[1], self.p["shift_floor"] * abs(med), 1e-12)
            z = min((loss - med) / sigma, self.p["shift_clip"])
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
                   "Lower the learning rate or decay it sooner.", for_=p["osc_for"], clear=10)

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
            found = share >= self.p["osc_share"] and amp >= self.p["osc_amp"]
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


class GradientGauge(Gauge):
    """Gauge 2 — gradient health: norm level, spikes, vanishing/exploding, NaN."""

    id = "gradients"
    title = "Gradient health"
    inputs = ("grad_norm", "gradients/nonfinite", "gradients/layer_spread", "gradients/sparsity")
    outputs = ("grad_norm", "spike_ratio", "spikes", "norm_vs_start", "nonfinite", "layer_spread", "sparsity")
    defaults = {
        "window": 50, "explode_ratio": 5.0, "explode_for": 3, "spike_ratio": 10.0,
        "vanish_ratio": 0.01, "vanish_for": 10, "zero_for": 5, "nonfinite_for": 3, "nonfinite_window": 50,
        "layer_spread": 1000.0, "sparsity": 0.99, "min_history": 20,
    }

    def setup(self) -> None:
        self.nonfinite_rows: dict[str, int] = {}  # NonFiniteTracker: the row of the last NaN/Inf, per metric
        self.win = RollingWindow(self.p["window"])
        self.base = Baseline(10)
        self.spikes = 0
        self.level = RewardLevel()
        self.zero_frac = math.nan  # the last logged frac_reward_zero_std (rows that log only the optimizer carry it)

    def _exploding(self, g: float) -> bool:
        """``g`` beats every norm of the window and explode_ratio x its upper quartile (read only past 5x the median:
        the sort is rare on an ordinary run)."""
        vals = sorted(self.win.buf)
        return g > vals[-1] and g > self.p["explode_ratio"] * vals[(3 * len(vals)) // 4]

    def _saturated(self) -> bool:
        """A zero gradient in group-relative training that the reward explains: most groups scored alike
        (``frac_reward_zero_std`` >= 1/2) on the success side of the reward's range (they are solved prompts), and
        the reward still moves. A frozen reward, the failure side, or no group statistics: not explained."""
        return (self.family == "grpo" and self.zero_frac == self.zero_frac and self.zero_frac >= 0.5
                and self.level.success_side() and not self.level.frozen)

    def observe(self, row: Row) -> None:
        v = row.values
        d = self.derived
        if self.family == "grpo":
            self.level.push(v.get("reward"))
            f = v.get("frac_reward_zero_std")
            if f is not None and finite(f):
                self.zero_frac = f
        g = v.get("grad_norm")
        if g is not None:
            if NonFiniteTracker.check(self, "grad_norm", g, "grad"):
                return
            d["grad_norm"] = g
            zero = g <= 1e-12
            saturated = zero and self._saturated()
            # message closures only for a rule that holds this row (a quiet rule never reads one)
            self.check(
                "grad-zero", zero and not saturated, "stop", "grad_norm", g,
                (lambda: f"grad_norm has been exactly 0 for {self.p['zero_for']} logged steps: nothing is "
                 "being learned (frozen parameters, all-zero advantages, or a broken loss). The run is "
                 "burning compute.") if zero else "",
                for_=self.p["zero_for"],
            )
            self.check(
                "grad-zero-saturated", saturated, "info", "grad_norm", g,
                (lambda: f"grad_norm is exactly 0 while {self.zero_frac:.0%} of groups scored alike at a reward "
                 "near the top of its range: whole batches are solved, so their advantages are 0. Not a dead run; "
                 "add harder prompts if it persists.") if saturated else "",
                for_=self.p["zero_for"], clear=self.p["zero_for"],
            )
            # Outside GRPO/RLOO (where a batch of all-equal groups legitimately gives 0) one exact zero is news.
            self.check(
                "grad-zero-step", g <= 1e-12 and self.family not in ("grpo",), "warn", "grad_norm", g,
                (lambda: f"grad_norm is exactly 0 at step {self.step}: no parameter received a gradient "
                 "(frozen weights, a detached loss, or an empty batch).") if zero else "",
            )
            if g > 1e-12:
                med = self.win.robust()[0] if len(self.win) >= self.p["min_history"] else math.nan
                if med == med and med > 0:
                    ratio = g / med
                    d["spike_ratio"] = ratio
                    if ratio > self.p["spike_ratio"]:
                        self.spikes += 1
                    d["spikes"] = float(self.spikes)
                    spiked = ratio > self.p["spike_ratio"]
                    self.check(
                        "grad-spike", spiked, "info", "grad_norm", g,
                        (lambda: f"isolated grad_norm spike {g:.3g} ({ratio:.0f}x the running median). "
                         "Isolated spikes are common; watch for them clustering.") if spiked else "",
                        clear=1,
                    )
                    # A norm is positive and heavy-tailed, and GRPO batches whose groups all agree log norms 100x
                    # under the rest: the median (or a log-scale MAD over both kinds of batch, several e-folds
                    # wide) is then no scale for the ordinary batches. An explosion is a norm above explode_ratio x
                    # the window's upper quartile (the ordinary batches while up to 3 in 4 are quiet) that is also a
                    # record, above every norm of the window, for explode_for rows in a row: one batch that spikes
                    # and reverts is a spike (info), not an explosion.
                    exploding = ratio > self.p["explode_ratio"] and self._exploding(g)
                    self.check(
                        "grad-explosion", exploding, "warn", "grad_norm", g,
                        (lambda: f"grad_norm has stayed above {self.p['explode_ratio']:.0f}x the upper quartile of "
                         f"the last {len(self.win)} logged norms, and above all of them, for "
                         f"{self.p['explode_for']} logged steps (now {g:.3g}): gradients are exploding. Lower the LR "
                         "or tighten max_grad_norm.") if exploding else "",
                        for_=self.p["explode_for"],
                    )
                    if not exploding:  # an exploding norm must not become its own reference
                        self.win.push(g)
                else:
                    self.win.push(g)
                self.base.push(g)
                if self.base.ready and len(self.win) >= 10:
                    rel = self.win.robust()[0] / max(self.base.value, 1e-30)
                    d["norm_vs_start"] = rel
                    vanishing = rel < self.p["vanish_ratio"]
                    self.check(
                        "grad-vanishing", vanishing, "warn", "grad_norm", g,
                        (lambda: f"grad_norm median has fallen to {rel:.2g}x its start: gradients are "
                         "vanishing and the model has stopped moving.") if vanishing else "",
                        for_=self.p["vanish_for"],
                    )
        nf = v.get("gradients/nonfinite")
        if nf is not None and finite(nf):
            d["nonfinite"] = nf
            self.check("grad-nonfinite-params", nf > 0, "warn", "gradients/nonfinite", nf,
                       lambda: f"{nf:.0f} gradient entries are NaN/Inf.")
        spread = v.get("gradients/layer_spread")
        if spread is not None and finite(spread):
            d["layer_spread"] = spread
            self.check("grad-layer-imbalance", spread > self.p["layer_spread"], "warn",
                       "gradients/layer_spread", spread,
                       lambda: f"largest/smallest per-layer gradient norm is {spread:.3g}: some layers are "
                       "learning while others are frozen or exploding.", for_=3)
        sp = v.get("gradients/sparsity")
        if sp is not None and finite(sp):
            d["sparsity"] = sp
            self.check("grad-sparse", sp > self.p["sparsity"], "warn", "gradients/sparsity", sp,
                       lambda: f"{sp:.1%} of gradient entries are ~0.", for_=3)


class LearningRateGauge(Gauge):
    """Gauge 3 — the schedule: warm-up, peak, decay, LR stuck at zero, and a peak never reached.

    "Peak never reached" is read from the schedule's shape: a learning rate that has only risen by
    half-way through the planned steps (or, offline, over the whole log) is still warming up, so
    the run trains at a fraction of the configured rate (warm-up longer than the run).
    """

    id = "learning_rate"
    title = "Learning-rate dynamics"
    inputs = ("learning_rate",)
    outputs = ("learning_rate", "peak", "phase", "frac_at_zero")
    defaults = {"zero_frac": 1e-3, "zero_for": 10, "end_frac": 0.9, "warmup_frac": 0.5, "rising_share": 0.8,
                "min_rows": 10}

    def setup(self) -> None:
        self.peak = 0.0
        self.peak_step = 0
        self.prev = math.nan
        self.zero_rows = 0
        self.first_lr = math.nan
        self.rises = 0
        self.falls = 0

    def observe(self, row: Row) -> None:
        lr = row.values["learning_rate"]
        if not finite(lr):
            return
        d = self.derived
        d["learning_rate"] = lr
        if lr > self.peak:
            self.peak, self.peak_step = lr, row.step
        d["peak"] = self.peak
        prev = self.prev
        if prev == prev:
            rising, falling = lr > prev * (1 + 1e-9), lr < prev * (1 - 1e-9)
            self.rises += rising
            self.falls += falling
            d["phase"] = 0.0 if rising else (2.0 if falling else 1.0)
        else:
            self.first_lr = lr
        self.prev = lr
        near_zero = self.peak > 0 and lr <= self.p["zero_frac"] * self.peak
        if near_zero:
            self.zero_rows += 1
        d["frac_at_zero"] = self.zero_rows / self.rows_seen
        early = self.max_steps <= 0 or row.step < self.p["end_frac"] * self.max_steps
        self.check(
            "lr-zero-early", near_zero and early and self.max_steps > 0, "warn", "learning_rate", lr,
            lambda: f"learning rate is ~0 ({lr:.2g}, peak {self.peak:.2g}) at step {row.step} of "
            f"{self.max_steps}: the schedule ended early and the remaining steps learn nothing.",
            for_=self.p["zero_for"],
        )
        if self.max_steps > 0:
            late = row.step >= self.p["warmup_frac"] * self.max_steps
            self.check("lr-peak-not-reached", late and self._still_warming(), "warn", "learning_rate", lr,
                       lambda: f"the learning rate is still rising at step {row.step} of {self.max_steps} "
                       f"({lr:.2g}, up from {self.first_lr:.2g}): warm-up is longer than most of the run, so the "
                       "configured peak is reached late or never. Shorten warmup_steps / warmup_ratio.")

    def _still_warming(self) -> bool:
        n = self.rises + self.falls
        return (self.rows_seen >= self.p["min_rows"] and self.falls == 0
                and self.rises >= self.p["rising_share"] * max(1, self.rows_seen - 1) and n > 0)

    def finish(self) -> None:
        frac = self.zero_rows / max(1, self.rows_seen)
        if self.max_steps <= 0 and self.rows_seen >= 20:
            self.check(
                "lr-zero-long", frac > 0.2, "warn", "learning_rate", self.derived.get("learning_rate"),
                f"learning rate was ~0 for {frac:.0%} of the logged steps: the schedule spent a large "
                "part of the run not learning.",
            )
        if self.max_steps <= 0:
            lr = self.derived.get("learning_rate", math.nan)
            self.check("lr-peak-not-reached", self._still_warming(), "warn", "learning_rate", lr,
                       f"the learning rate rose on every logged step from {self.first_lr:.2g} to {lr:.2g} and never "
                       "levelled off or decayed: warm-up outlasted the run, which never trained at its configured "
                       "peak. Shorten warmup_steps / warmup_ratio.")


class AttentionEntropyGauge(Gauge):
    """Gauge 4 — attention entropy of a probe batch (live runs only)."""

    id = "attention_entropy"
    title = "Attention entropy"
    inputs = ("attention_entropy/mean",)
    outputs = ("mean", "head_std", "max_possible", "vs_start", "vs_uniform")
    live_only = True
    defaults = {"collapse_ratio": 0.3, "saturation": 0.95, "jump_z": 8.0}

    def setup(self) -> None:
        self.base = Baseline(3)
        self.win = RollingWindow(20)

    def observe(self, row: Row) -> None:
        v = row.values
        h = v["attention_entropy/mean"]
        if not finite(h):
            return
        d = self.derived
        d["mean"] = h
        if "attention_entropy/head_std" in v:
            d["head_std"] = v["attention_entropy/head_std"]
        hmax = v.get("attention_entropy/max_possible")
        self.base.push(h)
        if self.base.ready:
            rel = h / max(self.base.value, 1e-12)
            d["vs_start"] = rel
            self.check("attention-collapse", rel < self.p["collapse_ratio"], "warn", "attention_entropy/mean", h,
                       lambda: f"attention entropy fell to {rel:.2f}x its start: heads are collapsing onto "
                       "single tokens.", for_=2)
        if hmax and finite(hmax) and hmax > 0:
            d["max_possible"] = hmax  # log n: the uniform ceiling, plotted beside the mean
            sat = h / hmax
            d["vs_uniform"] = sat
            self.check("attention-uniform", sat > self.p["saturation"], "warn", "attention_entropy/mean", h,
                       lambda: f"attention entropy is {sat:.0%} of log(n): attention is spreading uniformly "
                       "and carries no information.", for_=2)
        if len(self.win) >= 5:
            z = robust_z(h, self.win)
            self.check("attention-jump", abs(z) > self.p["jump_z"], "info", "attention_entropy/mean", h,
                       lambda: f"attention entropy jumped ({z:+.1f} robust sigmas): a phase change.", clear=2)
        self.win.push(h)


class SamplesGauge(Gauge):
    """Gauge 5 — generated samples: repetition loops and format drift (live runs only).

    Reads the greedy probe samples and, with rollouts (``RLClusterCallback.attach`` or a W&B completions
    table), the training completions themselves (``core/rollouts.py``).
    """

    id = "samples"
    title = "Generation samples"
    inputs = ("samples/repetition_rate", *ROLLOUT_INPUTS["samples"])
    outputs = ("repetition_rate", "distinct_2", "mean_chars", *ROLLOUT_OUTPUTS["samples"])
    live_only = True
    defaults = {"repetition": 0.5, "repetition_for": 2, **ROLLOUT_DEFAULTS["samples"]}

    def observe(self, row: Row) -> None:
        samples_rules(self, row)
        r = row.values.get("samples/repetition_rate")
        if r is None or not finite(r):
            return
        self.derived["repetition_rate"] = r
        for k in ("samples/distinct_2", "samples/mean_chars"):
            if k in row.values:
                self.derived[k.split("/", 1)[1]] = row.values[k]
        self.check("sample-repetition", r > self.p["repetition"], "warn", "samples/repetition_rate", r,
                   lambda: f"{r:.0%} of sampled n-grams are repeats: generations are looping.",
                   for_=self.p["repetition_for"])


class LoraGauge(Gauge):
    """Gauge 6 — LoRA adapters: ‖B·A‖, effective rank, change since start (live runs only)."""

    id = "lora"
    title = "LoRA adapter diagnostics"
    inputs = ("lora/norm_mean",)
    outputs = ("norm_mean", "effective_rank", "rank", "rel_change", "norm_cv", "norm_vs_start")
    live_only = True
    defaults = {"norm_explosion": 10.0, "rank_collapse": 0.1, "layer_cv": 2.0}

    def setup(self) -> None:
        self.base = Baseline(2)

    def observe(self, row: Row) -> None:
        v = row.values
        n = v["lora/norm_mean"]
        if not finite(n):
            return
        d = self.derived
        d["norm_mean"] = n
        for k in ("lora/effective_rank", "lora/rank", "lora/rel_change", "lora/norm_cv"):
            if k in v and finite(v[k]):
                d[k.split("/", 1)[1]] = v[k]
        self.base.push(n)
        if self.base.ready and self.base.value > 0:
            ratio = n / self.base.value
            d["norm_vs_start"] = ratio
            self.check("lora-norm-explosion", ratio > self.p["norm_explosion"], "warn", "lora/norm_mean", n,
                       lambda: f"mean LoRA update norm ‖B·A‖ grew {ratio:.0f}x since the first probes: "
                       "adapters are blowing up (LR too high for the adapter).", for_=2)
        er, r = d.get("effective_rank"), d.get("rank")
        if er is not None and r and n > 1e-8:
            self.check("lora-rank-collapse", er < max(1.0, self.p["rank_collapse"] * r) and r >= 4, "info",
                       "lora/effective_rank", er,
                       lambda: f"effective rank {er:.1f} of configured rank {r:.0f}: the adapter uses few "
                       "directions; a smaller rank would do.", for_=2)
        cv = d.get("norm_cv")
        if cv is not None:
            self.check("lora-layer-imbalance", cv > self.p["layer_cv"], "info", "lora/norm_cv", cv,
                       lambda: f"per-layer LoRA norms vary widely (CV {cv:.1f}).", for_=2)


_LIVE_EFFICIENCY_KEYS = tuple((k, k.split("/", 1)[1]) for k in (
    "efficiency/tokens_per_s", "efficiency/steps_per_s", "efficiency/mem_frac", "efficiency/util",
    "efficiency/rss_gb"))


class EfficiencyGauge(Gauge):
    """Gauge 7 — compute efficiency: throughput trend, memory trend."""

    id = "efficiency"
    title = "Compute efficiency"
    inputs = ("step_time", "num_tokens", "train_samples_per_second", "efficiency/tokens_per_s",
              "efficiency/mem_frac", "efficiency/steps_per_s")
    outputs = ("samples_per_s", "tokens_per_s", "steps_per_s", "mem_frac", "util", "rss_gb", "step_time", "slowdown")
    defaults = {"slowdown": 1.5, "slowdown_for": 10, "min_step_s": 0.5, "mem_high": 0.88, "util_drop": 0.7}

    def setup(self) -> None:
        self.base = Baseline(10)
        self.win = RollingWindow(10)
        self.prev_tokens = math.nan
        self.prev_step = 0
        self.util_base = Baseline(5)
        self.skip = 3  # first steps include compilation and warm-up

    def observe(self, row: Row) -> None:
        v = row.values
        d = self.derived
        if row.kind == "summary":
            sps = v.get("train_samples_per_second")
            if sps is not None and finite(sps):
                d["samples_per_s"] = sps
            return
        st = v.get("step_time")
        tok = v.get("num_tokens")
        if tok is not None and finite(tok):
            if self.prev_tokens == self.prev_tokens and st and finite(st) and st > 0 and row.step > self.prev_step:
                d["tokens_per_s"] = (tok - self.prev_tokens) / ((row.step - self.prev_step) * st)
            self.prev_tokens, self.prev_step = tok, row.step
        for k, short in _LIVE_EFFICIENCY_KEYS:
            x = v.get(k)
            if x is not None and finite(x):
                d[short] = x
        sec = st if (st is not None and finite(st) and st > 0) else None
        if sec is None and d.get("steps_per_s"):
            sec = 1.0 / d["steps_per_s"]
        if sec is not None:
            if self.skip > 0:
                self.skip -= 1
            else:
                d["step_time"] = sec
                self.base.push(sec)
                self.win.push(sec)
                if self.base.ready and self.win.full:
                    slow = self.win.median() / max(self.base.value, 1e-12)
                    d["slowdown"] = slow
                    # a step of a fraction of a second is timed by the host's load (other jobs on a shared CPU), not by
                    # the run: its wall clock says nothing about the training's own throughput
                    timed = self.base.value >= self.p["min_step_s"]
                    self.check("throughput-declining", timed and slow > self.p["slowdown"], "warn", "step_time", sec,
                               lambda: f"steps now take {slow:.1f}x as long as at the start: throughput is "
                               "declining (memory fragmentation, growing sequence lengths, a straggler).",
                               for_=self.p["slowdown_for"])
        mem, util = d.get("mem_frac"), d.get("util")
        if mem is not None and "efficiency/mem_frac" in v:
            if util is not None:
                self.util_base.push(util)
            dropping = util is not None and self.util_base.ready and util < self.p["util_drop"] * self.util_base.value
            self.check("memory-pressure", mem > self.p["mem_high"] and dropping, "warn", "efficiency/mem_frac", mem,
                       lambda: f"device memory at {mem:.0%} while utilisation falls: the three-alarm fire "
                       "(allocator thrashing or swapping). Reduce batch size or sequence length.", for_=3)


class ConvergenceGauge(Gauge):
    """Gauge 8 — convergence: patience on eval loss, train/eval gap, no progress."""

    id = "convergence"
    title = "Convergence"
    inputs = ("loss", "eval_loss")
    outputs = ("rows_since_improvement", "progress", "eval_loss", "evals_since_improvement", "gap", "gap_velocity",
               "eval_oscillation")
    defaults = {"osc_evals": 6, "osc_flips": 4, "osc_amp": 0.02,
                "patience": 5, "min_delta": 0.001, "gap_velocity": 0.1, "plateau_rows": 25,
                "min_rows": 40, "warmup_share": 0.08, "progress": 0.05, "diverge_margin": 0.02,
                "schedule_done_lr": 0.15, "schedule_done_share": 0.9}

    def setup(self) -> None:
        self.lr_peak = 0.0
        self.lr_now = math.nan
        self.train = Ewma(0.1)
        self.train_start = Baseline(5)
        self.best_train = math.inf
        self.since_best_train = 0
        self.best_eval = math.inf
        self.since_best_eval = 0
        self.evals: list[float] = []
        self.gaps: list[float] = []
        self.train_at_eval: list[float] = []

    def _schedule_done(self) -> str:
        """Why the schedule is at its end (empty: it is not): the learning rate decayed to ``schedule_done_lr`` of its
        peak, or the run past ``schedule_done_share`` of its planned steps. An eval loss that stops improving there
        is the run converging where it was planned to end, not a plateau to act on."""
        lr, peak = self.lr_now, self.lr_peak
        if peak > 0 and lr == lr and lr <= self.p["schedule_done_lr"] * peak:
            return f"learning rate {lr:.3g}, {lr / peak:.0%} of its peak"
        if self.max_steps > 0 and self.step >= self.p["schedule_done_share"] * self.max_steps:
            return f"step {self.step} of {self.max_steps}"
        return ""

    def applies(self) -> bool:
        # An RL surrogate loss says nothing about convergence; the reward gauge judges progress there.
        return self.family not in SURROGATE_LOSS_FAMILIES

    def observe(self, row: Row) -> None:
        if not self.applies():
            self.note = "RL surrogate loss: progress is judged by the reward gauge"
            return
        v = row.values
        d = self.derived
        lr = v.get("learning_rate")
        if lr is not None and finite(lr) and lr >= 0:
            self.lr_peak = max(self.lr_peak, lr)
            self.lr_now = lr
        loss = v.get("loss")
        if row.kind == "train" and loss is not None and finite(loss):
            sm = self.train.push(loss)
            self.train_start.push(loss)
            if self.best_train == math.inf or sm < self.best_train - self.p["min_delta"] * abs(self.best_train):
                self.best_train, self.since_best_train = sm, 0
            else:
                self.since_best_train += 1
            d["rows_since_improvement"] = float(self.since_best_train)
            start = self.train_start.value
            if self.family not in SURROGATE_LOSS_FAMILIES and start == start and start > 0:
                progress = 1.0 - self.best_train / start
                d["progress"] = progress
                stuck = (self.rows_seen >= self.min_rows(self.p["min_rows"], self.p["warmup_share"])
                         and self.since_best_train >= self.p["plateau_rows"]
                         and progress < self.p["progress"])
                self.check("no-progress", stuck, "warn", "loss", sm,
                           lambda: f"loss has not improved for {self.since_best_train} logged steps and is within "
                           f"{progress:.0%} of where it started ({start:.4g}): the run is not learning. "
                           "Check learning rate, data and labels.")
        ev = v.get("eval_loss")
        if ev is None or not finite(ev) or self.family in SURROGATE_LOSS_FAMILIES:
            return
        self.evals.append(ev)
        self.evals = self.evals[-10:]
        d["eval_loss"] = ev
        if self.best_eval == math.inf or ev < self.best_eval - self.p["min_delta"] * abs(self.best_eval):
            self.best_eval, self.since_best_eval = ev, 0
        else:
            self.since_best_eval += 1
        d["evals_since_improvement"] = float(self.since_best_eval)
        still = self.since_best_eval >= self.p["patience"]
        done = self._schedule_done()
        self.check("eval-plateau", bool(still and not done), "warn", "eval_loss", ev,
                   lambda: f"eval_loss has not improved by {self.p['min_delta']:.1%} in {self.since_best_eval} "
                   f"evaluations (best {self.best_eval:.4g}): converged or stuck; early stopping would stop here.")
        self.check("eval-converged", bool(still and done), "info", "eval_loss", ev,
                   lambda: f"eval_loss has held at its best ({self.best_eval:.4g}) for {self.since_best_eval} "
                   f"evaluations at the end of the schedule ({done}): the run converged where it was planned to end; "
                   "nothing to stop.", clear=10**9)
        self._oscillation(ev)
        tr = self.train.mean
        if tr == tr:
            gap = ev - tr
            prev_gap = self.gaps[-1] if self.gaps else None
            self.gaps = (self.gaps + [gap])[-10:]
            self.train_at_eval = (self.train_at_eval + [tr])[-10:]
            d["gap"] = gap
            if prev_gap is not None:
                vel = (gap - prev_gap) / max(abs(ev), 1e-12)
                d["gap_velocity"] = vel
                eval_stalled = len(self.evals) >= 2 and ev >= self.evals[-2]
                self.check("overfitting", vel > self.p["gap_velocity"] and eval_stalled, "warn", "eval_loss", ev,
                           lambda: f"train/eval gap grew by {vel:.0%} of eval_loss in one evaluation (gap now "
                           f"{gap:.4g}): the model is overfitting.", for_=2)
            if len(self.evals) >= 3 and len(self.train_at_eval) >= 3:
                e, t = self.evals[-3:], self.train_at_eval[-3:]
                # three rises in a row can be noise; also require eval to sit clearly above its best
                diverging = (e[0] < e[1] < e[2] and t[0] >= t[1] >= t[2]
                             and e[2] > self.best_eval * (1 + self.p["diverge_margin"]))
                self.check("eval-diverging", diverging, "warn", "eval_loss", ev,
                           lambda: "eval_loss rose for 3 evaluations while train loss kept falling: "
                           "classic overfitting. Keep the best checkpoint; stop or regularise.")

    def _oscillation(self, ev: float) -> None:
        """Eval loss see-sawing: direction flips on most evaluations, by more than noise, with no new best."""
        p = self.p
        k = p["osc_evals"]
        if len(self.evals) < k:
            return
        e = self.evals[-k:]
        diffs = [b - a for a, b in zip(e, e[1:], strict=False)]
        flips = sum(1 for a, b in zip(diffs, diffs[1:], strict=False) if a * b < 0)
        amp = sum(abs(x) for x in diffs) / len(diffs) / max(abs(sum(e) / k), 1e-12)
        self.derived["eval_oscillation"] = amp if flips >= p["osc_flips"] else 0.0
        stuck = min(e[-3:]) > self.best_eval
        self.check("eval-oscillating", flips >= p["osc_flips"] and amp >= p["osc_amp"] and stuck, "warn", "eval_loss",
                   ev, lambda: f"eval_loss has changed direction {flips} times in the last {k} evaluations, by "
                   f"{amp:.1%} on average, without a new best ({self.best_eval:.4g}): the run oscillates instead of "
                   "converging (learning rate too high at this stage, or evaluation on a tiny set).")
