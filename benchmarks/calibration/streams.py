"""Healthy streams per trainer family under one noise model of the grid, and the same streams with a graded change.

A stream is a healthy latent path with our own noise laid on it. The path is the detection generator's healthy run
of the family without noise (``synthetic.generate_run(..., noise=0)``: the trends a healthy run follows -- reward
rising and saturating, a GRPO base model's entropy halving, a DPO margin saturating, an SFT loss settling); each
key's noise level is the robust spread (1.4826 MAD) of that generator's own residual around the path at the same
seed. On it, the model's unit noise (``noise.unit``) is laid per key: additively, or multiplicatively (log scale)
for a key that lives on the positive half-line (a gradient norm, a KL, an entropy, a length, a spread, a DPO or SFT
loss), and ratios stay in [0, 1]. Keys whose values follow from others are made from them after the noise (GRPO's
``reward`` is the sum of the trained functions' means; a DPO margin is chosen - rejected; PPO's ``rlhf_reward`` is
score minus the KL penalty, which moves with the KL), and a terminated length moves with its length. Counters and
clocks keep the generator's values.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
for _p in (HERE.parent / "detection", HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from calibration import noise  # noqa: E402

from synthetic import GOLD_FUNC, REWARD_FUNCS, generate_run  # noqa: E402

FAMILIES: tuple[str, ...] = ("grpo", "grpo_kl", "dpo", "ppo", "sft")
"""GRPO without and with a KL term, DPO, PPO, SFT: the detection generator's families."""
TRAINER = {"grpo": "grpo", "grpo_kl": "grpo", "dpo": "dpo", "ppo": "ppo", "sft": "sft"}
BINOMIAL_FAMILIES = ("grpo", "grpo_kl", "dpo")
"""Families whose rewards are success rates (the binomial models apply to them only)."""

FIXED = frozenset({"step", "epoch", "learning_rate", "num_tokens", "episode", "eps", "step_time"})
"""Counters, schedules and clocks: the generator's values, no noise of ours."""
LAST_VALUE = frozenset({"grad_norm", "learning_rate", "num_tokens", "epoch", "episode", "eps"})
"""Keys TRL logs as the value at the logging step (the rest: the mean over the window)."""
PAIRED = {"completions/mean_terminated_length": "completions/mean_length",
          "completions/min_terminated_length": "completions/min_length",
          "completions/max_terminated_length": "completions/max_length"}
"""A key that moves with another (the same noise draw)."""
_RATIO_MARKS = ("ratio/", "clipped_ratio", "frac_", "accuracies", "accuracy", "clipfrac")
_POSITIVE_MARKS = ("grad_norm", "kl", "entropy", "length", "/std", "reward_std", "ratio_var", "num_eos")


def is_ratio(key: str, family: str) -> bool:
    """A key that is a share of something, in [0, 1] (GRPO's verifier rewards included)."""
    if key.startswith("rewards/") and key.endswith("/mean") and family in ("grpo", "grpo_kl"):
        return True
    return any(m in key for m in _RATIO_MARKS) and key != "val/ratio"


def is_positive(key: str, family: str) -> bool:
    """A key on the positive half-line whose noise scales with its level (noise on the log scale)."""
    if key == "loss":
        return family in ("dpo", "sft")
    return any(m in key for m in _POSITIVE_MARKS) and not is_ratio(key, family)


@dataclass(frozen=True)
class Change:
    """A graded change laid on one key: ``size`` noise sigmas in ``direction`` (+1 up, -1 down), ``abrupt`` from
    ``onset`` (a row index), or a ``ramp`` reaching its size over ``ramp_rows`` rows."""

    key: str
    direction: float
    size: float
    shape: str  # "abrupt" or "ramp"
    onset: int
    ramp_rows: int = 20

    def profile(self, n: int) -> np.ndarray:
        """The change in noise sigmas at each row."""
        i = np.arange(n, dtype=float)
        if self.shape == "abrupt":
            return np.where(i >= self.onset, self.direction * self.size, 0.0)
        return self.direction * self.size * np.clip((i - self.onset + 1) / self.ramp_rows, 0.0, 1.0)


