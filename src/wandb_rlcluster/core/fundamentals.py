"""Gauges 1-8: the fundamentals that matter under any trainer (SFT through RL)."""

from __future__ import annotations

import math

import numpy as np

from .bounded import RewardLevel
from .gauge import Gauge, finite
from .keys import Row
from .rollouts import ROLLOUT_DEFAULTS, ROLLOUT_INPUTS, ROLLOUT_OUTPUTS, SAMPLES_ROLLOUT_RULES, samples_rules
from .rule import INSTRUMENTS, Example, Rule
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
from .streams import after, evals, grpo, live, ramp, sft

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
                + self.fix("loss-spike-repeated", sentence=True), clear=10,
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


_NAN = float("nan")
_LOWER_LR = "Lower the learning rate (or tighten max_grad_norm) and resume from the last good checkpoint."

#: The loss gauge's rules (``core/catalog.py`` collects every module's).
LOSS_RULES: tuple[Rule, ...] = (
    Rule(
        "loss", "loss-nonfinite", severities=("info",),
        reads="loss",
        test="any NaN/Inf row (info: one isolated row is a skipped fp16 loss-scale step)",
        means="the loss is NaN or infinite on this row",
        fix="nothing for one row; if it repeats, see loss-nonfinite-repeated",
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=_NAN if i == 60 else None), sft, 100, 60, 60, "loss"),
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
            "sft", lambda i, g: sft(i, g, loss=_NAN if i in (40, 60) else None),
            lambda i, g: sft(i, g, loss=_NAN if i in (10, 70) else None), 100, 60, 60, "loss"),
    ),
    Rule(
        "loss", "loss-nonfinite-persistent", severities=("stop",),
        reads="loss",
        test="NaN/Inf held `nonfinite_for` rows",
        params=("nonfinite_for",),
        means="the loss stays NaN/Inf: the weights are probably corrupted",
        fix=_LOWER_LR,
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=_NAN if i >= 60 else None), sft, 100, 60, 62, "loss"),
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
             "hold several rows)",
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
        test="swing vs its own earlier octave, or one period explaining most detrended variance; held `osc_for` rows",
        params=("osc_ratio", "osc_min", "osc_share", "osc_amp", "osc_for"),
        means="the loss oscillates instead of converging",
        fix="lower the learning rate or decay it sooner",
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=(0.8 + 1.2 * math.exp(-i / 50)) * (1 + 0.3 * ramp(i, 100, 20)
                                                                                 * math.sin(2 * math.pi * i / 8))),
            sft, 200, 100, 140, "loss"),
    ),
)


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
                         f"{self.p['explode_for']} logged steps (now {g:.3g}): gradients are exploding. "
                         + self.fix("grad-explosion", sentence=True)) if exploding else "",
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


_GRAD_SEED = "vanishing (norm collapsing toward 0), exploding (fat tails / spikes), layer imbalance, any NaN/Inf"

