"""The healthy noise grid of the calibration harness: unit-scale noise processes, one per model.

Each model draws a unit-variance noise sequence per logged key (``unit``); the stream maker scales it by the key's
own noise level and lays it on the key's healthy latent path. The grid is explicit and ours (not the detection
generator's noise): the shapes a healthy run's noise takes that trip rules fitted to iid noise.

* ``iid``: Gaussian, independent from row to row;
* ``ar1_0.5`` / ``ar1_0.8`` / ``ar1_0.95``: AR(1) with that coefficient (unit stationary variance): batch noise
  that carries over (a replay buffer, a slow data order, a shared prompt pool); at 0.95 a slow wander;
* ``t3``: Gaussian with 2 % of the rows replaced by a Student-t(3) draw three times the noise's scale (isolated
  outliers: a long batch, a bad shard);
* ``binom_g4`` / ``binom_g8`` / ``binom_g16``: GRPO rewards as success rates over prompts x completions (2 x 4,
  2 x 8, 4 x 16) drawn as Bernoulli groups, with the group statistics TRL logs (and DPO's accuracy as a binomial
  over the same batch); the other keys iid;
* ``band``: Gaussian band-passed to periods of 4-16 rows (an oscillation nobody caused: data order, a cyclic
  sampler);
* ``drift``: iid plus a slow saturating drift of 3 noise-sigmas in the direction the key already moves
  (``1 - exp(-t / tau)``, tau 10-30 % of the run): a saturating KL, a loss that keeps settling;
* ``iid_every10`` / ``ar1_0.8_every10``: the noise per optimizer step, logged every 10 steps the way TRL does
  (the mean of the window; ``grad_norm`` and counters the value at the logging step).
"""

from __future__ import annotations

import math

import numpy as np

MODELS: tuple[str, ...] = ("iid", "ar1_0.5", "ar1_0.8", "ar1_0.95", "t3", "binom_g4", "binom_g8", "binom_g16",
                           "band", "drift", "iid_every10", "ar1_0.8_every10")
"""The grid, in table order."""

BINOMIAL: dict[str, tuple[int, int]] = {"binom_g4": (2, 4), "binom_g8": (2, 8), "binom_g16": (4, 16)}
"""Binomial models: (prompts, completions per prompt) of a logged row."""
EVERY: dict[str, int] = {"iid_every10": 10, "ar1_0.8_every10": 10}
"""Models logged every k optimizer steps (the rest log every step)."""
OUTLIER_RATE = 0.02
OUTLIER_SCALE = 3.0
DRIFT_SIGMAS = 3.0
BAND_PERIODS = (4.0, 16.0)


def base_model(model: str) -> str:
    """The per-step process of a model: ``ar1_0.8_every10`` is AR(1) 0.8 per step; a binomial model's other keys iid."""
    if model in BINOMIAL:
        return "iid"
    return model.removesuffix("_every10")


def unit(model: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-variance noise of ``model`` over ``n`` steps (the drift model's drift is added by ``drift``)."""
    base = base_model(model)
    if base.startswith("ar1_"):
        return ar1(rng.standard_normal(n), float(base.removeprefix("ar1_")))
    if base == "t3":
        z = rng.standard_normal(n)
        hit = rng.random(n) < OUTLIER_RATE
        return np.where(hit, OUTLIER_SCALE * rng.standard_t(3.0, n), z)
    if base == "band":
        return band(rng.standard_normal(n), *BAND_PERIODS)
    return rng.standard_normal(n)


def ar1(w: np.ndarray, rho: float) -> np.ndarray:
    """AR(1) with coefficient ``rho`` and unit stationary variance, started in its stationary law."""
    out = np.empty_like(w)
    out[0] = w[0]
    s = math.sqrt(1.0 - rho * rho)
    for i in range(1, len(w)):
        out[i] = rho * out[i - 1] + s * w[i]
    return out


def band(w: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """White noise band-passed to periods in [lo, hi] (in steps), rescaled to unit variance."""
    n = len(w)
    f = np.fft.rfftfreq(n)
    spec = np.fft.rfft(w)
    spec[(f < 1.0 / hi) | (f > 1.0 / lo)] = 0.0
    x = np.fft.irfft(spec, n)
    sd = float(np.std(x))
    return x / sd if sd > 0 else x


def drift(n: int, direction: float, rng: np.random.Generator) -> np.ndarray:
    """The drift model's slow saturating drift, in noise sigmas: ``direction * 3 * (1 - exp(-t / tau))``."""
    tau = rng.uniform(0.1, 0.3) * n
    t = np.arange(n, dtype=float)
    return direction * DRIFT_SIGMAS * (1.0 - np.exp(-t / tau))
