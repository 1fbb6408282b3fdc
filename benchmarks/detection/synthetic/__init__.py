"""Labelled synthetic training logs shaped like TRL 1.16 ``trainer.state.log_history``.

Benchmark and test data, not product: this package lives beside the detection benchmark
(``benchmarks/detection``) and is put on ``sys.path`` by ``tests/conftest.py`` and the benchmarks.

Real logs rarely come with ground truth, so the health monitor is tested (and its detection quality
benchmarked) against generated runs whose pathology and onset step are known. Each run is a list of plain
dicts with the exact key names TRL/transformers write, realistic magnitudes and noise, optional eval rows
and the closing ``train_runtime`` summary row.

How the runs are made (calibrated on the public logs in ``shared/real-logs``):

* every series is a smooth latent trend per optimizer step observed through heavy-tailed, lightly
  autocorrelated batch noise plus a slow wander, with rare single-step outliers on KL, entropy and
  grad_norm (healthy real logs show KL spikes of 10x and residual kurtosis of 2-170);
* rows are what TRL logs: the mean over the ``logging_steps`` steps since the last row (grad_norm, the
  learning rate and counters are the value at the logging step; PPO rows are single updates);
* healthy runs learn the way real ones do, including the parts that trip naive rules: GRPO policies
  sharpen (a base model's entropy halves while reward and a held-out gold reward rise; an instruct model
  starts near 0.3), zero-std groups rise as the task gets solved, some runs learn in one "aha" step with
  longer answers, some are off-policy and clip a few percent of tokens, SFT loss drops at epoch boundaries,
  small batches make rewards and DPO accuracies jump from row to row;
* a pathology develops over a realistic span from its onset (see ``catalog.PATHOLOGIES``, with the kind of
  signal each is: trend, spread, level, event, config) and leaves traces in neighbouring series the way
  real failures do; its randomness comes from a separate stream, so a pathological run is the healthy run
  of the same seed until its onset (a few exceptions need a different run from the first step; the tests
  list them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from . import dpo, grpo, ppo, sft
from .catalog import (
    COMPOUND,
    DIAGNOSIS,
    EVAL_KEYS,
    FAMILIES,
    FAMILY_KEYS,
    GOLD_FUNC,
    GRPO_GOLD_KEYS,
    KINDS,
    PATHOLOGIES,
    REWARD_FUNCS,
    SUMMARY_KEYS,
    Pathology,
    combinations,
    expected_gauges,
)
from .context import NOISE_MODELS, Ctx, lr_schedule

__all__ = [
    "COMPOUND",
    "DIAGNOSIS",
    "EVAL_KEYS",
    "FAMILIES",
    "FAMILY_KEYS",
    "GOLD_FUNC",
    "KINDS",
    "NOISE_MODELS",
    "PATHOLOGIES",
    "REWARD_FUNCS",
    "SUMMARY_KEYS",
    "Pathology",
    "SyntheticRun",
    "combinations",
    "expected_gauges",
    "generate_run",
    "healthy_run",
    "iter_runs",
]

_INT_KEYS = frozenset({"episode", "eps", "val/num_eos_tokens"})
_LR_PEAK = {"grpo": 1e-6, "grpo_kl": 1e-6, "dpo": 5e-7, "ppo": 3e-6, "sft": 2e-5}


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
    n_steps: int = 0
    logging_steps: int = 1
    gold: tuple[str, ...] = ()
    """Reward functions logged with weight 0 (held-out checks), e.g. ``("hidden_tests",)``."""
    marks: dict[str, int] = field(default_factory=dict)
    """Logged steps where the pathology crosses a named line (``clip_crosses_0.30``, ``kl_crosses_warn``)."""
    config: dict[str, object] = field(default_factory=dict)
    """The run's drawn configuration (GRPO: ``profile``, ``batch``, ``off_policy``, ``aha``; LR schedule)."""

    @property
    def kind(self) -> str | None:
        return PATHOLOGIES[self.pathology].kind if self.pathology else None

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


