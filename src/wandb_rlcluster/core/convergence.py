"""Gauge 8: convergence, patience on eval loss, train/eval gap, no progress."""

from __future__ import annotations

import math

import numpy as np

from .gauge import Gauge, finite
from .keys import Row
from .loss import SURROGATE_LOSS_FAMILIES
from .rule import INSTRUMENTS, Example, Rule
from .stats import (
    Baseline,
    Ewma,
)
from .streams import evals, sft


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
            self._train_progress(loss)
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
        self._gap(ev)

    def _train_progress(self, loss: float) -> None:
        """The smoothed train loss against its best and its start: no progress over ``plateau_rows`` rows."""
        d = self.derived
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

    def _gap(self, ev: float) -> None:
        """The train/eval gap at an evaluation: growing fast (overfitting), or eval rising while train falls."""
        d = self.derived
        tr = self.train.mean
        if tr != tr:
            return
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