#: The gradient gauge's rules.
GRADIENT_RULES: tuple[Rule, ...] = (
    Rule(
        "gradients", "grad-nonfinite", severities=("info",),
        reads="grad_norm",
        test="any NaN/Inf row (info: one isolated row is a skipped fp16 loss-scale step)",
        means="a gradient norm is NaN/Inf",
        fix="nothing for one row; if it repeats, see grad-nonfinite-repeated",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=_NAN if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-nonfinite-repeated", severities=("warn",),
        reads="grad_norm, and the row of its last NaN/Inf",
        test="a second NaN/Inf within `nonfinite_window` logged rows of the last",
        params=("nonfinite_window",),
        means="more than a skipped loss-scale step: gradients keep overflowing and the run is heading for divergence",
        fix="lower the learning rate or enable gradient clipping",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=_NAN if i in (40, 60) else None),
            lambda i, g: sft(i, g, grad=_NAN if i in (10, 70) else None), 100, 60, 60, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-nonfinite-persistent", severities=("stop",),
        reads="grad_norm",
        test="NaN/Inf held `nonfinite_for` rows",
        params=("nonfinite_for",),
        means="gradients stay NaN/Inf: the weights are probably corrupted",
        fix=_LOWER_LR,
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=_NAN if i >= 60 else None), sft, 100, 60, 62, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-zero", severities=("stop",),
        reads="grad_norm; in GRPO also frac_reward_zero_std and the reward's level",
        test="exactly 0 held `zero_for` rows, unless a saturating GRPO reward explains it (grad-zero-saturated)",
        params=("zero_for",),
        means="nothing is being learned (frozen parameters, all-zero advantages, a broken loss)",
        fix="find why no parameter gets a gradient before spending more compute",
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=0.0 if i >= 60 else None), sft, 100, 60, 64, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-zero-saturated", severities=("info",),
        reads="grad_norm, frac_reward_zero_std and the reward's level as a success rate (GRPO; core/bounded.py)",
        test="exactly 0 held `zero_for` rows while at least half the groups are uniform, the reward sits above 1/2 of "
             "its range and still moves (info)",
        params=("zero_for",),
        means="whole batches are solved prompts (all-correct groups, advantages 0): not a dead run",
        fix="add harder prompts if it persists; a frozen reward or one on the failure side is grad-zero",
        origin="above a success rate of 1/2 a uniform group is more likely all-correct than all-wrong for every group "
               "size",
        # a GRPO run near the top of its reward range: for 5 rows every group is solved and the gradient is exactly 0
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g, reward=0.7 + 0.15 * i / 100, zero_std=0.6),
                                  **({"frac_reward_zero_std": 1.0, "grad_norm": 0.0} if 60 <= i < 65 else {})},
            lambda i, g: grpo(i, g, reward=0.7 + 0.15 * i / 100, zero_std=0.6), 100, 60, 64, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-zero-step", severities=("warn",),
        reads="grad_norm (not GRPO, where all-equal groups give 0)",
        test="one exact 0",
        means="no parameter received a gradient on this step",
        fix="check for frozen weights, a detached loss, an empty batch",
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=0.0 if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-spike", severities=("info",),
        reads="grad_norm / running median of the last `window` rows",
        test="one row past `spike_ratio` (info)",
        params=("spike_ratio", "window", "min_history"),
        means="an isolated gradient spike",
        fix="nothing unless they cluster",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=20.0 if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-explosion", severities=("warn",),
        reads="grad_norm vs the running median and the window's upper quartile",
        test="above `explode_ratio` x the median and x the window's upper quartile, and above every norm of the "
             "window, held `explode_for` rows",
        params=("explode_ratio", "explode_for", "window"),
        means="gradients are exploding",
        fix="lower the LR or tighten max_grad_norm",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=8.0 * (1 + 0.1 * g.normal()) if i >= 60 else None), sft, 100, 60, 62,
            "grad_norm"),
    ),
    Rule(
        "gradients", "grad-vanishing", severities=("warn",),
        reads="running median of grad_norm / its first 10 rows",
        test="ratio below a line, held `vanish_for` rows",
        params=("vanish_ratio", "vanish_for"),
        means="gradients are vanishing and the model has stopped moving",
        fix="check the schedule, the loss and the data",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=0.001 * (1 + 0.1 * g.normal()) if i >= 60 else None), sft, 150, 60, 100,
            "grad_norm"),
    ),
    Rule(
        "gradients", "grad-nonfinite-params", severities=("warn",),
        reads="gradients/nonfinite (live: per-parameter hooks)",
        test="any count > 0",
        means="some gradient entries are NaN/Inf",
        fix="find the layer (fp16 overflow, a bad op) and lower the LR",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "gradients/nonfinite": 12.0 if i == 60 else 0.0},
            lambda i, g: {**sft(i, g), "gradients/nonfinite": 0.0}, 100, 60, 60, "gradients/nonfinite"),
    ),
    Rule(
        "gradients", "grad-layer-imbalance", severities=("warn",),
        reads="gradients/layer_spread (live): largest / smallest per-layer norm",
        test="level above a line, held 3 rows",
        params=("layer_spread",),
        means="some layers learn while others are frozen or exploding",
        fix="check frozen modules and per-layer LR",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "gradients/layer_spread": 50.0 * (1 + 100 * after(i, 60))},
            lambda i, g: {**sft(i, g), "gradients/layer_spread": 50.0}, 100, 60, 62, "gradients/layer_spread"),
    ),
    Rule(
        "gradients", "grad-sparse", severities=("warn",),
        reads="gradients/sparsity (live): share of entries ~0",
        test="level above a line, held 3 rows",
        params=("sparsity",),
        means="almost no gradient entry is non-zero",
        fix="check which parameters are trainable",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "gradients/sparsity": 0.995 if i >= 60 else 0.3},
            lambda i, g: {**sft(i, g), "gradients/sparsity": 0.3}, 100, 60, 62, "gradients/sparsity"),
    ),
)


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
                       "configured peak is reached late or never. " + self.fix("lr-peak-not-reached", sentence=True))

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
                       "peak. " + self.fix("lr-peak-not-reached", sentence=True))


