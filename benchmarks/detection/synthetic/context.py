"""Per-run state shared by the family builders: the step grid, the onset, the random streams, the noise
model and the pathology ramps.

The noise model (calibrated on ``shared/real-logs``, see ``__init__``):

* every series is built per optimizer step, then reduced to logged rows the way TRL does it: a row holds
  the mean of the steps since the last row (``logging_steps`` > 1 averages the batch noise away), except
  ``grad_norm``, ``learning_rate`` and counters, which are the value at the logging step, and PPO, whose
  rows are single updates;
* per-step batch noise is heavy-tailed (Student-t, 3-8 degrees of freedom, drawn per run) with a little
  row-to-row correlation, and a slow autocorrelated wander is added where real runs drift;
* rare multiplicative outliers (single-step spikes) hit KL, entropy and the gradient norm, as in the real
  logs (a healthy KL of 0.05 with one 0.59 step; an entropy of 0.04 with one 0.3 step).

Baseline randomness comes from ``default_rng(seed)`` and pathology randomness from a second generator, so a
pathological run is the healthy run of the same seed until its onset (except the few pathologies that need
a different run configuration from the first step, see ``tests/test_synthetic.py``).
"""

from __future__ import annotations

import math

import numpy as np

# Keys TRL writes as the value at the logging step rather than the mean over the steps since the last row.
LAST_VALUE_KEYS = frozenset({"grad_norm", "learning_rate", "num_tokens", "epoch", "episode"})


