"""The oracle anchor (issue #28): a CUSUM that knows each pathology's true change.

For a run of the corpus, the generator can give the same run without noise (``noise=0``: the latent mean path of
every logged series), healthy and with the pathology from its onset. The oracle reads the noisy rows with both paths
known: for every metric whose two paths differ, each row adds the Gaussian log-likelihood ratio of "changed" against
"healthy", (m1 - m0) / s^2 * (x - (m0 + m1) / 2), with the noise known as the run has it: the residuals around the
healthy path before onset give their AR(1) coefficient (rows and mean change are prewhitened with it) and the robust
spread of the innovations (each clipped at ``CLIP`` sigmas: heavy tails); the sum over metrics is one CUSUM (Page),
evidence fused across every series the pathology moves. Its threshold is set afterwards, on the healthy runs of the
same corpus, so that it warns on the same share of them as the product: the delay it then has is the best a detector
with this much knowledge can do at the product's false-alarm rate, and the product's delay is reported as a ratio to
it.

On a healthy run the oracle does not know which pathology to expect: it runs one CUSUM per trend and spread
pathology of the run's family (each alternative's path from the same seed) and counts the largest. A spread
pathology changes a series' noise more than its mean; the oracle sees only the mean's change (a lognormal noise
moves the mean too), so on spread pathologies its delay is an upper bound on the best.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from synthetic import PATHOLOGIES, combinations, generate_run

SKIP_KEYS = frozenset({"step", "epoch", "learning_rate", "num_tokens", "episode", "total_flos", "train_runtime",
                       "step_time", "train_samples_per_second", "train_steps_per_second", "train_loss"})
"""Counters and clocks: no evidence about a pathology."""
TARGET_KINDS = ("trend", "spread")
CLIP = 4.0
"""An innovation counts at most this many of its sigmas: the oracle knows the noise is heavy-tailed."""


@dataclass
class OracleTrace:
    """What the threshold-free oracle saw on one run: the largest CUSUM value before onset, and the logged steps
    at which its running maximum rose after onset (so the first crossing of any threshold can be read off)."""

    max_before: float
    rises: list[tuple[int, float]]

    def first_over(self, h: float) -> int | None:
        for step, v in self.rises:
            if v > h:
                return step
        return None


def _train(rows: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    return [r for r in rows if "loss" in r and "train_runtime" not in r]


def _noise_free(spec: object, pathology: str | None) -> list[dict[str, float]]:
    s = spec
    run = generate_run(s.family, pathology, n_steps=s.n_steps, onset=s.onset, seed=s.gen_seed,  # type: ignore[attr-defined]
                       noise=0.0, logging_steps=s.logging_steps, with_eval=s.with_eval,  # type: ignore[attr-defined]
                       profile=s.profile, gold=s.gold, n_prompts=s.n_prompts,  # type: ignore[attr-defined]
                       group_size=s.group_size, noise_model=s.noise_model)  # type: ignore[attr-defined]
    return _train(run.rows)


def _cusum(rows: list[dict[str, float]], m0: list[dict[str, float]], m1: list[dict[str, float]],
           onset_row: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The CUSUM of the fused log-likelihood ratio over the rows, or None when the two paths never differ."""
    n = min(len(rows), len(m0), len(m1))
    if n < 5:
        return None
    keys = [k for k in m1[0] if k not in SKIP_KEYS and k in m0[0] and k in rows[0]]
    llr = np.zeros(n)
    used = False
    for k in keys:
        try:
            x = np.array([float(r.get(k, math.nan)) for r in rows[:n]])
            a = np.array([float(r.get(k, math.nan)) for r in m0[:n]])
            b = np.array([float(r.get(k, math.nan)) for r in m1[:n]])
        except (TypeError, ValueError):
            continue
        ok = np.isfinite(x) & np.isfinite(a) & np.isfinite(b)
        if not ok.any():
            continue
        d = np.where(ok, b - a, 0.0)
        scale = np.nanmax(np.abs(np.where(ok, a, np.nan))) if np.isfinite(a).any() else 0.0
        if not np.any(np.abs(d) > 1e-9 * max(scale, 1e-12)):
            continue
        pre = ok.copy()
        pre[onset_row:] = False
        r = np.where(ok, x - a, 0.0)
        resid = r[pre] if pre.sum() >= 5 else r[ok]
        # the noise it knows: AR(1) coefficient and innovation scale of the residuals around the healthy path
        rho = 0.0
        if len(resid) >= 10 and np.std(resid) > 0:
            rho = float(np.clip(np.corrcoef(resid[:-1], resid[1:])[0, 1], 0.0, 0.9))
        e = r - rho * np.concatenate(([0.0], r[:-1]))  # innovations; the mean change whitened alike
        dw = d - rho * np.concatenate(([0.0], d[:-1]))
        inn = e[pre] if pre.sum() >= 5 else e[ok]
        s = 1.4826 * float(np.median(np.abs(inn - np.median(inn)))) if len(inn) else 0.0
        if not s > 0:
            s = float(np.std(inn)) if len(inn) > 1 else 0.0
        if not s > 0:
            continue
        # heavy tails: an innovation counts at most CLIP sigmas (a Huber-type likelihood), so one outlier row is one
        z = np.clip(e / s, -CLIP, CLIP)
        term = (dw / s) * (z - dw / (2.0 * s))
        llr += np.where(ok, term, 0.0)
        used = True
    if not used:
        return None
    steps = np.array([int(r["step"]) for r in rows[:n]])
    out = np.empty(n)
    acc = 0.0
    for i, v in enumerate(llr.tolist()):
        acc = max(0.0, acc + v)
        out[i] = acc
    return steps, out