#: The learning-rate gauge's rules.
LEARNING_RATE_RULES: tuple[Rule, ...] = (
    Rule(
        "learning_rate", "lr-zero-early", severities=("warn",),
        reads="learning_rate vs its peak, with the planned max_steps",
        test="LR <= `zero_frac` x peak before `end_frac` of the run, held `zero_for` rows",
        params=("zero_frac", "end_frac", "zero_for"),
        means="the schedule ended early; the remaining steps learn nothing",
        fix="fix the scheduler's total steps",
        seed="LR ≈ 0 well before the end", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, lr=0.0 if i >= 60 else None), sft, 200, 60, 69, "learning_rate",
            {"max_steps": 200}),
    ),
    Rule(
        "learning_rate", "lr-zero-long", severities=("warn",),
        reads="share of logged rows with LR ~0 (end of a log without max_steps)",
        test="share above 20 % at the end of the log",
        params=("zero_frac",),
        means="the schedule spent a large part of the run at ~0",
        fix="fix the scheduler's total steps",
        seed="LR ≈ 0 well before the end", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, lr=0.0 if i >= 100 else None), sft, 200, 100, 200, "learning_rate"),
    ),
    Rule(
        "learning_rate", "lr-peak-not-reached", severities=("warn",),
        reads="the schedule's shape: rises and falls of learning_rate",
        test="still only rising past `warmup_frac` of the planned steps (or at the end of the log)",
        params=("warmup_frac", "rising_share", "min_rows"),
        means="warm-up outlasts most of the run",
        fix="shorten warmup_steps / warmup_ratio",
        seed="peak never reached", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, lr=2e-5 * i / 1000), sft, 200, 100, 100, "learning_rate", {"max_steps": 200}),
    ),
)


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