@dataclass
class Stream:
    """One generated stream: its rows (train rows, then the run's summary row) and what made it."""

    family: str
    model: str
    seed: int
    rows: list[dict[str, float]]
    n_steps: int
    #: per changed key: the unit-noise rows the change was laid on (for the clairvoyant CUSUM), else empty
    residual: np.ndarray | None = None


def _sigma(noisy: np.ndarray, path: np.ndarray, positive: bool) -> float:
    """The robust noise level of the generator's residual (on the log scale for a positive key)."""
    if positive:
        ok = (noisy > 0) & (path > 0)
        if ok.sum() < 5:
            return 0.0
        r = np.log(noisy[ok]) - np.log(path[ok])
    else:
        r = noisy - path
    return float(1.4826 * np.median(np.abs(r - np.median(r))))


def _reduce(a: np.ndarray, every: int, last: bool) -> np.ndarray:
    """Per-step values -> logged rows (the window's mean, or the value at the logging step)."""
    if every == 1:
        return a
    m = len(a) // every * every
    return a[every - 1:m:every] if last else a[:m].reshape(-1, every).mean(axis=1)


def make_stream(family: str, model: str, seed: int, n_rows: int, change: Change | None = None) -> Stream:
    """A healthy ``family`` stream of ``n_rows`` logged rows under ``model`` (with ``change`` laid on, if given)."""
    every = noise.EVERY.get(model, 1)
    n_steps = n_rows * every
    path_run = generate_run(family, None, n_steps=n_steps, seed=seed, noise=0.0)
    ref_run = generate_run(family, None, n_steps=n_steps, seed=seed, noise=1.0)
    path_rows, ref_rows = path_run.train_rows, ref_run.train_rows
    keys = [k for k in path_rows[0] if k != "step"]
    rng = np.random.default_rng([seed, _model_tag(model), _family_tag(family)])
    per_step: dict[str, np.ndarray] = {}
    units: dict[str, np.ndarray] = {}
    for k in keys:
        path = np.array([r[k] for r in path_rows], dtype=float)
        if k in FIXED or k in PAIRED:
            per_step[k] = path if k != "step_time" else np.array([r[k] for r in ref_rows], dtype=float)
            continue
        positive = is_positive(k, family) and bool(np.all(path > 0))
        sig = _sigma(np.array([r[k] for r in ref_rows], dtype=float), path, positive)
        e = noise.unit(model, n_steps, rng)
        if model == "drift":  # in the direction the key already moves (up where it does not move)
            moved = math.log(path[-1] / path[0]) if positive else path[-1] - path[0]
            e = e + noise.drift(n_steps, -1.0 if moved < -sig else 1.0, rng)
        units[k] = e
        per_step[k] = _apply(path, sig, e, positive, is_ratio(k, family))
    for k, src in PAIRED.items():
        if k in per_step and src in units:
            path = np.array([r[k] for r in path_rows], dtype=float)
            src_path = np.array([r[src] for r in path_rows], dtype=float)
            per_step[k] = np.maximum(path + (per_step[src] - src_path), 0.0)
    logged = {k: _reduce(v, every, k in LAST_VALUE or family == "ppo") for k, v in per_step.items()}
    steps = np.arange(every, n_steps + 1, every, dtype=float)[: len(next(iter(logged.values())))]
    residual = None
    if change is not None:
        if every != 1:
            raise ValueError("a change is laid on a stream logged every step")
        residual = _lay_change(family, logged, units, path_rows, change, ref_rows)
    if model in noise.BINOMIAL and family in BINOMIAL_FAMILIES:
        _binomial(family, logged, noise.BINOMIAL[model], rng)
    _derive(family, logged, path_rows, every)
    rows = [{"step": float(s), **{k: float(v[i]) for k, v in logged.items()}} for i, s in enumerate(steps)]
    rows.append({**path_run.rows[-1], "step": float(n_steps)})  # the run's summary row
    return Stream(family, model, seed, rows, n_steps, residual)


def _model_tag(model: str) -> int:
    return noise.MODELS.index(model) if model in noise.MODELS else 99


def _family_tag(family: str) -> int:
    return FAMILIES.index(family)


