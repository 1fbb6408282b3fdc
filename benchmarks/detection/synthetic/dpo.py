"""DPO runs (sigmoid loss, beta = 0.1); margins are exactly chosen - rejected.

Healthy runs: the margin rises and saturates at 0.7-2.5 (accuracy 0.7-0.95), the chosen reward drifts a
little (often down: likelihood displacement), small batches make the accuracy jump from row to row.
"""

from __future__ import annotations

import math

import numpy as np

from .context import Ctx, count_noise, freeze_all, nan_out, sat, smoothstep, softplus

_DPO_MODEL_KEYS = ("loss", "grad_norm", "entropy", "logits/chosen", "logits/rejected", "mean_token_accuracy",
                   "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected")


def spike_profile(ctx: Ctx, f_lo: float, f_hi: float) -> np.ndarray:
    """Multiplicative loss factor for a sustained spike (per step): a jump to F at onset, a plateau of 5-15
    logged rows that stays >= 2.5x, then a fast partial recovery leaving a slowly fading residual."""
    pr = ctx.prng
    big = pr.uniform(f_lo, f_hi)
    end = min(big, max(2.5, big * pr.uniform(0.55, 0.85)))
    width = int(pr.integers(5, 16)) * ctx.ls
    resid = pr.uniform(0.05, 0.4)
    j = (ctx.t - ctx.s0).astype(float)
    f = np.ones(ctx.n)
    win = (j >= 0) & (j < width)
    f[win] = big + (end - big) * j[win] / max(width - 1, 1)
    post = j >= width
    jp = j[post] - width
    f[post] = (1.0 + resid * np.exp(-jp / (6.0 * width))
               + (end - 1.0 - resid) * np.exp(-(jp + 1.0) / max(width / 3.0, 1.0)))
    return f


def oscillation(ctx: Ctx) -> np.ndarray:
    """convergence_oscillation: a multiplicative swing of +-15-40 % with a period of 4-12 logged rows,
    growing in over a few periods."""
    pr = ctx.prng
    amp = pr.uniform(0.25, 0.5)
    period = pr.uniform(4.0, 12.0) * ctx.ls
    grow = np.clip(ctx.x(period), 0.0, 1.0)
    phase = 2.0 * math.pi * (ctx.t - ctx.s0) / period
    return 1.0 + amp * grow * np.sin(phase)