def _keys(family: str, gold: tuple[str, ...]) -> tuple[str, ...]:
    keys = FAMILY_KEYS[family]
    if not gold:
        return keys
    i = keys.index(f"rewards/{REWARD_FUNCS[-1]}/std") + 1
    return (*keys[:i], *GRPO_GOLD_KEYS, *keys[i:])


def _eval_rows(ctx: Ctx, loss_lat: np.ndarray, add: np.ndarray, epochs: float) -> list[dict[str, float]]:
    """8-15 eval rows spread over the run; eval_loss tracks the train trend slightly above it."""
    rng = ctx.rng
    gap = rng.uniform(0.02, 0.08)
    runtime0 = rng.uniform(5.0, 60.0)
    n_eval = rng.uniform(200.0, 2000.0)
    k = int(rng.integers(8, 16))
    steps = np.unique(np.maximum(1, np.rint(np.arange(1, k + 1) * ctx.n_steps / k))).astype(np.int64)
    lat = loss_lat[steps - 1]
    ext = add[steps - 1]
    z = rng.standard_normal((2, len(steps))) * ctx.noise
    eval_loss = lat * (1.0 + gap) * np.exp(0.005 * z[0]) + ext
    runtime = runtime0 * np.exp(0.03 * z[1])
    return [
        {"eval_loss": el, "eval_runtime": round(rt, 4), "eval_samples_per_second": round(n_eval / rt, 3),
         "epoch": st / ctx.n_steps * epochs, "step": st}
        for st, el, rt in zip(steps.tolist(), eval_loss.tolist(), runtime.tolist(), strict=True)
    ]