#: The attention-entropy gauge's rules (live).
ATTENTION_ENTROPY_RULES: tuple[Rule, ...] = (
    Rule(
        "attention_entropy", "attention-collapse", severities=("warn",),
        reads="attention_entropy/mean (live probe) / its first 3 probes",
        test="ratio below a line, held 2 probes",
        params=("collapse_ratio",),
        means="heads are collapsing onto single tokens",
        fix="lower the learning rate; check for degenerate inputs",
        seed="collapse toward 0", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 * (1 - 0.9 * ramp(i, 40, 20))}),
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 * (1 - 0.2 * i / 100)}), 100, 40, 60,
            "attention_entropy/mean"),
    ),
    Rule(
        "attention_entropy", "attention-uniform", severities=("warn",),
        reads="attention_entropy/mean / log n (attention_entropy/max_possible)",
        test="share above a line, held 2 probes",
        params=("saturation",),
        means="attention spreads uniformly and carries nothing",
        fix="lower the learning rate; check the attention mask",
        seed="unbounded rise toward log n", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 2.3 * ramp(i, 40, 20),
                                              "attention_entropy/max_possible": 4.5}),
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0, "attention_entropy/max_possible": 4.5}),
            100, 40, 65, "attention_entropy/mean"),
    ),
    Rule(
        "attention_entropy", "attention-jump", severities=("info",),
        reads="attention_entropy/mean",
        test="robust z vs the last 20 probes (info)",
        params=("jump_z",),
        means="a sudden phase change in attention",
        fix="read samples around that step",
        seed="sudden phase change", seed_source=INSTRUMENTS,
        example=Example(
            "sft",
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 0.01 * g.normal() + (1.0 if i == 60 else 0)}),
            lambda i, g: live(i, g, **{"attention_entropy/mean": 2.0 + 0.01 * g.normal()}), 100, 60, 60,
            "attention_entropy/mean"),
    ),
)


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


#: The samples gauge's rules: the live probe's, then the training completions' (``core/rollouts.py``).
SAMPLES_RULES: tuple[Rule, ...] = (
    Rule(
        "samples", "sample-repetition", severities=("warn",),
        reads="samples/repetition_rate (live probe generations)",
        test="level above a line, held `repetition_for` rows",
        params=("repetition", "repetition_for"),
        means="generations are looping",
        fix="add a repetition penalty; check the reward for paying repeats",
        seed="repetition loops, format drift", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"samples/repetition_rate": 0.1 + 0.6 * after(i, 60)}),
            lambda i, g: live(i, g, **{"samples/repetition_rate": 0.1}), 100, 60, 61, "samples/repetition_rate"),
    ),
    *SAMPLES_ROLLOUT_RULES,
)


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
                       f"directions; {self.fix('lora-rank-collapse')}.", for_=2)
        cv = d.get("norm_cv")
        if cv is not None:
            self.check("lora-layer-imbalance", cv > self.p["layer_cv"], "info", "lora/norm_cv", cv,
                       lambda: f"per-layer LoRA norms vary widely (CV {cv:.1f}).", for_=2)


#: The LoRA gauge's rules (live).
LORA_RULES: tuple[Rule, ...] = (
    Rule(
        "lora", "lora-norm-explosion", severities=("warn",),
        reads="lora/norm_mean (‖B·A‖) / its first 2 probes",
        test="ratio above a line, held 2",
        params=("norm_explosion",),
        means="adapters are blowing up",
        fix="lower the adapter's learning rate",
        seed="norm explosion", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1 * (1 + i / 100) * (1 + 20 * ramp(i, 60, 10))}),
            lambda i, g: live(i, g, **{"lora/norm_mean": 0.1 * (1 + i / 100)}), 100, 60, 70, "lora/norm_mean"),
    ),
    Rule(
        "lora", "lora-rank-collapse", severities=("info",),
        reads="lora/effective_rank vs lora/rank",
        test="below `rank_collapse` x rank, held 2 (info)",
        params=("rank_collapse",),
        means="the adapter uses few directions",
        fix="a smaller rank would do",
        seed="effective rank ≪ configured rank or = configured rank", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/rank": 16.0,
                                              "lora/effective_rank": 12.0 - 11.0 * after(i, 60)}),
            lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/rank": 16.0, "lora/effective_rank": 12.0}),
            100, 60, 61, "lora/effective_rank"),
    ),
    Rule(
        "lora", "lora-layer-imbalance", severities=("info",),
        reads="lora/norm_cv (cross-layer coefficient of variation)",
        test="level above a line, held 2 (info)",
        params=("layer_cv",),
        means="per-layer adapter norms vary widely",
        fix="check per-layer targets and ranks",
        seed="large cross-layer variance", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/norm_cv": 0.5 + 2.5 * after(i, 60)}),
            lambda i, g: live(i, g, **{"lora/norm_mean": 0.1, "lora/norm_cv": 0.5}), 100, 60, 61, "lora/norm_cv"),
    ),
)


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
                       "(allocator thrashing or swapping). " + self.fix("memory-pressure", sentence=True), for_=3)