def build(ctx: Ctx) -> tuple[dict[str, np.ndarray], dict[str, object], np.ndarray]:
    """Step-level columns, the run's configuration and the latent loss (eval rows track it)."""
    rng, pr, n, u, path = ctx.rng, ctx.prng, ctx.n, ctx.u, ctx.pathology
    beta, k_loss = 0.1, 0.75
    n_b = int(rng.choice([4, 8, 16, 32], p=[0.15, 0.3, 0.35, 0.2]))
    m_end, tau_m = rng.uniform(0.7, 2.5), rng.uniform(0.2, 0.6)
    c_up, c_end = rng.uniform(0.0, 0.4), rng.uniform(-0.5, 0.15)
    sig_m, sig_loss = rng.uniform(0.1, 0.3), rng.uniform(0.05, 0.15)
    lp_c0 = rng.uniform(-300.0, -60.0)
    lp_r0 = lp_c0 * rng.uniform(0.95, 1.2)
    lg0, lg_drift, lg_delta = rng.uniform(-3.5, 0.5), rng.uniform(-0.3, 0.3), rng.uniform(-0.1, 0.1)
    g0, g_dec, g_sd = rng.uniform(1.0, 10.0), rng.uniform(0.1, 0.6), rng.uniform(0.1, 0.25)
    ent0, mta0 = rng.uniform(0.3, 1.2), rng.uniform(0.6, 0.95)
    tok_step = n_b * 2 * rng.uniform(200.0, 800.0)
    t_step = rng.uniform(2.0, 20.0)
    z_c, z_d, z_l, z_acc, z_lpc, z_lpr, z_lg, z_lgr, z_e, z_mta, z_tok = (ctx.z() for _ in range(11))
    z_g = ctx.z(heavy=True)
    sp_g = ctx.spikes(0.01, 1.5, 3.0)

    m = m_end * sat(u, tau_m)
    c = c_up * (1.0 - np.exp(-u / 0.15)) * (1.0 - u) + c_end * u
    sig_scale = np.ones(n)  # batch noise multiplier
    gscale = np.ones(n)
    osc = np.ones(n)

    spike: np.ndarray | None = None
    if path == "margin_collapse":
        d = smoothstep(ctx.ramp(0.2, 0.35))
        m = m * (1.0 - (1.0 - pr.uniform(0.0, 0.05)) * d)
        c = c - pr.uniform(0.1, 0.5) * d
    elif path == "loss_spike":
        spike = spike_profile(ctx, 3.5, 6.0)
        gscale = 1.0 + (pr.uniform(3.0, 8.0) - 1.0) * (spike - 1.0) / max(float(spike.max()) - 1.0, 1e-9)
    elif path == "margin_plateau":
        # a weak dataset from the start: the margin rises quickly to 0.3-0.5 (92-95 % of it by the onset)
        # and stays there; unlike the other pathologies the run differs from its healthy twin before onset
        level = pr.uniform(0.3, 0.5)
        m = level * (1.0 - np.exp(-ctx.t / (ctx.s0 / pr.uniform(2.5, 3.0))))
    elif path == "rewards_converging":
        x = ctx.over_rest()
        drop = pr.uniform(0.4, 0.65) * x
        m = np.where(ctx.after, (m[ctx.i0] + 0.3 * (m - m[ctx.i0])) * (1.0 - drop), m)
        c = c - 0.5 * float(m[ctx.i0]) * drop * pr.uniform(0.0, 0.6)  # chosen comes down towards rejected
    elif path == "chosen_runaway":
        x = ctx.over_rest() ** pr.uniform(1.0, 1.8)
        boost = pr.uniform(2.0, 6.0) * x
        c = c + boost
        m = m + pr.uniform(0.3, 0.7) * boost  # rejected rises too, slower
    elif path == "reward_variance_high":
        sig_scale = 1.0 + (pr.uniform(3.0, 5.0) - 1.0) * ctx.ramp(0.03, 0.1)
        gscale = gscale * (1.0 + 0.3 * (sig_scale - 1.0))
    elif path == "convergence_oscillation":
        osc = oscillation(ctx)
        m = np.where(ctx.after, m[ctx.i0] + 0.2 * (m - m[ctx.i0]), m)  # and it stops learning
        gscale = gscale * osc

    amp = 0.02 + np.abs(m)  # batch noise grows with the reward scale
    small = min(math.sqrt(16.0 / n_b), 1.5)  # small batches are noisier
    common = 0.25 * sig_m * amp * small * z_c  # shifts chosen and rejected together
    z_margin = z_d if path != "reward_variance_high" else z_d + (sig_scale - 1.0) * ctx.pz()
    m_obs = m + sig_m * amp * small * z_margin
    # the loss is a mean of per-pair losses: its own noise, partly shared with the margin's
    loss = softplus(-k_loss * m) * np.exp(sig_loss * (0.866 * z_l - 0.5 * z_margin)) * osc
    loss_lat = softplus(-k_loss * m) * osc
    if spike is not None:
        hit = spike > 1.0
        loss_lat = loss_lat * spike
        loss = np.where(hit, loss_lat * np.exp(0.05 * z_l), loss)
        m_obs = np.where(hit, -np.log(np.expm1(loss)) / k_loss, m_obs)
    if path == "convergence_oscillation":
        m_obs = np.where(ctx.after, -np.log(np.expm1(np.maximum(loss, 1e-6))) / k_loss, m_obs)
    chosen = c + common + 0.5 * (m_obs - m)
    rejected = chosen - m_obs
    chosen[0] = rejected[0] = 0.0  # policy == reference before the first update
    margins = chosen - rejected
    acc = count_noise(1.0 / (1.0 + np.exp(-1.4 * margins)), n_b, z_acc)
    loss[0], acc[0] = math.log(2.0), 0.0

    cols: dict[str, np.ndarray] = {
        "loss": loss,
        "grad_norm": g0 * (1.0 - g_dec * u) * gscale * np.exp(g_sd * z_g) * sp_g,
        "entropy": ent0 * (1.0 - 0.1 * u) * np.exp(0.03 * z_e),
        "num_tokens": np.cumsum(np.rint(tok_step * np.exp(0.05 * z_tok))),
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
    model_keys = tuple(k for k in _DPO_MODEL_KEYS if k not in ("loss", "grad_norm"))
    if path == "nan":
        nan_out(ctx, cols, model_keys)
        cols["rewards/accuracies"][ctx.after] = 0.0  # nan > nan is False
        loss_lat = np.where(ctx.after, math.nan, loss_lat)
    elif path == "dead_run":
        freeze_all(ctx, cols, (*model_keys, "rewards/accuracies"))
        loss_lat = ctx.freeze(loss_lat)
    meta: dict[str, object] = {
        "runtime": float(t_step * ctx.n_steps),
        "samples_per_step": float(n_b),
        "flos": float(6.0 * rng.uniform(0.5e9, 8e9) * cols["num_tokens"][-1]),
        "batch": n_b,
        "gold": (),
    }
    return cols, meta, loss_lat