class Ctx:
    """The step grid, the onset and the random streams of one run."""

    def __init__(
        self,
        family: str,
        pathology: str | None,
        n_steps: int,
        logging_steps: int,
        noise: float,
        seed: int,
        onset: float | int | None,
        from_start: bool,
        onset_range: tuple[float, float] | None,
        noise_model: str | None = None,
    ) -> None:
        self.family = family
        self.pathology = pathology
        self.n_steps = n_steps
        self.ls = logging_steps
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self.prng = np.random.default_rng([seed, 0x5EED])
        self.t = np.arange(1, n_steps + 1, dtype=np.int64)  # optimizer steps
        self.n = n_steps
        self.u = self.t / n_steps
        self.row_steps = np.arange(logging_steps, n_steps + 1, logging_steps, dtype=np.int64)
        self.n_rows = len(self.row_steps)
        # run-level noise shape (baseline stream, always drawn first): most batch statistics are close to
        # normal; losses, gradient norms, per-token KL and entropy have fat tails in the real logs
        self.dof = float(self.rng.uniform(6.0, 15.0))
        self.dof_heavy = float(self.rng.uniform(2.5, 4.5))
        self.phi = float(self.rng.uniform(0.0, 0.25))
        # an alternative healthy noise model (NOISE_MODELS): drawn from its own stream, so the baseline is unchanged
        if noise_model is not None and noise_model not in NOISE_MODELS:
            raise ValueError(f"unknown noise model {noise_model!r}; expected one of {NOISE_MODELS}")
        self.noise_model = noise_model
        self.nrng = np.random.default_rng([seed, 0x0A41])
        if noise_model == "ar1_t3":
            self.phi = float(self.nrng.uniform(0.3, 0.6))
        # the onset fraction is always drawn first from the pathology stream so that it stays aligned
        lo, hi = onset_range if onset_range is not None and not from_start else (0.3, 0.7)
        frac = self.prng.uniform(lo, hi)
        self.marks: dict[str, int] = {}
        self.onset: int | None = None  # first logged step that holds the pathology
        self.s0 = n_steps + 1  # first optimizer step that holds it
        if pathology is not None:
            self.onset = int(self.row_steps[0]) if from_start else self._resolve_onset(onset, frac)
            self.s0 = 1 if from_start else self.onset - logging_steps + 1
        self.after = self.t >= self.s0
        self.i0 = min(self.s0 - 1, n_steps)  # index of the first step with the pathology
        self.remaining = max(n_steps - self.s0 + 1, 1)

    def _resolve_onset(self, onset: float | int | None, frac: float) -> int:
        if onset is None:
            target = frac * self.n_steps
        elif isinstance(onset, bool):
            raise TypeError("onset must be a fraction in (0, 1), a step number or None")
        elif isinstance(onset, (int, np.integer)):
            if not 1 <= onset <= self.n_steps:
                raise ValueError(f"onset step {onset} outside 1..{self.n_steps}")
            target = float(onset)
        elif isinstance(onset, (float, np.floating)):
            if not 0.0 < onset < 1.0:
                raise ValueError(f"onset fraction {onset} outside (0, 1)")
            target = onset * self.n_steps
        else:
            raise TypeError("onset must be a fraction in (0, 1), a step number or None")
        idx = int(np.searchsorted(self.row_steps, math.ceil(target - 1e-9)))
        return int(self.row_steps[min(idx, self.n_rows - 1)])

    # -- noise (baseline stream) -----------------------------------------------------------------
    def z(self, heavy: bool = False) -> np.ndarray:
        """Per-step batch noise: unit-variance Student-t (``heavy``: 2.5-4.5 degrees of freedom, else 6-15),
        lightly autocorrelated, scaled by ``noise``."""
        dof = self.dof_heavy if heavy else self.dof
        z = self._shape(self.rng.standard_t(dof, self.n), dof)
        if self.noise_model == "ar1_t3":  # 1 % of the steps: a Student-t(3) outlier, 3x the batch noise's scale
            hit = self.nrng.random(self.n) < OUTLIER_RATE
            z = np.where(hit, 3.0 * self.nrng.standard_t(3.0, self.n), z)
        return z * self.noise

    def wander(self, tau_steps: float) -> np.ndarray:
        """Slow autocorrelated drift (unit stationary variance, correlation time ``tau_steps``)."""
        return _smooth(self.rng.standard_normal(self.n), tau_steps) * self.noise

    def spikes(self, prob: float, lo: float, hi: float) -> np.ndarray:
        """Multiplicative single-step outliers: 1 everywhere except on ~``prob`` of the steps."""
        hit = self.rng.random(self.n) < prob * min(self.noise, 2.0)
        size = self.rng.uniform(lo, hi, self.n)
        return np.where(hit, size, 1.0)

    def pz(self) -> np.ndarray:
        """Per-step noise from the pathology stream (extra noise a pathology adds after onset)."""
        return self._shape(self.prng.standard_t(self.dof, self.n), self.dof) * self.noise

    def _shape(self, x: np.ndarray, dof: float) -> np.ndarray:
        x = x * math.sqrt((dof - 2.0) / dof)
        if self.phi > 0.0:  # AR(1) with unit stationary variance
            x = _ar1(x, self.phi)
        return x

    # -- pathology ramps (step resolution) -------------------------------------------------------
    def x(self, span_steps: float) -> np.ndarray:
        """0 before onset, then (steps since onset + 1) / span: 1 after ``span_steps`` steps, unclipped."""
        span = max(span_steps, 3.0 * self.ls, 3.0)
        return np.where(self.after, (self.t - self.s0 + 1) / span, 0.0)

    def ramp(self, lo: float, hi: float, of_run: bool = False) -> np.ndarray:
        """0 before onset, rising linearly to 1 over ``U(lo, hi)`` of the remaining run (or of the whole
        run), already > 0 at the onset step, and reaching 1 by the last step at the latest."""
        base = self.n if of_run else self.remaining
        span = min(self.prng.uniform(lo, hi) * base, float(self.remaining))
        return np.clip(self.x(span), 0.0, 1.0)

    def over_rest(self) -> np.ndarray:
        """0 before onset, linear to 1 at the last step."""
        return np.clip(self.x(float(self.remaining)), 0.0, 1.0)

    def freeze(self, a: np.ndarray) -> np.ndarray:
        """Hold ``a`` at its onset value from onset on."""
        out = np.asarray(a, dtype=float).copy()
        if self.onset is not None:
            out[self.after] = out[self.i0]
        return out

    def mark(self, name: str, crossed: np.ndarray) -> None:
        """Record the first logged step whose row covers a step where ``crossed`` holds (after onset)."""
        idx = np.flatnonzero(crossed & self.after)
        if len(idx):
            step = int(self.t[idx[0]])
            self.marks[name] = int(math.ceil(step / self.ls) * self.ls)

    # -- reduction to logged rows ----------------------------------------------------------------
    def to_rows(self, key: str, a: np.ndarray, per_update: bool = False) -> np.ndarray:
        """Step series -> logged rows: the mean over each logging window, or the value at the logging step
        (``LAST_VALUE_KEYS``; everything when ``per_update``: PPO logs single updates)."""
        a = np.asarray(a, dtype=float)
        if per_update or key in LAST_VALUE_KEYS or self.ls == 1:
            return a[self.row_steps - 1]
        m = self.n_rows * self.ls
        return a[:m].reshape(self.n_rows, self.ls).mean(axis=1)


NOISE_MODELS = ("ar1_t3", "binomial", "saturating_kl")
"""Healthy noise models beside the default (issue #28), each a block of healthy runs in the benchmark:

* ``ar1_t3``: every batch noise AR(1) with rho 0.3-0.6 (the default: 0-0.25), and 1 % of the steps a Student-t(3)
  outlier three times the noise's scale;
* ``binomial`` (GRPO): one verifier reward whose success rate climbs from 0.12-0.2 to 0.4-0.55, a batch of 2-4
  prompts x 8 completions, the format reward already learned: the reward's row-to-row noise grows like
  sqrt(p(1-p)) as it learns;
* ``saturating_kl`` (PPO, GRPO with beta): the KL rises as 1 - exp(-t/tau), tau 3-20 % of the run, and stays
  there: a decelerating curve by construction.
"""
OUTLIER_RATE = 0.01


