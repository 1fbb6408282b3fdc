"""Labelled synthetic training logs shaped like TRL 1.16 ``trainer.state.log_history``.

Real logs rarely come with ground truth, so the health monitor is tested (and its detection
quality benchmarked) against generated runs whose pathology and onset step are known.  Each run
is a list of plain dicts with the exact key names TRL/transformers write, realistic magnitudes and
batch noise (calibrated on the public logs in ``shared/real-logs``), optional eval rows and the
closing ``train_runtime`` summary row.

Design notes:

* Every series is built as a smooth latent trend, then observed through per-row noise.  Baseline
  randomness comes from ``default_rng(seed)`` and pathology randomness from a second generator, so
  for a given ``(family, seed)`` a pathological run is identical to the healthy run before its
  onset (except ``kl_near_zero`` and GRPO ``ratio_blowup``, which by nature differ from step 1).
* Pathologies develop over a realistic span of steps, not a single row (except ``nan`` and the
  jump of ``loss_spike``), and leave traces in neighbouring series the way real failures do.
* Everything is vectorised per series with numpy; dicts are only built at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "FAMILIES",
    "FAMILY_KEYS",
    "PATHOLOGIES",
    "Pathology",
    "SyntheticRun",
    "combinations",
    "expected_gauges",
    "generate_run",
    "healthy_run",
]

FAMILIES: tuple[str, ...] = ("grpo", "grpo_kl", "dpo", "ppo", "sft")
"""``grpo`` is TRL's default (beta = 0: no ``kl`` key, on-policy so clip ratios are exactly 0);
``grpo_kl`` has beta > 0 and logs the per-token ``kl``."""

REWARD_FUNCS: tuple[str, ...] = ("accuracy_reward", "format_reward")

_COMMON_KEYS = ("loss", "grad_norm", "learning_rate")
_GRPO_KEYS = (
    "num_tokens",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
    *(f"rewards/{fn}/{stat}" for fn in REWARD_FUNCS for stat in ("mean", "std")),
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_mean",
    "clip_ratio/high_max",
    "clip_ratio/region_mean",
    "step_time",
)
_DPO_KEYS = (
    "entropy",
    "num_tokens",
    "logits/chosen",
    "logits/rejected",
    "mean_token_accuracy",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)
_PPO_KEYS = (
    "eps",
    "objective/kl",
    "objective/entropy",
    "objective/non_score_reward",
    "objective/rlhf_reward",
    "objective/scores",
    "policy/approxkl_avg",
    "policy/clipfrac_avg",
    "loss/policy_avg",
    "loss/value_avg",
    "val/clipfrac_avg",
    "policy/entropy_avg",
    "val/ratio",
    "val/ratio_var",
    "val/num_eos_tokens",
    "episode",
)
_SFT_KEYS = ("entropy", "num_tokens", "mean_token_accuracy")
_TAIL_KEYS = ("epoch", "step")

FAMILY_KEYS: dict[str, tuple[str, ...]] = {
    "grpo": (*_COMMON_KEYS, *_GRPO_KEYS, *_TAIL_KEYS),
    "grpo_kl": (*_COMMON_KEYS, *_GRPO_KEYS[:-7], "kl", *_GRPO_KEYS[-7:], *_TAIL_KEYS),
    "dpo": (*_COMMON_KEYS, *_DPO_KEYS, *_TAIL_KEYS),
    "ppo": (*_COMMON_KEYS, *_PPO_KEYS, *_TAIL_KEYS),
    "sft": (*_COMMON_KEYS, *_SFT_KEYS, *_TAIL_KEYS),
}
"""Keys of every train row per family (eval and summary rows carry their own keys)."""

EVAL_KEYS: tuple[str, ...] = ("eval_loss", "eval_runtime", "eval_samples_per_second", "epoch", "step")
SUMMARY_KEYS: tuple[str, ...] = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "total_flos",
    "train_loss",
    "epoch",
    "step",
)


@dataclass(frozen=True)
class Pathology:
    """A labelled failure mode: where it can occur and which gauges should catch it."""

    name: str
    families: tuple[str, ...]
    gauges: tuple[str, ...]
    """Gauge ids expected to flag it (union over families; any one of them counts)."""
    description: str


_ALL = FAMILIES
_GRPOS = ("grpo", "grpo_kl")

PATHOLOGIES: dict[str, Pathology] = {
    p.name: p
    for p in (
        Pathology(
            "kl_runaway",
            ("grpo_kl", "ppo"),
            ("kl",),
            "KL accelerates without bound: past 1.0 per token (GRPO) or ~30 per sequence (PPO) "
            "within 20-40 % of the remaining run.",
        ),
        Pathology(
            "kl_near_zero",
            ("grpo_kl", "ppo"),
            ("kl",),
            "KL stays ~1e-5 from the first step while training proceeds (beta too high or the "
            "reference model is the policy).",
        ),
        Pathology(
            "negative_kl",
            ("ppo",),
            ("kl",),
            "objective/kl turns clearly negative (-0.5 .. -2): sampling and scoring disagree.",
        ),
        Pathology(
            "reward_hacking",
            ("grpo", "grpo_kl", "ppo"),
            ("reward", "length", "kl"),
            "Reward climbs well beyond its trend while completions grow 2-3x longer (PPO: fewer "
            "EOS tokens, longer sequences) and KL, where logged, rises.",
        ),
        Pathology(
            "margin_collapse",
            ("dpo",),
            ("reward",),
            "DPO margins shrink back towards 0, chosen and rejected rewards converge, accuracy drops towards 0.5.",
        ),
        Pathology(
            "reward_std_collapse",
            _GRPOS,
            ("reward_signal",),
            "Every completion of a group earns the same reward: reward_std < 0.02, "
            "frac_reward_zero_std > 0.9, learning stalls.",
        ),
        Pathology(
            "entropy_collapse",
            _GRPOS,
            ("entropy",),
            "Token entropy falls below 20 % of its start over 15-25 % of the run.",
        ),
        Pathology(
            "length_explosion",
            _GRPOS,
            ("length",),
            "Mean completion length grows 3x or more; clipped_ratio rises.",
        ),
        Pathology(
            "length_collapse",
            _GRPOS,
            ("length",),
            "Terse collapse: mean length < 40 % of baseline, min_length 1-5, length spread collapses.",
        ),
        Pathology(
            "truncation",
            _GRPOS,
            ("length",),
            "Most completions hit max_completion_length: clipped_ratio > 0.5, mean_length pinned at "
            "the cap, mean_terminated_length well below it.",
        ),
        Pathology(
            "ratio_blowup",
            ("grpo", "grpo_kl", "ppo"),
            ("policy_ratio",),
            "Importance ratio runs away: PPO val/ratio leaves [0.5, 2.0] with clipfrac > 0.4; GRPO "
            "(num_iterations > 1, clip ratios 0.05-0.15 before onset) clip_ratio/region_mean > 0.4.",
        ),
        Pathology(
            "loss_spike",
            ("sft", "dpo"),
            ("loss",),
            "Loss jumps to 3-10x its running level at onset, stays elevated 5-15 rows, then partly recovers.",
        ),
        Pathology(
            "nan",
            _ALL,
            ("loss", "gradients"),
            "loss and grad_norm become NaN (grad_norm sometimes inf) from onset to the end.",
        ),
        Pathology(
            "dead_run",
            _ALL,
            ("gradients", "reward_signal"),
            "grad_norm exactly 0.0 and loss frozen from onset (GRPO: reward, stds and lengths "
            "frozen, frac_reward_zero_std 1.0).",
        ),
        Pathology(
            "eval_divergence",
            ("sft",),
            ("convergence",),
            "Train loss keeps falling while eval_loss rises from onset (overfitting); forces with_eval.",
        ),
    )
}

# Gauges that can see a pathology depend on what the family logs.
_FAMILY_GAUGES: dict[tuple[str, str], tuple[str, ...]] = {
    ("reward_hacking", "grpo"): ("reward", "length"),
    ("reward_hacking", "grpo_kl"): ("reward", "length", "kl"),
    ("reward_hacking", "ppo"): ("reward", "kl"),
    ("dead_run", "grpo"): ("gradients", "reward_signal"),
    ("dead_run", "grpo_kl"): ("gradients", "reward_signal"),
    ("dead_run", "dpo"): ("gradients",),
    ("dead_run", "ppo"): ("gradients",),
    ("dead_run", "sft"): ("gradients",),
}


def expected_gauges(pathology: str | None, family: str) -> tuple[str, ...]:
    """Gauge ids that should flag ``pathology`` on a ``family`` run (empty for healthy runs)."""
    if pathology is None:
        return ()
    return _FAMILY_GAUGES.get((pathology, family), PATHOLOGIES[pathology].gauges)


def combinations(include_healthy: bool = True) -> list[tuple[str, str | None]]:
    """Every allowed ``(family, pathology)`` pair, healthy (``None``) first per family."""
    out: list[tuple[str, str | None]] = []
    for fam in FAMILIES:
        if include_healthy:
            out.append((fam, None))
        out.extend((fam, name) for name, p in PATHOLOGIES.items() if fam in p.families)
    return out


@dataclass
class SyntheticRun:
    """A generated run and its label."""

    family: str
    pathology: str | None
    onset_step: int | None
    """First ``row["step"]`` at which the pathology is present (None for healthy runs)."""
    rows: list[dict[str, float]]
    seed: int
    expected_gauges: tuple[str, ...] = field(default=())

    @property
    def train_rows(self) -> list[dict[str, float]]:
        """Rows that carry ``loss`` (neither eval nor summary rows)."""
        return [r for r in self.rows if "loss" in r]

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of the rows holding ``key``, for quick checks and plots."""
        pairs = [(r["step"], r[key]) for r in self.rows if key in r]
        if not pairs:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        steps, vals = zip(*pairs, strict=True)
        return np.asarray(steps, dtype=np.int64), np.asarray(vals, dtype=float)