def _lr(ctx: Ctx) -> tuple[np.ndarray, dict[str, object]]:
    """The learning-rate schedule: warm-up 0-10 % (none on a fifth of the runs), then linear, cosine or
    constant; ``lr_peak_not_reached`` stretches the warm-up past the end of the run."""
    rng = ctx.rng
    peak = _LR_PEAK[ctx.family] * 10 ** rng.uniform(-0.5, 0.5)
    warm = 0.0 if rng.random() < 0.2 else rng.uniform(0.01, 0.1)
    decay = str(rng.choice(["linear", "cosine", "constant"], p=[0.4, 0.4, 0.2]))
    if ctx.pathology == "lr_peak_not_reached":
        warm = ctx.prng.uniform(1.2, 3.0)
    return lr_schedule(ctx.t, ctx.n_steps, peak, warm, decay), {"lr_peak": peak, "lr_warmup": warm,
                                                                 "lr_decay": decay}


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
    profile: str | None = None,
    gold: bool | None = None,
    n_prompts: int | None = None,
    group_size: int | None = None,
    noise_model: str | None = None,
) -> SyntheticRun:
    """Generate one labelled run.

    ``onset``: a float in (0, 1) is a fraction of the run, an int a step, None a fraction drawn from the
    seed (in [0.3, 0.7], or the pathology's own range); it is rounded up to the next logged step
    (``kl_near_zero`` and ``lr_peak_not_reached`` are present from the first row). ``noise`` scales every
    noise amplitude (0 gives the smooth trends). ``with_eval`` adds eval rows for ``sft`` and ``dpo``
    (``eval_divergence`` forces it). GRPO only: ``profile`` forces the entropy profile (``base``,
    ``instruct``, ``flat``), ``gold`` whether a weight-0 gold reward is logged, ``n_prompts`` and ``group_size``
    the groups per step and completions per group (2 x 8 is the small-batch setting of the 1.5B benign runs).
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    path_spec: Pathology | None = None
    if pathology is not None:
        if pathology not in PATHOLOGIES:
            raise ValueError(f"unknown pathology {pathology!r}; expected one of {tuple(PATHOLOGIES)}")
        path_spec = PATHOLOGIES[pathology]
        if family not in path_spec.families:
            raise ValueError(f"pathology {pathology!r} does not apply to {family!r} (families: {path_spec.families})")
    if logging_steps < 1:
        raise ValueError("logging_steps must be >= 1")
    if n_steps < 10 or n_steps // logging_steps < 5:
        raise ValueError("need n_steps >= 10 and at least 5 logged rows")
    if noise < 0:
        raise ValueError("noise must be >= 0")
    if pathology == "eval_divergence":
        with_eval = True

    from_start = bool(path_spec and path_spec.from_start)
    ctx = Ctx(family, pathology, n_steps, logging_steps, noise, seed, onset, from_start,
              path_spec.onset if path_spec else None, noise_model)
    eval_lat: np.ndarray | None = None
    eval_add = np.zeros(ctx.n)
    epochs = 1.0
    if family in ("grpo", "grpo_kl"):
        cols, meta = grpo.build(ctx, profile=profile, gold=gold, n_prompts=n_prompts, group_size=group_size)
    elif family == "ppo":
        cols, meta = ppo.build(ctx)
    elif family == "dpo":
        cols, meta, eval_lat = dpo.build(ctx)
        epochs = float(ctx.rng.choice([1, 2, 3]))
    else:
        cols, meta, eval_lat, eval_add = sft.build(ctx)
        epochs = float(meta["epochs"])
    lr, lr_meta = _lr(ctx)
    cols["learning_rate"] = lr
    gold_fns: tuple[str, ...] = tuple(meta.pop("gold", ()))  # type: ignore[arg-type]

    # step series -> logged rows
    per_update = family == "ppo"
    out: dict[str, np.ndarray] = {k: ctx.to_rows(k, v, per_update) for k, v in cols.items()}
    if family == "dpo":  # TRL averages each key on its own; the difference of the means is the mean margin
        out["rewards/margins"] = out["rewards/chosen"] - out["rewards/rejected"]
    out["epoch"] = ctx.row_steps / n_steps * epochs
    keys = _keys(family, gold_fns)
    lists: list[list[float] | list[int]] = []
    for k in keys:
        if k == "step":
            lists.append(ctx.row_steps.tolist())
        elif k in _INT_KEYS:
            lists.append(np.asarray(out[k]).astype(np.int64).tolist())
        else:
            lists.append(np.asarray(out[k], dtype=float).tolist())
    rows = [dict(zip(keys, vals, strict=True)) for vals in zip(*lists, strict=True)]

    if with_eval and eval_lat is not None:
        evals = _eval_rows(ctx, eval_lat, eval_add, epochs)
        merged: list[dict[str, float]] = []
        j = 0
        for r in rows:
            merged.append(r)
            while j < len(evals) and evals[j]["step"] <= r["step"]:
                merged.append(evals[j])
                j += 1
        merged.extend(evals[j:])
        rows = merged

    runtime = max(float(meta["runtime"]), 1e-3)  # type: ignore[arg-type]
    rows.append({
        "train_runtime": round(runtime, 4),
        "train_samples_per_second": round(n_steps * float(meta["samples_per_step"]) / runtime, 3),  # type: ignore[arg-type]
        "train_steps_per_second": round(n_steps / runtime, 3),
        "total_flos": float(meta["flos"]),  # type: ignore[arg-type]
        "train_loss": float(np.mean(cols["loss"])),
        "epoch": epochs,
        "step": n_steps,
    })
    config = {k: v for k, v in meta.items() if k not in ("runtime", "samples_per_step", "flos")}
    config.update(lr_meta)
    return SyntheticRun(
        family=family,
        pathology=pathology,
        onset_step=ctx.onset,
        rows=rows,
        seed=seed,
        expected_gauges=expected_gauges(pathology, family),
        n_steps=n_steps,
        logging_steps=logging_steps,
        gold=gold_fns,
        marks=dict(ctx.marks),
        config=config,
    )


def healthy_run(family: str, **kw: object) -> SyntheticRun:
    """Shorthand for ``generate_run(family, None, **kw)``."""
    return generate_run(family, None, **kw)  # type: ignore[arg-type]


def iter_runs(
    seeds: range | list[int] = range(3), *, include_healthy: bool = True, **kw: object
) -> Iterator[SyntheticRun]:
    """Every allowed (family, pathology) pair for each seed."""
    for seed in seeds:
        for fam, path in combinations(include_healthy):
            yield generate_run(fam, path, seed=seed, **kw)  # type: ignore[arg-type]
