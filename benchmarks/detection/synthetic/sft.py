"""SFT runs: exponential-ish loss decay with a drop at each epoch boundary (multi-epoch runs memorise),
decaying grad_norm with a few isolated spikes."""

from __future__ import annotations

import math

import numpy as np

from .context import Ctx, freeze_all, nan_out
from .dpo import oscillation, spike_profile


def build(ctx: Ctx) -> tuple[dict[str, np.ndarray], dict[str, object], np.ndarray, np.ndarray]:
    """Step-level columns, the configuration, the latent eval loss and its absolute add-on (overfitting)."""
    rng, pr, n, path = ctx.rng, ctx.prng, ctx.n, ctx.pathology
    t = ctx.t.astype(float)
    epochs = int(rng.choice([1, 2, 3]))
    drops = rng.uniform(0.05, 0.2, size=2)
    l0, l_inf = rng.uniform(1.8, 2.6), rng.uniform(0.3, 0.7)
    tau = rng.uniform(0.03, 0.15) * ctx.n_steps
    slope = rng.uniform(0.05, 0.2)
    sig_l = rng.uniform(0.05, 0.12)
    g0, g_inf = rng.uniform(1.5, 3.0), rng.uniform(0.05, 0.3)
    sig_g = rng.uniform(0.15, 0.25)
    acc_scale = rng.uniform(0.95, 1.0)
    tok_step = rng.uniform(8e3, 64e3)
    t_step = rng.uniform(0.5, 5.0)
    n_spikes = 2 + int(rng.poisson(ctx.n_rows / 1500.0))
    # grad_norm is the value at the logging step: spikes sit on logged steps, never on two adjacent rows
    rows = np.arange(max(1, ctx.n_rows // 10), max(ctx.n_rows - 3, ctx.n_rows // 10 + 1), 2)
    spike_rows = rng.choice(rows, size=min(n_spikes, len(rows)), replace=False)
    spike_mult = rng.uniform(5.0, 8.0, size=len(spike_rows))
    z_l, z_a, z_e, z_tok = (ctx.z() for _ in range(4))
    z_g = ctx.z(heavy=True)

    loss_lat = l_inf + (l0 - l_inf) * np.exp(-t / tau)
    loss_lat = loss_lat * (1.0 - slope * ctx.u)
    for e in range(1, epochs):  # the second pass over the data is easier
        loss_lat = np.where(t > e * ctx.n_steps / epochs, loss_lat * (1.0 - drops[e - 1]), loss_lat)
    gscale = np.ones(n)
    eval_add = np.zeros(n)  # absolute eval-loss rise on top of the train trend
    healthy_lat = loss_lat
    osc = np.ones(n)
    if path == "loss_spike":
        f = spike_profile(ctx, 3.0, 8.0)
        loss_lat = loss_lat * f
        gscale = 1.0 + (pr.uniform(5.0, 15.0) - 1.0) * (f - 1.0) / max(float(f.max()) - 1.0, 1e-9)
    elif path == "eval_divergence":
        x = ctx.over_rest()
        # memorisation: train loss drops faster while held-out loss climbs
        loss_lat = loss_lat * (1.0 - pr.uniform(0.15, 0.3) * x)
        eval_add = pr.uniform(0.3, 0.8) * healthy_lat[ctx.i0] * x
    elif path == "convergence_oscillation":
        osc = oscillation(ctx)
        # it stops converging: the loss holds near its onset level and swings around it
        loss_lat = np.where(ctx.after, loss_lat[ctx.i0] + 0.2 * (loss_lat - loss_lat[ctx.i0]), loss_lat) * osc
        gscale = gscale * osc**2

    loss = loss_lat * np.exp(sig_l * z_l)
    grad = (g_inf + (g0 - g_inf) * np.exp(-t / (2.0 * tau))) * gscale * np.exp(sig_g * z_g)
    spike_steps = ctx.row_steps[spike_rows] - 1
    grad[spike_steps] *= 1.0 + (spike_mult - 1.0) * ctx.noise
    acc = np.clip(acc_scale * np.exp(-0.35 * loss) + 0.005 * z_a, 0.0, 1.0)
    cols: dict[str, np.ndarray] = {
        "loss": loss,
        "grad_norm": grad,
        "entropy": (0.8 * loss_lat + 0.15) * np.exp(0.03 * z_e),
        "num_tokens": np.cumsum(np.rint(tok_step * np.exp(0.05 * z_tok))),
        "mean_token_accuracy": acc,
    }
    if path == "nan":
        nan_out(ctx, cols, ("entropy",))
        cols["mean_token_accuracy"][ctx.after] = 0.0  # argmax over NaN logits
        loss_lat = np.where(ctx.after, math.nan, loss_lat)
    elif path == "dead_run":
        freeze_all(ctx, cols, ("entropy", "mean_token_accuracy"))
        loss_lat = ctx.freeze(loss_lat)
    meta: dict[str, object] = {
        "runtime": float(t_step * ctx.n_steps),
        "samples_per_step": float(rng.choice([8, 16, 32, 64])),
        "flos": float(6.0 * rng.uniform(0.5e9, 8e9) * cols["num_tokens"][-1]),
        "epochs": epochs,
        "gold": (),
    }
    # overfitting: held-out loss stops improving at onset, then climbs
    eval_lat = np.where(ctx.after, healthy_lat[ctx.i0], healthy_lat) if path == "eval_divergence" else loss_lat
    return cols, meta, eval_lat, eval_add