def _ar1(x: np.ndarray, phi: float) -> np.ndarray:
    """AR(1) filter with unit stationary variance, via an exponential kernel cut where it falls under 1e-4."""
    k = phi ** np.arange(12 if phi <= 0.25 else int(math.log(1e-4) / math.log(phi)) + 1)
    y = np.convolve(x, k)[: len(x)]
    return y * math.sqrt(1.0 - phi * phi)


def _smooth(x: np.ndarray, tau: float) -> np.ndarray:
    """Exponential smoothing with correlation time ``tau`` steps, rescaled to unit variance."""
    if tau <= 1.0:
        return x
    k = np.exp(-np.arange(int(min(4 * tau, 4000)) + 1) / tau)
    if len(x) > 20_000:  # long runs: FFT convolution keeps the 100k-step benchmark fast
        n = len(x) + len(k) - 1
        size = 1 << (n - 1).bit_length()
        y = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(k, size), size)[: len(x)]
    else:
        y = np.convolve(x, k)[: len(x)]
    return y / math.sqrt(float(np.sum(k * k)))


# -- small numeric helpers ----------------------------------------------------------------------


def phi_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (tanh approximation, error < 1e-3): numpy has no erf."""
    return 0.5 * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def smoothstep(d: np.ndarray) -> np.ndarray:
    return d * d * (3.0 - 2.0 * d)


def sat(u: np.ndarray, tau: float) -> np.ndarray:
    """Saturating rise 0 -> 1 over the run with time constant ``tau`` (fraction of the run)."""
    return (1.0 - np.exp(-u / tau)) / (1.0 - math.exp(-1.0 / tau))


def sigmoid_rise(u: np.ndarray, centre: float, width: float) -> np.ndarray:
    """A sigmoid step 0 -> 1 centred at ``centre`` (fraction of the run), normalised to span [0, 1]."""
    s = 1.0 / (1.0 + np.exp(-(u - centre) / width))
    s0, s1 = 1.0 / (1.0 + math.exp(centre / width)), 1.0 / (1.0 + math.exp(-(1.0 - centre) / width))
    return (s - s0) / (s1 - s0)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def count_noise(p: np.ndarray, n: int, z: np.ndarray) -> np.ndarray:
    """Share of ``n`` Bernoulli(p) draws, via a normal approximation driven by pre-drawn ``z`` (so that a
    changed ``p`` does not reshuffle the random stream)."""
    p = np.clip(p, 0.0, 1.0)
    k = np.rint(n * p + np.sqrt(n * p * (1.0 - p)) * z)
    return np.clip(k, 0, n) / n + 0.0  # + 0.0 turns -0.0 into 0.0


def accelerate(x: np.ndarray, target: float, cap: float, a: float = 3.0) -> np.ndarray:
    """Exponential growth that reaches ``target`` at x = 1 and is capped at ``cap``."""
    return np.minimum(target * np.expm1(a * x) / math.expm1(a), cap)


def lr_schedule(t: np.ndarray, n_steps: int, peak: float, warm_frac: float, decay: str) -> np.ndarray:
    """Linear warm-up over ``warm_frac`` of the run (may exceed 1: the peak is never reached), then linear,
    cosine or no decay to the last step."""
    s = t.astype(float)
    warm = max(1.0, warm_frac * n_steps) if warm_frac > 0 else 0.0
    p = np.clip((s - warm) / max(n_steps - warm, 1.0), 0.0, 1.0)
    if decay == "cosine":
        after = peak * 0.5 * (1.0 + np.cos(math.pi * p))
    elif decay == "linear":
        after = peak * (1.0 - p)
    else:
        after = np.full_like(s, peak)
    return np.where(s <= warm, peak * s / max(warm, 1.0), after) if warm > 0 else after


def nan_out(ctx: Ctx, cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    """From onset: loss and ``keys`` NaN, grad_norm NaN or +inf (both happen in practice)."""
    grad_bad = math.inf if ctx.prng.random() < 0.3 else math.nan
    for k in ("loss", *keys):
        if k in cols:
            cols[k] = cols[k].astype(float)
            cols[k][ctx.after] = math.nan
    cols["grad_norm"][ctx.after] = grad_bad


def freeze_all(ctx: Ctx, cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    """dead_run: gradients exactly 0 and the listed model-dependent series frozen at onset."""
    for k in ("loss", *keys):
        if k in cols:
            cols[k] = ctx.freeze(cols[k])
    cols["grad_norm"][ctx.after] = 0.0