def trace(spec: object, run_rows: Sequence[dict[str, float]], onset_step: int | None) -> OracleTrace | None:
    """The oracle on one corpus run: its own pathology's CUSUM, or, on a healthy run, the largest of every trend and
    spread alternative's."""
    rows = _train(run_rows)
    m0 = _noise_free(spec, None)
    path = spec.pathology  # type: ignore[attr-defined]
    if path is not None:
        if PATHOLOGIES[path].kind not in TARGET_KINDS or onset_step is None:
            return None
        onset_row = next((i for i, r in enumerate(rows) if r["step"] >= onset_step), len(rows))
        res = _cusum(rows, m0, _noise_free(spec, path), onset_row)
        if res is None:
            return None
        steps, s = res
        before = float(s[:onset_row].max()) if onset_row > 0 else 0.0
        rises: list[tuple[int, float]] = []
        best = -math.inf
        for st, v in zip(steps[onset_row:].tolist(), s[onset_row:].tolist(), strict=True):
            if v > best:
                best = v
                rises.append((int(st), float(v)))
        return OracleTrace(before, rises)
    family = spec.family  # type: ignore[attr-defined]
    worst = 0.0
    for fam, p in combinations(include_healthy=False):
        if fam != family or PATHOLOGIES[p].kind not in TARGET_KINDS or PATHOLOGIES[p].from_start:
            continue
        try:
            m1 = _noise_free(spec, p)
        except ValueError:
            continue
        res = _cusum(rows, m0, m1, len(rows))
        if res is not None:
            worst = max(worst, float(res[1].max()))
    return OracleTrace(worst, [])


def threshold_for(healthy_max: Sequence[float], rate: float) -> float:
    """The threshold at which the oracle warns on ``rate`` of the healthy runs (their largest CUSUM values)."""
    vals = sorted(healthy_max)
    if not vals:
        return math.inf
    k = int(math.floor(rate * len(vals)))  # runs allowed over the threshold
    if k <= 0:
        return vals[-1]
    return vals[-k - 1] if k < len(vals) else 0.0