# --------------------------------------------------------------------------------------------
# small numeric helpers


def _phi(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (tanh approximation, error < 1e-3): numpy has no erf."""
    return 0.5 * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def _smoothstep(d: np.ndarray) -> np.ndarray:
    return d * d * (3.0 - 2.0 * d)


def _sat(u: np.ndarray, tau: float) -> np.ndarray:
    """Saturating rise 0 -> 1 over the run with time constant ``tau`` (fraction of the run)."""
    return (1.0 - np.exp(-u / tau)) / (1.0 - math.exp(-1.0 / tau))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _lr_schedule(steps: np.ndarray, n_steps: int, peak: float, cosine: bool) -> np.ndarray:
    """Linear warm-up over 5 % of the run, then linear or cosine decay to 0 at the last step."""
    warm = max(1, round(0.05 * n_steps))
    s = steps.astype(float)
    p = np.clip((s - warm) / max(n_steps - warm, 1), 0.0, 1.0)
    decay = 0.5 * (1.0 + np.cos(math.pi * p)) if cosine else 1.0 - p
    return np.where(s <= warm, peak * s / warm, peak * decay)


def _count_noise(p: np.ndarray, n: int, z: np.ndarray) -> np.ndarray:
    """Share of ``n`` Bernoulli(p) draws, via a normal approximation driven by pre-drawn ``z``
    (so that a changed ``p`` does not reshuffle the random stream)."""
    p = np.clip(p, 0.0, 1.0)
    k = np.rint(n * p + np.sqrt(n * p * (1.0 - p)) * z)
    return np.clip(k, 0, n) / n + 0.0  # + 0.0 turns -0.0 into 0.0


class _Ctx:
    """Per-run state shared by the family builders."""

    def __init__(
        self,
        family: str,
        pathology: str | None,
        n_steps: int,
        logging_steps: int,
        noise: float,
        seed: int,
        onset: float | int | None,
    ) -> None:
        self.family = family
        self.pathology = pathology
        self.n_steps = n_steps
        self.ls = logging_steps
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self.prng = np.random.default_rng([seed, 0x5EED])
        self.steps = np.arange(logging_steps, n_steps + 1, logging_steps, dtype=np.int64)
        self.n = len(self.steps)
        self.u = self.steps / n_steps
        # the onset fraction is always drawn first so that the pathology stream stays aligned
        frac = self.prng.uniform(0.3, 0.7)
        self.onset: int | None = None
        if pathology is not None:
            self.onset = self._resolve_onset(onset, frac)
        self.after = self.steps >= self.onset if self.onset is not None else np.zeros(self.n, dtype=bool)
        self.i0 = int(np.argmax(self.after)) if self.onset is not None else self.n
        self.remaining = (self.n_steps - self.onset + self.ls) if self.onset is not None else 0

    def _resolve_onset(self, onset: float | int | None, frac: float) -> int:
        if self.pathology == "kl_near_zero":
            return int(self.steps[0])
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
        idx = int(np.searchsorted(self.steps, math.ceil(target - 1e-9)))
        return int(self.steps[min(idx, self.n - 1)])

    # noise ---------------------------------------------------------------------------------
    def z(self, smooth_rows: float = 0.0) -> np.ndarray:
        """Standard normal noise scaled by ``noise``; optionally smoothed (slow wander)."""
        z = self.rng.standard_normal(self.n)
        if smooth_rows > 1.0:
            k = np.exp(-np.arange(int(4 * smooth_rows) + 1) / smooth_rows)
            z = np.convolve(z, k)[: self.n] / math.sqrt(float(np.sum(k * k)))
        return z * self.noise

    def wander_rows(self, frac: float = 0.03) -> float:
        return float(np.clip(frac * self.n, 1.0, 200.0))

    # pathology ramps -------------------------------------------------------------------------
    def _x(self, length: float) -> np.ndarray:
        length = max(length, 3.0 * self.ls)
        length = min(length, float(max(self.remaining, self.ls)))
        x = (self.steps - self.onset + self.ls) / length
        return np.where(self.after, x, 0.0)

    def ramp(self, lo: float, hi: float, of_run: bool = False) -> np.ndarray:
        """0 before onset, rising linearly to 1 over ``U(lo, hi)`` of the remaining run (or of the
        whole run), already > 0 at the onset row, and reaching 1 by the last row at the latest."""
        base = self.n_steps if of_run else self.remaining
        return np.clip(self._x(self.prng.uniform(lo, hi) * base), 0.0, 1.0)

    def excess(self, lo: float, hi: float) -> np.ndarray:
        """Like :meth:`ramp` but unclipped (keeps growing past 1), for accelerating failures."""
        return self._x(self.prng.uniform(lo, hi) * self.remaining)

    def rows_since_onset(self) -> np.ndarray:
        return np.arange(self.n) - self.i0

    def freeze(self, a: np.ndarray) -> np.ndarray:
        """Hold ``a`` at its onset value from onset on."""
        out = a.astype(float, copy=True)
        if self.onset is not None:
            out[self.after] = a[self.i0]
        return out


def _accelerate(x: np.ndarray, target: float, cap: float, a: float = 3.0) -> np.ndarray:
    """Exponential growth that reaches ``target`` at x = 1 and is capped at ``cap``."""
    return np.minimum(target * np.expm1(a * x) / math.expm1(a), cap)


def _spike_profile(ctx: _Ctx, f_lo: float, f_hi: float) -> np.ndarray:
    """Multiplicative loss factor for a sustained spike: jump to F at onset, a 5-15 row plateau
    that stays >= 2.5x, then a fast partial recovery leaving a slowly fading residual."""
    pr = ctx.prng
    big = pr.uniform(f_lo, f_hi)
    end = min(big, max(2.5, big * pr.uniform(0.55, 0.85)))
    width = int(pr.integers(5, 16))
    resid = pr.uniform(0.05, 0.4)
    j = ctx.rows_since_onset().astype(float)
    f = np.ones(ctx.n)
    win = (j >= 0) & (j < width)
    f[win] = big + (end - big) * j[win] / max(width - 1, 1)
    post = j >= width
    jp = j[post] - width
    f[post] = (
        1.0 + resid * np.exp(-jp / (6.0 * width)) + (end - 1.0 - resid) * np.exp(-(jp + 1.0) / max(width / 3.0, 1.0))
    )
    return f


def _nan_out(ctx: _Ctx, cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    """From onset: loss and ``keys`` NaN, grad_norm NaN or +inf (both happen in practice)."""
    bad = ctx.after
    grad_bad = math.inf if ctx.prng.random() < 0.3 else math.nan
    for k in ("loss", *keys):
        if k in cols:
            cols[k] = cols[k].astype(float)
            cols[k][bad] = math.nan
    cols["grad_norm"][bad] = grad_bad


def _freeze_all(ctx: _Ctx, cols: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    """dead_run: gradients exactly 0 and the listed model-dependent series frozen at onset."""
    for k in ("loss", *keys):
        if k in cols:
            cols[k] = ctx.freeze(cols[k])
    cols["grad_norm"][ctx.after] = 0.0


# --------------------------------------------------------------------------------------------
# GRPO


def _grpo(ctx: _Ctx) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """GRPO rows (TRL 1.16 GRPOTrainer); ``grpo_kl`` adds ``kl`` and beta * kl in the loss."""
    rng, pr, n, u, path = ctx.rng, ctx.prng, ctx.n, ctx.u, ctx.pathology
    with_kl = ctx.family == "grpo_kl"
    # run configuration
    cap = float(rng.choice([256, 512, 1024]))  # max_completion_length
    n_prompts = int(rng.choice([16, 32, 64]))  # groups per logged step
    group = 8
    batch = n_prompts * group
    prompt_len = rng.uniform(60.0, 300.0)
    beta = 0.04 if with_kl else 0.0
    # healthy trends
    acc0, acc_gain, tau_a = rng.uniform(0.1, 0.35), rng.uniform(0.15, 0.35), rng.uniform(0.2, 0.5)
    fmt0, fmt1, tau_f = rng.uniform(0.4, 0.75), rng.uniform(0.9, 0.98), rng.uniform(0.05, 0.2)
    kap_a, kap_f, rho = rng.uniform(0.6, 0.85), rng.uniform(0.4, 0.6), rng.uniform(0.05, 0.3)
    fz0, fz1 = rng.uniform(0.0, 0.03), rng.uniform(0.03, 0.12)
    len0, len_drift, sig0 = rng.uniform(0.12, 0.28) * cap, rng.uniform(-0.1, 0.1), rng.uniform(0.3, 0.4)
    ent0, ent_dec = rng.uniform(1.4, 2.0), rng.uniform(0.05, 0.25)
    kl_end, kl_pow = rng.uniform(0.04, 0.09), rng.uniform(1.0, 1.6)
    g0, g_trend = rng.uniform(0.1, 0.45), rng.uniform(-0.3, 0.2)
    loss_sd = rng.uniform(0.01, 0.04)
    t0, t_tok = rng.uniform(2.0, 10.0), rng.uniform(0.01, 0.05)
    # noise, always drawn in the same order
    wr = ctx.wander_rows()
    z_acc, z_fmt, z_wa = ctx.z(), ctx.z(), ctx.z(wr)
    z_sa, z_sf, z_rs, z_fz = ctx.z(), ctx.z(), ctx.z(), ctx.z()
    z_len, z_lw, z_clip, z_min, z_max = ctx.z(), ctx.z(wr), ctx.z(), ctx.z(), ctx.z()
    z_ent, z_kl, z_g, z_loss, z_big = ctx.z(), ctx.z(), ctx.z(), ctx.z(), ctx.z()
    big_mask = rng.random(n) < 0.04
    z_cl, z_ch = ctx.z(), ctx.z()
    u_low, u_high = rng.uniform(0.1, 0.6, n), rng.uniform(0.1, 0.8, n)
    z_t = ctx.z()

    acc = acc0 + acc_gain * _sat(u, tau_a)
    fmt = fmt0 + (fmt1 - fmt0) * _sat(u, tau_f)
    div = np.ones(n)  # within-batch reward diversity (1 = healthy)
    fz = fz0 + (fz1 - fz0) * u**1.5
    ell = len0 * (1.0 + len_drift * u)
    sig = np.full(n, sig0)
    ent = ent0 * (1.0 - ent_dec * _sat(u, 0.5))
    kl = kl_end * u**kl_pow
    gscale = np.ones(n)
    lscale = np.ones(n)
    region = np.zeros(n)
    loss_extra = np.zeros(n)
    min_override: tuple[np.ndarray, float] | None = None

    if path == "reward_hacking":
        d = ctx.ramp(0.3, 0.5)
        acc = acc + (pr.uniform(0.85, 0.97) - acc) * _smoothstep(d)
        fmt = fmt + (0.99 - fmt) * d
        ell = ell * (1.0 + (pr.uniform(2.2, 3.0) - 1.0) * d)
        kl = kl + pr.uniform(0.2, 0.6) * d**1.5
        fz = fz + 0.1 * d
        sig = sig * (1.0 + 0.15 * d)
    elif path == "reward_std_collapse":
        d = _smoothstep(ctx.ramp(0.15, 0.3))
        div = div * (1.0 - (1.0 - pr.uniform(0.01, 0.03)) * d)
        fz = fz + (pr.uniform(0.94, 1.0) - fz) * d
        acc = np.where(ctx.after, acc[ctx.i0] + (acc - acc[ctx.i0]) * (1.0 - d), acc)
        gscale = gscale * (1.0 - 0.85 * d)
        lscale = lscale * (1.0 - 0.9 * d)
        ent = ent * (1.0 - 0.25 * d)
        sig = sig * (1.0 - 0.5 * d)
    elif path == "entropy_collapse":
        d = _smoothstep(ctx.ramp(0.15, 0.25, of_run=True))
        floor = pr.uniform(0.04, 0.14)
        ent = ent * (floor + (1.0 - floor) * (1.0 - d))
        div = div * (1.0 - 0.4 * d)
        fz = fz + 0.25 * d
        sig = sig * (1.0 - 0.4 * d)
    elif path == "length_explosion":
        d = ctx.ramp(0.3, 0.5)
        # grow x4.5-7, and at least up to around the cap so that clipping sets in
        growth = max(pr.uniform(4.5, 7.0), pr.uniform(0.9, 1.3) * cap / ell[ctx.i0])
        ell = ell * growth**d
        sig = sig * (1.0 + 0.2 * d)
    elif path == "length_collapse":
        d = _smoothstep(ctx.ramp(0.15, 0.3))
        ell = ell * (1.0 - (1.0 - pr.uniform(0.1, 0.3)) * d)
        sig = sig * (1.0 - 0.55 * d)
        min_override = (d, pr.uniform(1.0, 5.0))
        acc = acc - 0.3 * (acc - acc0) * d
    elif path == "truncation":
        d = _smoothstep(ctx.ramp(0.1, 0.2))
        ell = ell + (pr.uniform(1.8, 2.6) * cap - ell) * d
        sig = sig * (1.0 + 0.5 * d)
    elif path == "ratio_blowup":
        # num_iterations > 1: an off-policy run clips 5-15 % of tokens even when healthy
        rho0, rho1 = pr.uniform(0.05, 0.15), pr.uniform(0.5, 0.75)
        d = ctx.ramp(0.15, 0.3)
        region = rho0 + (rho1 - rho0) * d**1.5
        gscale = gscale * (1.0 + 5.0 * d**2)
        kl = kl * (1.0 + 6.0 * d**2)
        ent = ent * (1.0 + 0.3 * d)
        acc = acc - 0.4 * (acc - acc0) * d
        loss_extra = 0.1 * d
    elif path == "kl_runaway":
        x = ctx.excess(0.2, 0.4)
        target = pr.uniform(1.5, 4.0)
        kl = kl + _accelerate(x, target, 2.0 * target)
        xc = np.minimum(x, 1.0)
        gscale = gscale * (1.0 + 2.0 * np.minimum(x, 1.5))
        ent = ent * (1.0 - 0.3 * xc)
        acc = acc - 0.3 * (acc - acc0) * xc
    elif path == "kl_near_zero":
        kl = np.full(n, 1e-5)

    # ---- rewards
    acc_o = np.clip(acc + 1.5 * np.sqrt(acc * (1 - acc) / batch) * z_acc + 0.02 * z_wa, 0.0, 1.0)
    fmt_o = np.clip(fmt + 1.2 * np.sqrt(fmt * (1 - fmt) / batch) * z_fmt, 0.0, 1.0)
    std_a = kap_a * np.sqrt(acc_o * (1 - acc_o)) * div * np.exp(0.05 * z_sa)
    std_f = kap_f * np.sqrt(fmt_o * (1 - fmt_o)) * div * np.exp(0.05 * z_sf)
    reward = acc_o + fmt_o
    reward_std = np.sqrt(std_a**2 + std_f**2 + 2 * rho * std_a * std_f) * np.exp(0.04 * z_rs)
    frac_zero = _count_noise(fz, n_prompts, z_fz)

    # ---- lengths: lognormal lengths (log-sd ``sig``) cut at ``cap``
    ell = ell * np.exp(0.04 * z_lw)
    zc = (math.log(cap) - np.log(ell) + sig**2 / 2) / sig
    p_clip = 1.0 - _phi(zc)
    clipped = _count_noise(p_clip, batch, z_clip)
    n_term = np.rint(batch * (1.0 - clipped))
    p_term = _phi(zc)
    mt_lat = np.where(p_term > 1e-4, ell * _phi(zc - sig) / np.maximum(p_term, 1e-4), 0.85 * cap)
    mt_lat = np.minimum(mt_lat, 0.97 * cap)
    # sampling noise of the terminated mean, in logit space so that it stays below the cap
    frac_t = np.clip(mt_lat / cap, 1e-4, 0.999)
    spread = np.minimum(1.5 * sig, 0.8) / np.sqrt(np.maximum(n_term, 1.0)) + 0.05  # + prompt mix
    mt = cap / (1.0 + np.exp(-(np.log(frac_t / (1.0 - frac_t)) + spread * z_len)))
    mt = np.where(n_term > 0, np.clip(mt, 1.0, cap - 1.0), 0.0)
    mean_len = clipped * cap + (1.0 - clipped) * mt
    q = 0.85 * math.sqrt(2.0 * math.log(batch))
    lo = np.maximum(1.0, np.rint(ell * np.exp(-q * sig + 0.15 * z_min)))
    if min_override is not None:
        d, tgt = min_override
        lo = np.maximum(1.0, np.rint(lo * (1.0 - d) + tgt * d))
    hi = ell * np.exp(q * sig + 0.1 * z_max)
    has_term = n_term > 0
    ref = np.where(has_term, mt, mean_len)
    min_len = np.minimum(lo, np.floor(ref))
    max_term = np.where(has_term, np.clip(np.rint(hi), np.ceil(mt), cap - 1.0), 0.0)
    max_len = np.where(clipped > 0, cap, max_term)
    min_term = np.where(has_term, min_len, 0.0)
    min_len = np.where(has_term, min_len, cap)

    # ---- policy
    ent_o = ent * np.exp(0.03 * z_ent)
    kl_o = kl * np.exp(0.2 * z_kl)
    if ctx.steps[0] == 1:
        kl_o[0] = 0.0  # the policy is the reference at the first step
    grad = g0 * (1.0 + g_trend * u) * gscale * np.exp(0.3 * z_g)
    loss = lscale * (loss_sd * z_loss + np.where(big_mask, 0.06 * z_big, 0.0)) + loss_extra * z_big
    loss = loss + beta * kl_o
    if np.any(region > 0):
        # low and high clipping are exclusive, so region_mean = low_mean + high_mean
        region_o = np.clip(region * np.exp(0.12 * z_cl), 0.0, 0.95)
        share = np.clip(pr.uniform(0.35, 0.55) + 0.05 * z_ch, 0.1, 0.9)
        low = region_o * share
        high = region_o - low
        low_min = low * (1.0 - np.minimum(1.0, ctx.noise * u_low))
        high_max = np.minimum(high * (1.0 + ctx.noise * u_high), 1.0)
    else:
        low = high = low_min = high_max = np.zeros(n)

    tokens = np.cumsum(np.rint(batch * (prompt_len + mean_len)) * ctx.ls)
    step_time = (t0 + t_tok * max_len) * np.exp(0.08 * z_t)

    cols: dict[str, np.ndarray] = {
        "loss": loss,
        "grad_norm": grad,
        "num_tokens": tokens,
        "completions/mean_length": mean_len,
        "completions/min_length": min_len,
        "completions/max_length": max_len,
        "completions/clipped_ratio": clipped,
        "completions/mean_terminated_length": mt,
        "completions/min_terminated_length": min_term,
        "completions/max_terminated_length": max_term,
        f"rewards/{REWARD_FUNCS[0]}/mean": acc_o,
        f"rewards/{REWARD_FUNCS[0]}/std": std_a,
        f"rewards/{REWARD_FUNCS[1]}/mean": fmt_o,
        f"rewards/{REWARD_FUNCS[1]}/std": std_f,
        "reward": reward,
        "reward_std": reward_std,
        "frac_reward_zero_std": frac_zero,
        "entropy": ent_o,
        "clip_ratio/low_mean": low,
        "clip_ratio/low_min": low_min,
        "clip_ratio/high_mean": high,
        "clip_ratio/high_max": high_max,
        "clip_ratio/region_mean": low + high,
        "step_time": step_time,
    }
    if with_kl:
        cols["kl"] = kl_o

    if path == "nan":
        _nan_out(ctx, cols, ("entropy", "kl"))
    elif path == "dead_run":
        # zero advantages everywhere: identical completions, no gradient, surrogate loss = beta*kl
        length_keys = [k for k in cols if k.startswith("completions/") and k != "completions/clipped_ratio"]
        frozen_len = float(min(np.rint(mean_len[ctx.i0]), cap - 1.0))
        for k in length_keys:
            cols[k][ctx.after] = frozen_len
        cols["completions/clipped_ratio"][ctx.after] = 0.0
        for fn in REWARD_FUNCS:
            cols[f"rewards/{fn}/std"][ctx.after] = 0.0
        cols["reward_std"][ctx.after] = 0.0
        cols["frac_reward_zero_std"][ctx.after] = 1.0
        keys = ("reward", *(f"rewards/{fn}/mean" for fn in REWARD_FUNCS), "entropy", "kl")
        _freeze_all(ctx, cols, keys)
        cols["loss"][ctx.after] = beta * cols["kl"][ctx.i0] if with_kl else 0.0
        frozen_tokens = np.rint(batch * (prompt_len + frozen_len)) * ctx.ls
        inc = np.diff(cols["num_tokens"], prepend=0.0)
        inc[ctx.after] = frozen_tokens
        cols["num_tokens"] = np.cumsum(inc)

    meta = {
        "runtime": float(np.nansum(step_time) * ctx.ls),
        "samples_per_step": float(batch),
        "flos": 0.0,
    }
    return cols, meta


# --------------------------------------------------------------------------------------------
# PPO


def _ppo(ctx: _Ctx) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Rows shaped like TRL's (pre-1.0) PPOTrainer logs; objective/kl is a per-sequence sum."""
    rng, pr, n, u, path = ctx.rng, ctx.prng, ctx.n, ctx.u, ctx.pathology
    batch = int(rng.choice([16, 32, 64]))
    resp_len = rng.uniform(40.0, 160.0)
    kl_coef, vf_coef = 0.05, 0.1
    kl_end, kl_pow = rng.uniform(2.0, 4.0), rng.uniform(0.8, 1.3)
    s0, s_gain, tau_s = rng.uniform(-1.5, 0.5), rng.uniform(0.8, 2.5), rng.uniform(0.2, 0.5)
    e0, e_dec = rng.uniform(0.6, 1.8), rng.uniform(0.05, 0.2)
    akl0, cf0 = rng.uniform(0.005, 0.03), rng.uniform(0.06, 0.15)
    v0, v_dec, vcf0 = rng.uniform(0.3, 2.0), rng.uniform(0.4, 0.8), rng.uniform(0.05, 0.25)
    eos_p = rng.uniform(0.85, 0.98)
    rv0 = 10 ** rng.uniform(-6.0, -4.0)
    g0 = rng.uniform(0.3, 1.5)
    t_step = rng.uniform(5.0, 30.0)
    z_kl, z_kla, z_s, z_sw, z_e, z_oe = ctx.z(), ctx.z(), ctx.z(), ctx.z(ctx.wander_rows()), ctx.z(), ctx.z()
    z_akl, z_cf, z_pl, z_v, z_vcf, z_r, z_rv, z_eos, z_g, z_t = (ctx.z() for _ in range(10))

    kl = kl_end * u**kl_pow
    kl_add_sd = 0.03
    scores = s0 + s_gain * _sat(u, tau_s)
    ent = e0 * (1.0 - e_dec * u)
    akl = akl0 * (1.0 + 0.5 * u)
    cf = cf0 + 0.02 * u
    ratio_log = np.zeros(n)
    rv = np.full(n, rv0)
    vloss = v0 * (1.0 - v_dec * _sat(u, 0.3))
    vcf = vcf0 * (1.0 - 0.6 * u)
    eos = np.full(n, eos_p)
    len_f = np.ones(n)
    gscale = np.ones(n)
    pl_scale = np.ones(n)

    if path == "kl_runaway":
        x = ctx.excess(0.2, 0.4)
        target = pr.uniform(40.0, 80.0)
        kl = kl + _accelerate(x, target, 1.5 * target)
        xc = np.minimum(x, 1.0)
        akl = akl * (1.0 + 6.0 * np.minimum(x, 2.0))
        cf = cf + (pr.uniform(0.25, 0.35) - cf) * xc
        ent = ent * (1.0 - 0.3 * xc)
        gscale = gscale * (1.0 + 2.0 * np.minimum(x, 1.5))
    elif path == "kl_near_zero":
        kl = np.full(n, 1e-5)
        kl_add_sd = 0.0
    elif path == "negative_kl":
        d = _smoothstep(ctx.ramp(0.03, 0.08, of_run=True))
        kl = kl * (1.0 - d) - pr.uniform(0.5, 2.0) * d
    elif path == "reward_hacking":
        d = ctx.ramp(0.3, 0.5)
        scores = scores + pr.uniform(2.0, 4.0) * d**1.3
        kl = kl + pr.uniform(6.0, 15.0) * d**1.5
        len_f = len_f * (1.0 + (pr.uniform(2.0, 3.0) - 1.0) * d)
        eos = eos * (1.0 - 0.6 * d)
        akl = akl * (1.0 + 1.5 * d)
    elif path == "ratio_blowup":
        d = ctx.ramp(0.15, 0.3)
        sign = 1.0 if pr.random() < 0.6 else -1.0
        ratio_log = sign * math.log(pr.uniform(2.4, 4.0)) * d**2
        cf = cf + (pr.uniform(0.45, 0.7) - cf) * d**1.5
        rv = rv * np.exp(math.log(1e5) * d)
        akl = akl * (1.0 + 60.0 * d**2)
        kl = kl * (1.0 + 2.0 * d)
        gscale = gscale * (1.0 + 6.0 * d**2)
        vloss = vloss * (1.0 + 3.0 * d)
        pl_scale = pl_scale * (1.0 + 5.0 * d)

    kl_o = kl * np.exp(0.15 * z_kl) + kl_add_sd * np.abs(z_kla)
    if ctx.steps[0] == 1 and path != "kl_near_zero":
        kl_o[0] = kl_add_sd * abs(z_kla[0])
    scores_o = scores + 0.12 * z_s + 0.05 * z_sw
    nsr = -kl_coef * kl_o
    ent_o = ent * np.exp(0.05 * z_e)
    obj_ent = ent * resp_len * len_f * np.exp(0.08 * z_oe)
    akl_o = akl * np.exp(0.3 * z_akl)
    cf_o = np.clip(cf + 0.02 * z_cf, 0.0, 1.0)
    pol = pl_scale * (-0.005 + 0.02 * z_pl)
    val = vloss * np.exp(0.2 * z_v)
    vcf_o = np.clip(vcf + 0.02 * z_vcf, 0.0, 1.0)
    ratio = np.exp(ratio_log + 0.012 * z_r)
    rv_o = rv * np.exp(0.5 * z_rv)
    n_eos = np.rint(_count_noise(eos, batch, z_eos) * batch)
    grad = g0 * gscale * np.exp(0.25 * z_g)
    times = t_step * len_f * np.exp(0.05 * z_t)

    cols: dict[str, np.ndarray] = {
        "loss": pol + vf_coef * val,
        "grad_norm": grad,
        "eps": np.floor(batch / times),
        "objective/kl": kl_o,
        "objective/entropy": obj_ent,
        "objective/non_score_reward": nsr,
        "objective/rlhf_reward": scores_o + nsr,
        "objective/scores": scores_o,
        "policy/approxkl_avg": akl_o,
        "policy/clipfrac_avg": cf_o,
        "loss/policy_avg": pol,
        "loss/value_avg": val,
        "val/clipfrac_avg": vcf_o,
        "policy/entropy_avg": ent_o,
        "val/ratio": ratio,
        "val/ratio_var": rv_o,
        "val/num_eos_tokens": n_eos,
        "episode": (ctx.steps * batch).astype(float),
    }
    if path == "nan":
        _nan_out(
            ctx,
            cols,
            ("loss/policy_avg", "loss/value_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/ratio"),
        )
    elif path == "dead_run":
        model_keys = tuple(k for k in cols if k.startswith(("objective/", "loss/", "policy/", "val/")))
        _freeze_all(ctx, cols, model_keys)
        for k, v in (
            ("val/ratio", 1.0),
            ("val/ratio_var", 0.0),
            ("policy/clipfrac_avg", 0.0),
            ("val/clipfrac_avg", 0.0),
            ("policy/approxkl_avg", 0.0),
            ("loss/policy_avg", 0.0),
        ):
            cols[k][ctx.after] = v
        cols["loss"] = np.where(ctx.after, vf_coef * cols["loss/value_avg"], cols["loss"])
    meta = {"runtime": float(np.sum(times) * ctx.ls), "samples_per_step": float(batch), "flos": 0.0}
    return cols, meta


# --------------------------------------------------------------------------------------------
# DPO


def _dpo(ctx: _Ctx) -> tuple[dict[str, np.ndarray], dict[str, float], np.ndarray]:
    """DPO rows (sigmoid loss, beta = 0.1); margins are exactly chosen - rejected."""
    rng, pr, n, u, path = ctx.rng, ctx.prng, ctx.n, ctx.u, ctx.pathology
    beta, k_loss = 0.1, 0.75
    n_b = int(rng.choice([8, 16, 32]))
    m_end, tau_m = rng.uniform(0.6, 1.8), rng.uniform(0.25, 0.6)
    c_up, c_end = rng.uniform(0.0, 0.4), rng.uniform(-0.5, 0.15)
    sig_m = rng.uniform(0.2, 0.4)
    lp_c0 = rng.uniform(-300.0, -60.0)
    lp_r0 = lp_c0 * rng.uniform(0.95, 1.2)
    lg0, lg_drift, lg_delta = rng.uniform(-3.5, 0.5), rng.uniform(-0.3, 0.3), rng.uniform(-0.1, 0.1)
    g0, g_dec = rng.uniform(1.0, 10.0), rng.uniform(0.1, 0.5)
    ent0, mta0 = rng.uniform(0.3, 1.2), rng.uniform(0.6, 0.95)
    tok_step = n_b * 2 * rng.uniform(200.0, 800.0)
    t_step = rng.uniform(2.0, 20.0)
    z_c, z_d, z_l, z_acc, z_lpc, z_lpr, z_lg, z_lgr, z_e, z_mta, z_g, z_tok = (ctx.z() for _ in range(12))

    m = m_end * _sat(u, tau_m)
    c = c_up * (1.0 - np.exp(-u / 0.15)) * (1.0 - u) + c_end * u
    amp = 0.02 + np.abs(m)  # batch noise grows with the reward scale
    gscale = np.ones(n)

    spike: np.ndarray | None = None
    if path == "margin_collapse":
        d = _smoothstep(ctx.ramp(0.2, 0.35))
        m = m * (1.0 - (1.0 - pr.uniform(0.0, 0.05)) * d)
        c = c - pr.uniform(0.1, 0.5) * d
    elif path == "loss_spike":
        spike = _spike_profile(ctx, 3.5, 6.0)
        gscale = 1.0 + (pr.uniform(3.0, 8.0) - 1.0) * (spike - 1.0) / max(float(spike.max()) - 1.0, 1e-9)

    common = 0.25 * sig_m * amp * z_c  # shifts chosen and rejected together
    m_obs = m + sig_m * amp * z_d
    loss = _softplus(-k_loss * m_obs) * np.exp(0.03 * z_l)
    loss_lat = _softplus(-k_loss * m)
    if spike is not None:
        # the loss follows the spike profile; the margin is what such a loss implies
        hit = spike > 1.0
        loss_lat = loss_lat * spike
        loss = np.where(hit, loss_lat * np.exp(0.05 * z_l), loss)
        m_obs = np.where(hit, -np.log(np.expm1(loss)) / k_loss, m_obs)
    chosen = c + common + 0.5 * (m_obs - m)
    rejected = chosen - m_obs
    if ctx.steps[0] == 1 and ctx.ls == 1:
        chosen[0] = rejected[0] = 0.0  # policy == reference before the first update
    margins = chosen - rejected
    acc = _count_noise(1.0 / (1.0 + np.exp(-1.4 * margins)), n_b, z_acc)
    if ctx.steps[0] == 1 and ctx.ls == 1:
        loss[0], acc[0] = math.log(2.0), 0.0

    cols: dict[str, np.ndarray] = {
        "loss": loss,
        "grad_norm": g0 * (1.0 - g_dec * u) * gscale * np.exp(0.15 * z_g),
        "entropy": ent0 * (1.0 - 0.1 * u) * np.exp(0.03 * z_e),
        "num_tokens": np.cumsum(np.rint(tok_step * np.exp(0.05 * z_tok)) * ctx.ls),
        "logits/chosen": lg0 + lg_drift * u + 0.03 * z_lg,
        "logits/rejected": lg0 + lg_delta + lg_drift * u + 0.03 * z_lgr,
        "mean_token_accuracy": np.clip(mta0 + 0.01 * z_mta, 0.0, 1.0),
        "rewards/chosen": chosen,
        "rewards/rejected": rejected,
        "rewards/accuracies": acc,
        "rewards/margins": margins,
        "logps/chosen": lp_c0 * np.exp(0.06 * z_lpc) + chosen / beta,
        "logps/rejected": lp_r0 * np.exp(0.06 * z_lpr) + rejected / beta,
    }
    model_keys = tuple(k for k in _DPO_KEYS if k not in ("num_tokens", "rewards/accuracies"))
    if path == "nan":
        _nan_out(ctx, cols, model_keys)
        cols["rewards/accuracies"][ctx.after] = 0.0  # nan > nan is False
        loss_lat = np.where(ctx.after, math.nan, loss_lat)
    elif path == "dead_run":
        _freeze_all(ctx, cols, (*model_keys, "rewards/accuracies"))
        loss_lat = ctx.freeze(loss_lat)
    meta = {
        "runtime": float(t_step * ctx.n_steps),
        "samples_per_step": float(n_b),
        "flos": float(6.0 * rng.uniform(0.5e9, 8e9) * cols["num_tokens"][-1]),
    }
    return cols, meta, loss_lat


# --------------------------------------------------------------------------------------------
# SFT


def _sft(ctx: _Ctx) -> tuple[dict[str, np.ndarray], dict[str, float], np.ndarray, np.ndarray]:
    """SFT rows: exponential-ish loss decay, decaying grad_norm with a few isolated spikes."""
    rng, pr, n, path = ctx.rng, ctx.prng, ctx.n, ctx.pathology
    s = ctx.steps.astype(float)
    l0, l_inf = rng.uniform(1.8, 2.6), rng.uniform(0.3, 0.7)
    tau = rng.uniform(0.03, 0.15) * ctx.n_steps
    slope = rng.uniform(0.0, 0.15)
    sig_l = rng.uniform(0.05, 0.12)
    g0, g_inf = rng.uniform(1.5, 3.0), rng.uniform(0.05, 0.3)
    sig_g = rng.uniform(0.15, 0.25)
    acc_scale = rng.uniform(0.95, 1.0)
    tok_step = rng.uniform(8e3, 64e3)
    t_step = rng.uniform(0.5, 5.0)
    n_spikes = 2 + int(rng.poisson(n / 1500.0))
    # every other row only, so that no two spikes are adjacent: healthy spikes are single points
    candidates = np.arange(max(1, n // 10), max(n - 3, n // 10 + 1), 2)
    spike_rows = rng.choice(candidates, size=min(n_spikes, len(candidates)), replace=False)
    spike_mult = rng.uniform(5.0, 8.0, size=len(spike_rows))
    z_l, z_g, z_a, z_e, z_tok = (ctx.z() for _ in range(5))

    loss_lat = l_inf + (l0 - l_inf) * np.exp(-s / tau)
    loss_lat = loss_lat * (1.0 - slope * ctx.u)
    gscale = np.ones(n)
    eval_add = np.zeros(n)  # absolute eval-loss rise on top of the train trend
    healthy_lat = loss_lat
    if path == "loss_spike":
        f = _spike_profile(ctx, 3.0, 8.0)
        loss_lat = loss_lat * f
        gscale = 1.0 + (pr.uniform(5.0, 15.0) - 1.0) * (f - 1.0) / max(float(f.max()) - 1.0, 1e-9)
    elif path == "eval_divergence":
        x = np.where(ctx.after, (s - ctx.onset + ctx.ls) / max(ctx.remaining, 1), 0.0)
        # memorisation: train loss drops faster while held-out loss climbs
        loss_lat = loss_lat * (1.0 - pr.uniform(0.15, 0.3) * x)
        eval_add = pr.uniform(0.3, 0.8) * healthy_lat[ctx.i0] * x

    loss = loss_lat * np.exp(sig_l * z_l)
    grad = (g_inf + (g0 - g_inf) * np.exp(-s / (2.0 * tau))) * gscale * np.exp(sig_g * z_g)
    grad[spike_rows] *= 1.0 + (spike_mult - 1.0) * ctx.noise
    acc = np.clip(acc_scale * np.exp(-0.35 * loss) + 0.005 * z_a, 0.0, 1.0)
    cols: dict[str, np.ndarray] = {
        "loss": loss,
        "grad_norm": grad,
        "entropy": (0.8 * loss_lat + 0.15) * np.exp(0.03 * z_e),
        "num_tokens": np.cumsum(np.rint(tok_step * np.exp(0.05 * z_tok)) * ctx.ls),
        "mean_token_accuracy": acc,
    }
    if path == "nan":
        _nan_out(ctx, cols, ("entropy",))
        cols["mean_token_accuracy"][ctx.after] = 0.0  # argmax over NaN logits
        loss_lat = np.where(ctx.after, math.nan, loss_lat)
    elif path == "dead_run":
        _freeze_all(ctx, cols, ("entropy", "mean_token_accuracy"))
        loss_lat = ctx.freeze(loss_lat)
    meta = {
        "runtime": float(t_step * ctx.n_steps),
        "samples_per_step": float(rng.choice([8, 16, 32, 64])),
        "flos": float(6.0 * rng.uniform(0.5e9, 8e9) * cols["num_tokens"][-1]),
    }
    # overfitting: held-out loss stops improving at onset, then climbs
    eval_lat = np.where(ctx.after, healthy_lat[ctx.i0], healthy_lat) if path == "eval_divergence" else loss_lat
    return cols, meta, eval_lat, eval_add


# --------------------------------------------------------------------------------------------
# assembly


def _eval_rows(ctx: _Ctx, loss_lat: np.ndarray, add: np.ndarray, epochs: float) -> list[dict[str, float]]:
    """An eval row every 10 % of the run; eval_loss tracks the train trend slightly above it."""
    rng = ctx.rng
    gap = rng.uniform(0.02, 0.08)
    runtime0 = rng.uniform(5.0, 60.0)
    n_eval = rng.uniform(200.0, 2000.0)
    steps = np.unique(np.maximum(1, np.rint(np.arange(1, 11) * ctx.n_steps / 10.0))).astype(np.int64)
    lat = np.interp(steps, ctx.steps, loss_lat)
    ext = np.interp(steps, ctx.steps, add)
    if ctx.pathology == "nan":
        lat = np.where(steps >= ctx.onset, math.nan, lat)
    z = rng.standard_normal((2, len(steps))) * ctx.noise
    eval_loss = lat * (1.0 + gap) * np.exp(0.01 * z[0]) + ext
    runtime = runtime0 * np.exp(0.03 * z[1])
    rows = []
    for st, el, rt in zip(steps.tolist(), eval_loss.tolist(), runtime.tolist(), strict=True):
        rows.append(
            {
                "eval_loss": el,
                "eval_runtime": round(rt, 4),
                "eval_samples_per_second": round(n_eval / rt, 3),
                "epoch": st / ctx.n_steps * epochs,
                "step": st,
            }
        )
    return rows


def _build_rows(family: str, cols: dict[str, np.ndarray], ctx: _Ctx, epochs: float) -> list[dict[str, float]]:
    """Turn columns into row dicts in TRL's key order; fast path for long runs."""
    cols["learning_rate"] = _lr_schedule(
        ctx.steps, ctx.n_steps, 2e-5 if family == "sft" else 1e-6, cosine=family in ("sft", "dpo")
    )
    cols["epoch"] = ctx.steps / ctx.n_steps * epochs
    keys = FAMILY_KEYS[family]
    lists: list[list[float] | list[int]] = []
    for k in keys:
        if k == "step":
            lists.append(ctx.steps.tolist())
        elif k in ("episode", "eps", "val/num_eos_tokens"):
            lists.append(np.asarray(cols[k]).astype(np.int64).tolist())
        else:
            lists.append(np.asarray(cols[k], dtype=float).tolist())
    return [dict(zip(keys, vals, strict=True)) for vals in zip(*lists, strict=True)]


def generate_run(
    family: str,
    pathology: str | None = None,
    *,
    n_steps: int = 200,
    onset: float | int | None = None,
    seed: int = 0,
    noise: float = 1.0,
    logging_steps: int = 1,
    with_eval: bool = False,
) -> SyntheticRun:
    """Generate one labelled run.

    ``onset``: a float in (0, 1) is a fraction of the run, an int a step, None a fraction in
    [0.3, 0.7] drawn from the seed; it is rounded up to the next logged step (``kl_near_zero`` is
    always present from the first step).  ``noise`` scales every noise amplitude (0 gives the
    smooth trends).  ``with_eval`` adds eval rows for ``sft`` and ``dpo`` (ignored for the RL
    families, whose TRL eval rows carry different keys); ``eval_divergence`` forces it.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    if pathology is not None:
        if pathology not in PATHOLOGIES:
            raise ValueError(f"unknown pathology {pathology!r}; expected one of {tuple(PATHOLOGIES)}")
        if family not in PATHOLOGIES[pathology].families:
            raise ValueError(
                f"pathology {pathology!r} does not apply to {family!r} (families: {PATHOLOGIES[pathology].families})"
            )
    if logging_steps < 1:
        raise ValueError("logging_steps must be >= 1")
    if n_steps < 10 or n_steps // logging_steps < 5:
        raise ValueError("need n_steps >= 10 and at least 5 logged rows")
    if noise < 0:
        raise ValueError("noise must be >= 0")
    if pathology == "eval_divergence":
        with_eval = True

    ctx = _Ctx(family, pathology, n_steps, logging_steps, noise, seed, onset)
    epochs = 1.0
    loss_lat: np.ndarray | None = None
    extra = np.zeros(ctx.n)
    if family in ("grpo", "grpo_kl"):
        cols, meta = _grpo(ctx)
    elif family == "ppo":
        cols, meta = _ppo(ctx)
    elif family == "dpo":
        epochs = float(ctx.rng.choice([1, 2, 3]))
        cols, meta, loss_lat = _dpo(ctx)
    else:
        epochs = float(ctx.rng.choice([1, 2, 3]))
        cols, meta, loss_lat, extra = _sft(ctx)

    rows = _build_rows(family, cols, ctx, epochs)
    if with_eval and loss_lat is not None:
        evals = _eval_rows(ctx, loss_lat, extra, epochs)
        merged: list[dict[str, float]] = []
        j = 0
        for r in rows:
            merged.append(r)
            while j < len(evals) and evals[j]["step"] <= r["step"]:
                merged.append(evals[j])
                j += 1
        merged.extend(evals[j:])
        rows = merged

    runtime = max(meta["runtime"], 1e-3)
    rows.append(
        {
            "train_runtime": round(runtime, 4),
            "train_samples_per_second": round(n_steps * meta["samples_per_step"] / runtime, 3),
            "train_steps_per_second": round(n_steps / runtime, 3),
            "total_flos": meta["flos"],
            "train_loss": float(np.mean(cols["loss"])),
            "epoch": epochs,
            "step": n_steps,
        }
    )
    return SyntheticRun(
        family=family,
        pathology=pathology,
        onset_step=ctx.onset,
        rows=rows,
        seed=seed,
        expected_gauges=expected_gauges(pathology, family),
    )


def healthy_run(family: str, **kw: object) -> SyntheticRun:
    """Shorthand for ``generate_run(family, None, **kw)``."""
    return generate_run(family, None, **kw)  # type: ignore[arg-type]


def iter_runs(
    seeds: range | list[int] = range(3), *, include_healthy: bool = True, **kw: object
) -> Iterator[SyntheticRun]:
    """Every allowed (family, pathology) pair for each seed: the benchmark's corpus."""
    for seed in seeds:
        for fam, path in combinations(include_healthy):
            yield generate_run(fam, path, seed=seed, **kw)  # type: ignore[arg-type]