#: The efficiency gauge's rules.
EFFICIENCY_RULES: tuple[Rule, ...] = (
    Rule(
        "efficiency", "throughput-declining", severities=("warn",),
        reads="step_time: median of the last 10 / its first 10 (after 3 warm-up rows)",
        test="ratio above a line, held `slowdown_for` rows; only where the first steps took `min_step_s` or more (a "
             "sub-second step is timed by the host's load, not the run)",
        params=("slowdown", "slowdown_for", "min_step_s"),
        means="steps take much longer than at the start",
        fix="look for memory fragmentation, growing lengths, a straggler",
        seed="throughput declining", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "step_time": 1.0 * (1 + 0.05 * g.normal()) * (1 + 1.5 * ramp(i, 60, 20))},
            lambda i, g: {**sft(i, g), "step_time": 1.0 * (1 + 0.05 * g.normal())}, 150, 60, 85, "step_time"),
    ),
    Rule(
        "efficiency", "memory-pressure", severities=("warn",),
        reads="efficiency/mem_frac and efficiency/util (live)",
        test="memory above a line while utilisation fell below `util_drop` x its start, held 3 rows",
        params=("mem_high", "util_drop"),
        means="the three-alarm fire: allocator thrashing or swapping",
        fix="reduce batch size or sequence length",
        seed="memory in the top 10–15 % while utilisation falls", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: {**sft(i, g), "efficiency/mem_frac": 0.7 + 0.25 * after(i, 60),
                                 "efficiency/util": 0.9 - 0.5 * after(i, 60)},
            lambda i, g: {**sft(i, g), "efficiency/mem_frac": 0.7, "efficiency/util": 0.9}, 100, 60, 62,
            "efficiency/mem_frac"),
    ),
)


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
                           + self.fix("no-progress", sentence=True))
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
                           "classic overfitting. " + self.fix("eval-diverging", sentence=True))

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


def _eval_diverging(s: int, firing: bool, g: np.random.Generator) -> float:
    base = 1.0 + 0.8 * math.exp(-s / 40) + 0.002 * g.normal()
    return base + (0.004 * max(0, s - 100) if firing else 0.0)