def _apply(path: np.ndarray, sig: float, e: np.ndarray, positive: bool, ratio: bool,
           shift: np.ndarray | None = None) -> np.ndarray:
    """The path with the noise ``e`` (and a change ``shift``, both in noise sigmas) laid on; a positive key's noise
    on the log scale, clipped at 6 sigmas (a change is not clipped)."""
    add = np.zeros_like(path) if shift is None else shift
    if positive:
        return np.asarray(path * np.exp(sig * (np.clip(e, -6.0, 6.0) + add) - 0.5 * sig * sig))
    out = path + sig * (e + add)
    return np.clip(out, 0.0, 1.0) if ratio else out


def _lay_change(family: str, logged: dict[str, np.ndarray], units: dict[str, np.ndarray],
                path_rows: list[dict[str, float]], change: Change, ref_rows: list[dict[str, float]]) -> np.ndarray:
    """Lay ``change`` on its key's rows; return the key's unit residual with the change (what the clairvoyant
    CUSUM reads: it knows the path, the noise level and the change)."""
    k = change.key
    path = np.array([r[k] for r in path_rows], dtype=float)
    positive = is_positive(k, family) and bool(np.all(path > 0))
    sig = _sigma(np.array([r[k] for r in ref_rows], dtype=float), path, positive)
    shift = change.profile(len(path))
    logged[k] = _apply(path, sig, units[k], positive, is_ratio(k, family), shift)
    return np.asarray(units[k] + shift)


def _binomial(family: str, logged: dict[str, np.ndarray], batch: tuple[int, int], rng: np.random.Generator) -> None:
    """Rewards as success rates drawn per group: each prompt's success chance ~ Beta(5 p, 5 (1 - p))."""
    n_p, g = batch
    if family == "dpo":
        p = np.clip(logged["rewards/accuracies"], 0.0, 1.0)
        logged["rewards/accuracies"] = rng.binomial(n_p * g, p) / (n_p * g)
        return
    fns = [f for f in (*REWARD_FUNCS, GOLD_FUNC) if f"rewards/{f}/mean" in logged]
    n = len(logged[f"rewards/{fns[0]}/mean"])
    total = np.zeros((n, n_p, g))
    for f in fns:
        p = np.clip(logged[f"rewards/{f}/mean"], 1e-3, 1 - 1e-3)[:, None]
        q = rng.beta(5.0 * p, 5.0 * (1.0 - p), (n, n_p))
        draws = (rng.random((n, n_p, g)) < q[:, :, None]).astype(float)
        logged[f"rewards/{f}/mean"] = draws.mean(axis=(1, 2))
        logged[f"rewards/{f}/std"] = draws.reshape(n, -1).std(axis=1, ddof=1)
        if f != GOLD_FUNC:
            total += draws
    logged["reward"] = total.mean(axis=(1, 2))
    group_std = total.std(axis=2, ddof=1)
    logged["reward_std"] = group_std.mean(axis=1)
    logged["frac_reward_zero_std"] = (group_std < 1e-6).mean(axis=1)


def _derive(family: str, logged: dict[str, np.ndarray], path_rows: list[dict[str, float]], every: int) -> None:
    """Keys made from others, remade after the noise."""
    if family in ("grpo", "grpo_kl"):
        logged["reward"] = sum((logged[f"rewards/{f}/mean"] for f in REWARD_FUNCS), np.zeros(1))
    elif family == "dpo":
        logged["rewards/margins"] = logged["rewards/chosen"] - logged["rewards/rejected"]
    elif family == "ppo":
        def path(k: str) -> np.ndarray:
            return _reduce(np.array([r[k] for r in path_rows], dtype=float), every, True)
        kl0, ns0 = path("objective/kl"), path("objective/non_score_reward")
        ratio = np.divide(ns0, kl0, out=np.zeros_like(ns0), where=np.abs(kl0) > 1e-12)
        logged["objective/non_score_reward"] = ratio * logged["objective/kl"]
        logged["objective/rlhf_reward"] = (path("objective/rlhf_reward") + logged["objective/scores"]
                                           - path("objective/scores") - logged["objective/non_score_reward"] + ns0)
