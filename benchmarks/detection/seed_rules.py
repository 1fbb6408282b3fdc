"""The seed blog's monitoring rules, applied literally: the anchor the core is benchmarked against.

Source: "The Post-Training Instrument Cluster", Part II (RL; the text in ``shared/seed/``) and the
Part I / Part III facts gathered in ``shared/INSTRUMENTS.md``. Every threshold below is one the posts
state; rules the posts describe without a number ("margin plateaus early", "KL noisy") are not
invented here. What "literally" means:

* single-point: a rule is checked on every logged row and fires on every row where it holds (the
  posts' callbacks print a WARNING per row); no persistence, no hysteresis, no warm-up;
* the posts' own words set the severity: "a stop sign" is ``stop`` (KL > 1.0), so is early stopping
  (Part I's convergence monitor "may stop training"); "WARNING"/"warn"/"too high" is ``warn``;
  "deserves a look" / "deserves investigation" (the 2-sigma rule, > 30 % mean or > 50 % variance
  change in length) is ``info`` and, like the core's info findings, does not count as an alarm;
* the posts' scope: Part III's GRPO rules (reward_std, per-function std, entropy, 40 % clip) apply to
  GRPO logs, Part II's to the RL/preference trainers, Part I's to every trainer; one KL threshold for
  every trainer (the posts do not separate per-token from per-sequence KL: that is the trap);
* the posts' key-name bugs are not repeated (``clip_ratio/low`` -> TRL's ``clip_ratio/*_mean``):
  the anchor compares rules, not typos.

Each rule carries the gauge id of the core gauge it belongs to, so findings are scored the same way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wandb_rlcluster.core import Normalizer

__all__ = ["SEED_RULES", "SeedFinding", "seed_findings"]

RL_FAMILIES = frozenset({"grpo", "ppo", "online_dpo"})

# (gauge, rule) -> (severity, where the post states it), for the table's legend and the tests.
SEED_RULES: dict[tuple[str, str], tuple[str, str]] = {
    ("loss", "spike-ratio"): ("warn", "I: max(last 10) / mean(earlier window) > 2.0; not on GRPO "
                              "(III: 'set alerts on reward std, not loss')"),
    ("gradients", "nonfinite"): ("warn", "I: any NaN/Inf"),
    ("gradients", "zero"): ("warn", "I: vanishing gradients; grad_norm < 1e-8 (I's 'zero' for sparsity)"),
    ("convergence", "early-stop"): ("stop", "I: patience 5, min_delta 0.001 on eval_loss; 'may stop training'"),
    ("convergence", "gap-velocity"): ("warn", "I: train/eval gap velocity > 0.1 (overfitting)"),
    ("kl", "kl-warn"): ("warn", "II: KL > 0.5 is a warning"),
    ("kl", "kl-stop"): ("stop", "II: KL > 1.0 is a stop sign"),
    ("policy_ratio", "ratio-range"): ("warn", "II: val/ratio above 1.5 or below 0.7 (code: outside [0.5, 2.0])"),
    ("policy_ratio", "clip-high"): ("warn", "II: clip fraction > 30 %; III (GRPO): > 40 %"),
    ("policy_ratio", "clip-low"): ("warn", "II: clip fraction < 1 % (underclipping warning); III: < 1 % minimal"),
    ("length", "baseline-ratio"): ("warn", "II: mean length / baseline < 0.5 or > 2.0"),
    ("length", "clipped"): ("warn", "II: completions/clipped_ratio > 20 %"),
    ("length", "mean-change"): ("info", "II: > 30 % change in mean vs baseline 'deserves investigation'"),
    ("length", "variance-change"): ("info", "II: > 50 % change in variance vs baseline 'deserves investigation'"),
    ("entropy", "entropy-low"): ("warn", "III (GRPO): entropy below 1.0"),
    ("reward_signal", "reward-std-low"): ("warn", "III (GRPO): reward_std < 0.05"),
    ("reward_signal", "component-dead"): ("warn", "III (GRPO): a reward function's std < 0.01"),
    ("*", "two-sigma"): ("info", "I: a metric > 2 sigma from its moving average 'deserves a look'"),
}

# Window sizes the posts' code uses: the length callback keeps 50 values, the clip history 100.
LENGTH_WINDOW = 50
BASELINE_ROWS = 10
SPIKE_RECENT = 10
SPIKE_EARLIER = 50
TWO_SIGMA_WINDOW = 50

# Metrics the 2-sigma rule watches, with the gauge each belongs to.
TWO_SIGMA_KEYS: dict[str, str] = {
    "loss": "loss",
    "grad_norm": "gradients",
    "reward": "reward",
    "objective/scores": "reward",
    "rewards/margins": "reward",
    "kl": "kl",
    "objective/kl": "kl",
    "completions/mean_length": "length",
    "entropy": "entropy",
    "reward_std": "reward_signal",
}


@dataclass(frozen=True, slots=True)
class SeedFinding:
    """One seed rule holding on one row."""

    gauge: str
    rule: str
    severity: str
    step: int


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


class _Window:
    """Running mean / variance of the last ``size`` values (the posts' ``deque(maxlen=...)``)."""

    __slots__ = ("buf", "s", "ss")

    def __init__(self, size: int) -> None:
        self.buf: deque[float] = deque(maxlen=size)
        self.s = 0.0
        self.ss = 0.0

    def push(self, x: float) -> None:
        if len(self.buf) == self.buf.maxlen:
            old = self.buf[0]
            self.s -= old
            self.ss -= old * old
        self.buf.append(x)
        self.s += x
        self.ss += x * x

    def mean(self) -> float:
        return self.s / len(self.buf) if self.buf else math.nan

    def var(self) -> float:
        """Population variance, as ``np.var`` in the posts' code."""
        n = len(self.buf)
        if n < 2:
            return 0.0
        m = self.s / n
        return max(0.0, self.ss / n - m * m)


class _SeedMonitor:
    """Stateful evaluation of every seed rule over one log."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.out: list[SeedFinding] = []
        self.loss_hist: deque[float] = deque(maxlen=SPIKE_RECENT + SPIKE_EARLIER)
        self.len_first: list[float] = []
        self.len_base_mean = math.nan
        self.len_base_var = math.nan
        self.len_win = _Window(LENGTH_WINDOW)
        self.two_sigma = {k: _Window(TWO_SIGMA_WINDOW) for k in TWO_SIGMA_KEYS}
        self.best_eval = math.inf
        self.evals_since_best = 0
        self.last_train_loss = math.nan
        self.prev_gap = math.nan

    def fire(self, gauge: str, rule: str, step: int) -> None:
        self.out.append(SeedFinding(gauge, rule, SEED_RULES[(gauge, rule)][0], step))

    def row(self, step: int, kind: str, v: Mapping[str, float]) -> None:
        if kind == "eval":
            self._eval(step, v)
        elif kind == "train":
            self._train(step, v)

    # -- Part I: loss, gradients, convergence, the 2-sigma rule ----------------------------------
    def _train(self, step: int, v: Mapping[str, float]) -> None:
        fam = self.family
        loss = v.get("loss")
        if loss is not None and math.isfinite(loss):
            self.last_train_loss = loss
            if fam != "grpo":
                self.loss_hist.append(loss)
                if len(self.loss_hist) > SPIKE_RECENT:
                    vals = list(self.loss_hist)
                    earlier = vals[:-SPIKE_RECENT]
                    ref = sum(earlier) / len(earlier)
                    if ref > 0 and max(vals[-SPIKE_RECENT:]) / ref > 2.0:
                        self.fire("loss", "spike-ratio", step)
        g = v.get("grad_norm")
        if g is not None:
            if not math.isfinite(g):
                self.fire("gradients", "nonfinite", step)
            elif g < 1e-8:
                self.fire("gradients", "zero", step)
        for key, gauge in TWO_SIGMA_KEYS.items():
            x = v.get(key)
            if x is None or not math.isfinite(x):
                continue
            w = self.two_sigma[key]
            if len(w.buf) >= 10:
                sd = math.sqrt(w.var())
                if sd > 0 and abs(x - w.mean()) > 2.0 * sd:
                    self.out.append(SeedFinding(gauge, "two-sigma", "info", step))
            w.push(x)
        if fam in RL_FAMILIES or fam in ("dpo", "kto", "orpo"):
            self._part2(step, v)
        if fam == "grpo":
            self._part3(step, v)

    def _eval(self, step: int, v: Mapping[str, float]) -> None:
        ev = v.get("eval_loss")
        if ev is None or not math.isfinite(ev):
            return
        if ev < self.best_eval - 0.001:
            self.best_eval, self.evals_since_best = ev, 0
        else:
            self.evals_since_best += 1
            if self.evals_since_best >= 5:
                self.fire("convergence", "early-stop", step)
        if math.isfinite(self.last_train_loss):
            gap = ev - self.last_train_loss
            if math.isfinite(self.prev_gap) and gap - self.prev_gap > 0.1:
                self.fire("convergence", "gap-velocity", step)
            self.prev_gap = gap

    # -- Part II: KL, policy ratio and clipping, generation length -------------------------------
    def _part2(self, step: int, v: Mapping[str, float]) -> None:
        fam = self.family
        kl = v.get("objective/kl", v.get("kl"))
        if _finite(kl):
            if kl > 1.0:  # type: ignore[operator]
                self.fire("kl", "kl-stop", step)
            if kl > 0.5:  # type: ignore[operator]
                self.fire("kl", "kl-warn", step)
        if fam not in RL_FAMILIES:
            return
        ratio = v.get("val/ratio")
        if _finite(ratio) and not 0.7 <= ratio <= 1.5:  # type: ignore[operator]
            self.fire("policy_ratio", "ratio-range", step)
        clip = v.get("policy/clipfrac_avg", v.get("clip_ratio/region_mean"))
        if clip is None and "clip_ratio/low_mean" in v and "clip_ratio/high_mean" in v:
            clip = v["clip_ratio/low_mean"] + v["clip_ratio/high_mean"]
        if _finite(clip):
            if clip > (0.4 if fam == "grpo" else 0.3):  # type: ignore[operator]
                self.fire("policy_ratio", "clip-high", step)
            if clip < 0.01:  # type: ignore[operator]
                self.fire("policy_ratio", "clip-low", step)
        length = v.get("completions/mean_length")
        if _finite(length):
            self.len_win.push(length)  # type: ignore[arg-type]
            if len(self.len_first) < BASELINE_ROWS:
                self.len_first.append(length)  # type: ignore[arg-type]
                if len(self.len_first) == BASELINE_ROWS:
                    m = sum(self.len_first) / BASELINE_ROWS
                    self.len_base_mean = m
                    self.len_base_var = sum((x - m) ** 2 for x in self.len_first) / BASELINE_ROWS
            elif self.len_base_mean > 0:
                ratio_l = self.len_win.mean() / self.len_base_mean
                if ratio_l < 0.5 or ratio_l > 2.0:
                    self.fire("length", "baseline-ratio", step)
                if abs(ratio_l - 1.0) > 0.3:
                    self.fire("length", "mean-change", step)
                if self.len_base_var > 0 and abs(self.len_win.var() / self.len_base_var - 1.0) > 0.5:
                    self.fire("length", "variance-change", step)
        clipped = v.get("completions/clipped_ratio")
        if _finite(clipped) and clipped > 0.2:  # type: ignore[operator]
            self.fire("length", "clipped", step)

    # -- Part III: GRPO reward signal and entropy ------------------------------------------------
    def _part3(self, step: int, v: Mapping[str, float]) -> None:
        ent = v.get("entropy")
        if _finite(ent) and ent < 1.0:  # type: ignore[operator]
            self.fire("entropy", "entropy-low", step)
        std = v.get("reward_std")
        if _finite(std) and std < 0.05:  # type: ignore[operator]
            self.fire("reward_signal", "reward-std-low", step)
        for k, x in v.items():
            if k.startswith("rewards/") and k.endswith("/std") and math.isfinite(x) and x < 0.01:
                self.fire("reward_signal", "component-dead", step)
                break


def seed_findings(rows: Iterable[Mapping[str, object]], family: str) -> list[SeedFinding]:
    """Every seed-rule finding on a log (raw TRL rows; keys are normalised as the core does).

    ``family`` is the core's trainer family (``grpo``, ``ppo``, ``dpo``, ``sft``, ...), which sets
    which parts of the posts apply.
    """
    norm = Normalizer()
    mon = _SeedMonitor(family)
    for raw in rows:
        if not isinstance(raw, Mapping):
            continue
        r = norm.normalize(raw)
        if r is not None:
            mon.row(r.step, r.kind, r.values)
    return mon.out
