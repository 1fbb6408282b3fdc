"""Gauge 2: gradient health (norm level, spikes, vanishing and exploding, layer imbalance, NaN)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .bounded import RewardLevel
from .gauge import finite
from .keys import Row
from .loss import SURROGATE_LOSS_FAMILIES
from .nonfinite import LOWER_LR, NAN, NonFiniteGauge, NonFiniteTracker
from .rule import INSTRUMENTS, Example, Rule
from .stats import (
    Baseline,
    RollingWindow,
    robust_z,
)
from .streams import after, grpo, sft


class GradientGauge(NonFiniteGauge):
    """Gauge 2 — gradient health: norm level, spikes, vanishing/exploding, NaN."""

    id = "gradients"
    title = "Gradient health"
    inputs = ("grad_norm", "gradients/nonfinite", "gradients/layer_spread", "gradients/sparsity")
    outputs = ("grad_norm", "spike_ratio", "spikes", "norm_vs_start", "nonfinite", "layer_spread", "sparsity")
    defaults = {
        "window": 50, "explode_ratio": 5.0, "explode_for": 3, "spike_ratio": 10.0,
        "vanish_ratio": 0.01, "vanish_for": 10, "zero_for": 5, "nonfinite_for": 3, "nonfinite_window": 50,
        "layer_spread": 1000.0, "sparsity": 0.99, "min_history": 20, "felt_z": 4.0, "unfelt_for": 9,
    }

    def setup(self) -> None:
        self.nonfinite_rows = {}  # NonFiniteTracker: the row of the last NaN/Inf, per metric
        self.win = RollingWindow(self.p["window"])
        self.base = Baseline(10)
        self.spikes = 0
        self.level = RewardLevel()
        self.zero_frac = math.nan  # the last logged frac_reward_zero_std (rows that log only the optimizer carry it)
        self.losses = RollingWindow(50)  # a supervised or preference loss's recent rows: does a burst move it?
        self.felt = RollingWindow(self.p["explode_for"] + 1)  # per row: 1 the loss rose out of its noise, 0 it did not
        self.burst_rows = 0  # rows in a row with the norm past the explosion lines

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

    def _loss_moved(self, loss: float | None) -> None:
        """Whether this row's loss rose out of its own noise (above its recent median by ``felt_z`` robust sigmas),
        for the loss a supervised or preference trainer optimises (an RL surrogate's level says nothing)."""
        if self.family in SURROGATE_LOSS_FAMILIES or loss is None:
            return
        if not finite(loss):
            self.felt.push(1.0)
            return
        up = len(self.losses) >= 10 and robust_z(loss, self.losses) > self.p["felt_z"]
        self.felt.push(1.0 if up else 0.0)
        if not up:  # keep a moved loss out of the reference it is judged against
            self.losses.push(loss)

    def _unfelt(self) -> bool:
        """A burst no other gauge feels: the loss is read, and on none of the burst's rows (and the one before)
        did it rise out of its noise. Clipping absorbed it; the update did not change what the model does."""
        # a loss that never moved at all (a constant placeholder) is no witness either way
        live = len(self.losses) >= 10 and self.losses.max() > self.losses.min()
        return live and self.felt.max() == 0.0

    def observe(self, row: Row) -> None:
        v = row.values
        d = self.derived
        self._loss_moved(v.get("loss"))
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
            self._zero(g)
            if g > 1e-12:
                self._scale(g)
        self._live(v)

    def _zero(self, g: float) -> None:
        """An exactly-zero norm: a dead run (stop), solved batches (GRPO, info), or one step without a gradient."""
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

    def _scale(self, g: float) -> None:
        """A positive norm against its window: a spike, an explosion, or vanishing against its start."""
        d = self.derived
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
            burst = self._burst(g, ratio)
            if not burst:  # an exploding norm must not become its own reference
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

    def _burst(self, g: float, ratio: float) -> bool:
        """``grad-explosion`` / ``grad-burst-unfelt``: the norm past the explosion lines, told apart by whether the
        loss felt it. True: a burst (the norm is kept out of its own reference)."""
        burst = ratio > self.p["explode_ratio"] and self._exploding(g)
        self.burst_rows = self.burst_rows + 1 if burst else 0
        # one the loss does not feel is a burst (info) until it has lasted `unfelt_for` rows
        unfelt = burst and self._unfelt() and self.burst_rows < self.p["unfelt_for"]
        exploding = burst and not unfelt
        self.check(
            "grad-burst-unfelt", unfelt, "info", "grad_norm", g,
            (lambda: f"grad_norm jumped to {g:.3g}, above {self.p['explode_ratio']:.0f}x the upper "
             f"quartile of the last {len(self.win)} logged norms, but the loss did not move: a burst the "
             "update absorbed (clipping, a few odd batches), not an explosion. A warning if the loss "
             "follows or the bursts keep coming.") if unfelt else "",
            for_=self.p["explode_for"],
        )
        self.check(
            "grad-explosion", exploding, "warn", "grad_norm", g,
            (lambda: f"grad_norm has stayed above {self.p['explode_ratio']:.0f}x the upper quartile of "
             f"the last {len(self.win)} logged norms, and above all of them, for "
             f"{self.p['explode_for']} logged steps (now {g:.3g}): gradients are exploding. "
             + self.fix("grad-explosion", sentence=True)) if exploding else "",
            for_=self.p["explode_for"],
        )
        return burst

    def _live(self, v: Mapping[str, float]) -> None:
        """The live gradient statistics: NaN/Inf entries, layer imbalance, sparsity."""
        d = self.derived
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
            "sft", lambda i, g: sft(i, g, grad=NAN if i == 60 else None), sft, 100, 60, 60, "grad_norm"),
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
            "sft", lambda i, g: sft(i, g, grad=NAN if i in (40, 60) else None),
            lambda i, g: sft(i, g, grad=NAN if i in (10, 70) else None), 100, 60, 60, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-nonfinite-persistent", severities=("stop",),
        reads="grad_norm",
        test="NaN/Inf held `nonfinite_for` rows",
        params=("nonfinite_for",),
        means="gradients stay NaN/Inf: the weights are probably corrupted",
        fix=LOWER_LR,
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=NAN if i >= 60 else None), sft, 100, 60, 62, "grad_norm"),
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
        reads="grad_norm vs the running median and the window's upper quartile; a supervised or preference loss",
        test="above `explode_ratio` x the median and x the window's upper quartile, and above every norm of the "
             "window, held `explode_for` rows while the loss rose out of its noise (`felt_z` robust sigmas) on one "
             "of them, or held `unfelt_for` rows however the loss reads (no loss, or an RL surrogate: as soon as held)",
        params=("explode_ratio", "explode_for", "window", "felt_z", "unfelt_for"),
        means="gradients are exploding",
        fix="lower the LR or tighten max_grad_norm",
        seed=_GRAD_SEED, seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=8.0 * (1 + 0.1 * g.normal()) if i >= 60 else None,
                                    loss=(0.8 + 1.2 * math.exp(-i / 50)) * (3.0 if i >= 60 else 1.0)),
            sft, 100, 60, 62, "grad_norm"),
    ),
    Rule(
        "gradients", "grad-burst-unfelt", severities=("info",),
        reads="as grad-explosion",
        test="the explosion lines held `explode_for` rows while a supervised or preference loss did not rise out of "
             "its noise on any of them, for under `unfelt_for` rows (info)",
        params=("explode_ratio", "explode_for", "felt_z", "unfelt_for"),
        means="a gradient burst the update absorbed (clipping, a few odd batches): no other gauge feels it",
        fix="nothing unless the loss follows or the bursts keep coming",
        origin="issue 47: a healthy 2,400-step SFT with a few isolated gradient bursts that never moved the loss read "
               "as an explosion",
        example=Example(
            "sft", lambda i, g: sft(i, g, grad=8.0 * (1 + 0.1 * g.normal()) if 60 <= i < 64 else None), sft, 100, 60,
            63, "grad_norm"),
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