def _eval_oscillating(s: int, firing: bool, g: np.random.Generator) -> float:
    if firing and s > 100:  # see-sawing above the best it reached, never a new best
        return 1.0 + 0.8 * math.exp(-100 / 40) + 0.05 + (0.06 if (s // 5) % 2 else 0.0) + 0.002 * g.normal()
    return 1.0 + 0.8 * math.exp(-s / 40) + 0.002 * g.normal()


def _eval_plateau(s: int, firing: bool, g: np.random.Generator) -> float:
    if firing:
        return 1.0 + 0.8 * math.exp(-min(s, 60) / 40) + 0.0005 * g.normal()
    return 1.0 + 0.8 * math.exp(-s / 40) - 0.001 * s


def _eval_converged(s: int, firing: bool, g: np.random.Generator) -> float:
    """Eval loss falling with the schedule, held from step 140 (firing: the learning rate is nearly spent there)."""
    if firing:
        return 1.0 + 0.8 * math.exp(-min(s, 140) / 40) + 0.0005 * g.normal()
    return 1.0 + 0.8 * math.exp(-s / 40) - 0.001 * s


def _overfitting(s: int, firing: bool, g: np.random.Generator) -> float:
    base = 1.0 + 0.8 * math.exp(-s / 40) + 0.002 * g.normal()
    return base + (0.2 * ((s - 120) / 5 + 1) if firing and s >= 120 else 0.0)  # the gap widens every evaluation


#: The convergence gauge's rules.
CONVERGENCE_RULES: tuple[Rule, ...] = (
    Rule(
        "convergence", "no-progress", severities=("warn",),
        reads="EWMA of the train loss vs its best and its first 5 rows (not RL surrogates)",
        test="no new best for `plateau_rows` rows and under `progress` gained, after `min_rows`",
        params=("plateau_rows", "progress", "min_rows", "warmup_share"),
        means="the run is not learning",
        fix="check learning rate, data and labels",
        seed="trend flat while loss still high (plateau)", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, loss=2.0, noise=0.02), sft, 200, 1, 70, "loss"),
    ),
    Rule(
        "convergence", "eval-plateau", severities=("warn",),
        reads="eval_loss vs its best",
        test="no improvement by `min_delta` in `patience` evals, before the schedule's end (eval-converged there)",
        params=("patience", "min_delta", "schedule_done_lr"),
        means="converged or stuck: early stopping would stop here",
        fix="stop, or change the schedule",
        seed="patience counter (default patience 5, min_delta 0.001)", seed_source=INSTRUMENTS,
        example=Example(
            "sft", sft, sft, 200, 60, 120, "eval_loss", extra=evals(10, 200, _eval_plateau)),
    ),
    Rule(
        "convergence", "eval-converged", severities=("info",),
        reads="eval_loss vs its best, learning_rate vs its peak, the step vs max_steps",
        test="eval-plateau's test at the end of the schedule: the learning rate at or under `schedule_done_lr` of its "
             "peak, or past `schedule_done_share` of the planned steps (info; eval-plateau stays quiet there)",
        params=("patience", "min_delta", "schedule_done_lr", "schedule_done_share"),
        means="the run converged where it was planned to end",
        fix="nothing; keep the best checkpoint",
        example=Example(
            "sft", sft, sft, 200, 140, 200, "eval_loss", extra=evals(10, 200, _eval_converged)),
    ),
    Rule(
        "convergence", "overfitting", severities=("warn",),
        reads="train/eval gap velocity (change of eval - train EWMA per eval / eval_loss)",
        test="velocity above a line while eval stalls, held 2 evals",
        params=("gap_velocity",),
        means="the model is overfitting",
        fix="keep the best checkpoint; regularise or stop",
        seed="gap velocity > 0.1 (overfitting)", seed_source=INSTRUMENTS,
        example=Example(
            "sft", sft, sft, 200, 120, 130, "eval_loss", extra=evals(5, 200, _overfitting)),
    ),
    Rule(
        "convergence", "eval-diverging", severities=("warn",),
        reads="the last 3 evals and the train EWMA at each",
        test="eval rose 3 times while train fell, `diverge_margin` above its best",
        params=("diverge_margin",),
        means="classic overfitting",
        fix="keep the best checkpoint; stop or regularise",
        seed="eval diverging from train", seed_source=INSTRUMENTS,
        example=Example(
            "sft", sft, sft, 200, 100, 130, "eval_loss", extra=evals(5, 200, _eval_diverging)),
    ),
    Rule(
        "convergence", "eval-oscillating", severities=("warn",),
        reads="the last `osc_evals` eval losses",
        test="`osc_flips` direction changes of mean size `osc_amp`, no new best",
        params=("osc_evals", "osc_flips", "osc_amp"),
        means="the run oscillates instead of converging",
        fix="lower the learning rate at this stage, or evaluate on more data",
        seed="eval oscillating", seed_source=INSTRUMENTS,
        example=Example(
            "sft", sft, sft, 200, 100, 160, "eval_loss", extra=evals(5, 200, _eval_oscillating)),
    ),
)


#: Every rule of the gauges in this module, in their order.
RULES: tuple[Rule, ...] = (*LOSS_RULES, *GRADIENT_RULES, *LEARNING_RATE_RULES, *ATTENTION_ENTROPY_RULES,
                           *SAMPLES_RULES, *LORA_RULES, *EFFICIENCY_RULES, *CONVERGENCE_RULES)
