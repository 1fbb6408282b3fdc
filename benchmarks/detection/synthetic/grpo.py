"""GRPO / RLOO runs (TRL 1.16 GRPOTrainer); ``grpo_kl`` adds ``kl`` and beta * kl in the loss.

Healthy runs learn the way real ones do: accuracy rises (smoothly, or in an "aha" step on some runs) and the
policy sharpens with it. A base model's entropy falls from 1.0-1.9 to 0.3-0.6 of its start, an instruct
model starts at 0.2-0.5; a few runs barely sharpen. Zero-std groups follow the accuracy through a
prompt-difficulty mix (Beta), so they rise as the task gets solved. About half the runs log a held-out
gold reward with weight 0 that rises with the proxy; a quarter are off-policy (num_iterations > 1) and clip
2-12 % of the tokens.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from .catalog import GOLD_FUNC, REWARD_FUNCS
from .context import Ctx, accelerate, count_noise, freeze_all, nan_out, phi_cdf, sat, sigmoid_rise, smoothstep

PROFILES = ("base", "instruct", "flat")


def _beta_all_equal(mu: np.ndarray, kappa: float, g: int) -> np.ndarray:
    """P(a group of ``g`` completions all pass or all fail) when prompt success rates are Beta(mu*k, (1-mu)*k)."""
    mu = np.clip(mu, 1e-3, 1.0 - 1e-3)
    a, b = mu * kappa, (1.0 - mu) * kappa
    pa = np.ones_like(mu)
    pb = np.ones_like(mu)
    for k in range(g):
        pa = pa * (a + k) / (a + b + k)
        pb = pb * (b + k) / (a + b + k)
    return pa + pb


def _stall(ctx: Ctx, a: np.ndarray) -> np.ndarray:
    """From onset the series stops improving: held at its onset value."""
    return ctx.freeze(a)


def build(ctx: Ctx, profile: str | None = None, gold: bool | None = None, n_prompts: int | None = None,
          group_size: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Step-level columns and the run's configuration (``gold``: the weight-0 reward functions logged)."""
    rng, pr, n, u, path = ctx.rng, ctx.prng, ctx.n, ctx.u, ctx.pathology
    with_kl = ctx.family == "grpo_kl"
    # -- run configuration (every value drawn in a fixed order, overrides applied afterwards) -----
    cap = float(rng.choice([256, 512, 1024, 2048]))  # max_completion_length
    n_p = int(rng.choice([2, 4, 8, 16, 32, 64], p=[0.08, 0.12, 0.2, 0.25, 0.2, 0.15]))
    group = int(rng.choice([4, 8, 16], p=[0.2, 0.6, 0.2]))
    prompt_len = rng.uniform(60.0, 300.0)
    beta = 0.04 if with_kl else 0.0
    prof = str(rng.choice(PROFILES, p=[0.5, 0.3, 0.2]))
    ent_start = {"base": rng.uniform(1.0, 1.9), "instruct": rng.uniform(0.2, 0.5), "flat": rng.uniform(0.6, 1.6)}
    ent_end = {"base": rng.uniform(0.3, 0.6), "instruct": rng.uniform(0.5, 0.9), "flat": rng.uniform(0.8, 0.97)}
    has_gold = bool(rng.random() < 0.5)
    gold_scale, gold_sd = rng.uniform(0.7, 1.0), rng.uniform(0.3, 0.8)
    acc0, acc_gain, tau_a = rng.uniform(0.05, 0.45), rng.uniform(0.1, 0.5), rng.uniform(0.15, 0.6)
    aha = bool(rng.random() < 0.15)
    aha_c, aha_w, aha_len = rng.uniform(0.15, 0.45), rng.uniform(0.03, 0.08), rng.uniform(1.05, 1.2)
    fmt0, fmt1, tau_f = rng.uniform(0.3, 0.8), rng.uniform(0.9, 0.99), rng.uniform(0.05, 0.25)
    kappa, kap_f, rho = rng.uniform(0.6, 3.0), rng.uniform(0.4, 0.6), rng.uniform(0.05, 0.3)
    len0, len_drift = rng.uniform(0.08, 0.3) * cap, rng.uniform(-0.2, 0.2)
    sig0, sig_drift = rng.uniform(0.25, 0.55), rng.uniform(-0.1, 0.1)
    tau_e = min(1.0, tau_a * rng.uniform(0.8, 1.5))
    kl_end, kl_pow = 10 ** rng.uniform(math.log10(0.005), math.log10(0.1)), rng.uniform(0.6, 1.5)
    kl_sd, kl_sp = rng.uniform(0.2, 0.5), rng.uniform(0.001, 0.008)
    ent_sd, ent_sp = rng.uniform(0.02, 0.08), rng.uniform(0.0, 0.008)
    g0, g_trend, g_sd = rng.uniform(0.05, 0.6), rng.uniform(-0.4, 0.3), rng.uniform(0.2, 0.45)
    loss_sd = rng.uniform(0.01, 0.04)
    t0, t_tok = rng.uniform(2.0, 10.0), rng.uniform(0.01, 0.05)
    off_policy = bool(rng.random() < 0.25)
    clip0, clip_drift = rng.uniform(0.02, 0.12), rng.uniform(-0.3, 0.3)
    # -- noise, always drawn in the same order ---------------------------------------------------
    z_acc, z_fmt, z_gold, w_acc = ctx.z(), ctx.z(), ctx.z(), ctx.wander(0.03 * n)
    z_sa, z_sf, z_rs, z_fz, z_gs = ctx.z(), ctx.z(), ctx.z(), ctx.z(), ctx.z()
    z_len, w_len, z_clip, z_min, z_max = ctx.z(), ctx.wander(0.05 * n), ctx.z(), ctx.z(), ctx.z()
    z_ent, w_ent, z_kl = ctx.z(heavy=True), ctx.wander(0.05 * n), ctx.z(heavy=True)
    z_g, z_loss = ctx.z(heavy=True), ctx.z(heavy=True)
    sp_kl, sp_ent, sp_g = ctx.spikes(kl_sp, 3.0, 12.0), ctx.spikes(ent_sp, 1.3, 3.0), ctx.spikes(0.01, 2.0, 6.0)
    z_cl, z_ch, z_t = ctx.z(), ctx.z(), ctx.z()
    u_low, u_high = rng.uniform(0.1, 0.6, n), rng.uniform(0.1, 0.8, n)
    # -- overrides ---------------------------------------------------------------------------------
    if profile is not None:
        if profile not in PROFILES:
            raise ValueError(f"unknown entropy profile {profile!r}; expected one of {PROFILES}")
        prof = profile
    if gold is not None:
        has_gold = gold
    if n_prompts is not None:
        n_p = int(n_prompts)
    if group_size is not None:
        group = int(group_size)
    if path == "gold_divergence":
        has_gold = True
    if path in ("clip_growing", "ratio_blowup"):
        off_policy = True
    if ctx.noise_model == "binomial":  # one verifier reward learned from 0.1 to ~0.5 on a small batch
        nr = ctx.nrng
        acc0, acc_gain, tau_a = nr.uniform(0.12, 0.2), nr.uniform(0.25, 0.4), nr.uniform(0.3, 0.8)
        fmt0 = fmt1 = 0.98
        kappa = nr.uniform(5.0, 20.0)  # prompts of one difficulty: fewer all-fail groups than a mixed set
        n_p, group, aha = int(nr.choice([2, 4])), 8, False
    batch = n_p * group
    # per-step entropy is a mean over the batch's tokens: 2-8 % noise at 256 completions, up to ~30 % at 16
    ent_sd = min(ent_sd * math.sqrt(256.0 / batch), 0.35)

    # -- healthy latent trends ---------------------------------------------------------------------
    # an "aha" run learns slowly, then in one step (with longer answers)
    rise = 0.3 * sat(u, tau_a) + 0.7 * sigmoid_rise(u, aha_c, aha_w) if aha else sat(u, tau_a)
    acc = acc0 + min(acc_gain, 0.95 - acc0) * rise
    fmt = fmt0 + (fmt1 - fmt0) * sat(u, tau_f)
    ent = ent_start[prof] * (1.0 - (1.0 - ent_end[prof]) * (rise if aha else sat(u, tau_e)))
    if aha:  # the aha step lengthens the answers; keep the run's whole drift within +-20 % of its start
        len_drift = float(np.clip(len_drift, -0.2, 1.2 / aha_len - 1.0))
    ell = len0 * (1.0 + len_drift * u) * ((1.0 + (aha_len - 1.0) * rise) if aha else 1.0)
    sig = sig0 * (1.0 + sig_drift * u)
    kl = kl_end * u**kl_pow
    if ctx.noise_model == "saturating_kl":  # 1 - exp(-t/tau): decelerating from the first step
        kl = kl_end * (1.0 - np.exp(-u / ctx.nrng.uniform(0.03, 0.2)))
    div = np.ones(n)  # within-group reward diversity (1 = healthy)
    fz_add = np.zeros(n)
    gscale = np.ones(n)
    lscale = np.ones(n)
    loss_extra = np.zeros(n)
    region = clip0 * (1.0 + clip_drift * u) if off_policy else np.zeros(n)
    kl_sd_t = np.full(n, kl_sd)
    extra_reward_noise = np.zeros(n)
    min_override: tuple[np.ndarray, float] | None = None
    true_acc: np.ndarray | None = None  # what the gold reward measures, where the proxy is being gamed

    if path == "reward_hacking":
        true_acc = ctx.freeze(acc)  # the gold reward, where logged, stops rising: the gains are not real
        d = ctx.ramp(0.3, 0.5)
        acc = acc + (pr.uniform(0.85, 0.97) - acc) * smoothstep(d)
        fmt = fmt + (0.99 - fmt) * d
        ell = ell * (1.0 + (pr.uniform(2.2, 3.0) - 1.0) * d)
        kl = kl + pr.uniform(0.2, 0.6) * d**1.5
        fz_add = fz_add + 0.1 * d
        sig = sig * (1.0 + 0.15 * d)
    elif path == "reward_std_collapse":
        d = smoothstep(ctx.ramp(0.15, 0.3))
        div = div * (1.0 - (1.0 - pr.uniform(0.01, 0.03)) * d)
        fz_add = fz_add + pr.uniform(0.94, 1.0) * d
        acc = np.where(ctx.after, acc[ctx.i0] + (acc - acc[ctx.i0]) * (1.0 - d), acc)
        gscale = gscale * (1.0 - 0.85 * d)
        lscale = lscale * (1.0 - 0.9 * d)
        ent = ent * (1.0 - 0.25 * d)
        sig = sig * (1.0 - 0.5 * d)
    elif path == "entropy_collapse":
        d = smoothstep(ctx.ramp(0.15, 0.25, of_run=True))
        floor = pr.uniform(0.05, 0.25)
        ent = ent * (floor + (1.0 - floor) * (1.0 - d))
        acc = np.where(ctx.after, acc[ctx.i0] - pr.uniform(0.0, 0.05) * d, acc)  # the reward stops rising
        fmt = ctx.freeze(fmt)
        div = div * (1.0 - 0.4 * d)
        fz_add = fz_add + 0.25 * d
        sig = sig * (1.0 - 0.4 * d)
    elif path == "length_explosion":
        d = ctx.ramp(0.3, 0.5)
        growth = max(pr.uniform(4.5, 7.0), pr.uniform(0.9, 1.3) * cap / ell[ctx.i0])
        ell = ell * growth**d
        sig = sig * (1.0 + 0.2 * d)
    elif path == "length_collapse":
        d = smoothstep(ctx.ramp(0.15, 0.3))
        ell = ell * (1.0 - (1.0 - pr.uniform(0.1, 0.3)) * d)
        sig = sig * (1.0 - 0.55 * d)
        min_override = (d, pr.uniform(1.0, 5.0))
        acc = acc - 0.3 * (acc - acc0) * d
    elif path == "truncation":
        d = smoothstep(ctx.ramp(0.1, 0.2))
        ell = ell + (pr.uniform(1.8, 2.6) * cap - ell) * d
        sig = sig * (1.0 + 0.5 * d)
    elif path == "ratio_blowup":
        rho0, rho1 = pr.uniform(0.05, 0.15), pr.uniform(0.5, 0.75)
        d = ctx.ramp(0.15, 0.3)
        region = rho0 + (rho1 - rho0) * d**1.5
        gscale = gscale * (1.0 + 5.0 * d**2)
        kl = kl * (1.0 + 6.0 * d**2)
        ent = ent * (1.0 + 0.3 * d)
        acc = acc - 0.4 * (acc - acc0) * d
        loss_extra = 0.1 * d
    elif path == "kl_runaway":
        x = ctx.x(pr.uniform(0.2, 0.4) * ctx.remaining)
        target = pr.uniform(1.5, 4.0)
        kl = kl + accelerate(x, target, 2.0 * target)
        xc = np.minimum(x, 1.0)
        gscale = gscale * (1.0 + 2.0 * np.minimum(x, 1.5))
        ent = ent * (1.0 - 0.3 * xc)
        acc = acc - 0.3 * (acc - acc0) * xc
    elif path == "kl_near_zero":
        kl = np.full(n, 1e-5)
    elif path == "clip_growing":
        c0, c1 = pr.uniform(0.04, 0.08), pr.uniform(0.33, 0.4)
        x = np.clip(ctx.x(pr.uniform(0.5, 0.9) * ctx.remaining), 0.0, 1.0)
        region = np.where(ctx.after, c0 + (c1 - c0) * x ** pr.uniform(1.0, 1.5), c0 * (1.0 + 0.2 * clip_drift * u))
        kl = kl * (1.0 + pr.uniform(1.0, 3.0) * x**2)  # the KL explosion it precedes, starting late
        gscale = gscale * (1.0 + 0.5 * x)
        ctx.mark("clip_crosses_0.30", region >= 0.30)
    elif path == "kl_growing":
        x = ctx.x(pr.uniform(0.6, 1.0) * ctx.remaining)
        kl = kl + pr.uniform(0.45, 0.6) * x ** pr.uniform(1.0, 2.0)
        ctx.mark("kl_crosses_warn", kl >= 0.5)
    elif path == "kl_noisy":
        kl_sd_t = kl_sd_t + (pr.uniform(1.3, 1.8) - kl_sd) * ctx.ramp(0.02, 0.06)
    elif path == "kl_noise_ramp":
        kl_sd_t = kl_sd_t + (pr.uniform(1.5, 2.0) - kl_sd) * ctx.over_rest()
    elif path == "length_creep_up":
        # verbosity is being paid for: the proxy keeps its rise, a logged gold reward stops following it
        ell = ell * (1.0 + pr.uniform(0.7, 1.1) * ctx.over_rest())
        true_acc = ctx.freeze(acc)
    elif path == "length_creep_down":
        # the post: "the model is learning that short responses are safer" -- saying less to avoid penalties,
        # not getting more concise while it learns (a healthy run may shorten with the reward rising)
        ell = ell * (1.0 - pr.uniform(0.4, 0.55) * ctx.over_rest())
        acc, fmt = _stall(ctx, acc), _stall(ctx, fmt)
    elif path == "length_shift":
        up = pr.random() < 0.5
        f = pr.uniform(1.45, 1.8) if up else pr.uniform(0.5, 0.65)
        ell = ell * f ** smoothstep(ctx.ramp(0.02, 0.06, of_run=True))
        if up:
            true_acc = ctx.freeze(acc)
        else:
            acc, fmt = _stall(ctx, acc), _stall(ctx, fmt)
    elif path == "truncation_gap":
        target = pr.uniform(0.08, 0.18)
        s_on = float(sig[ctx.i0])
        zq = NormalDist().inv_cdf(1.0 - target)
        ell_t = cap * math.exp(s_on * s_on / 2.0 - zq * s_on)
        ell = ell * np.maximum(ell_t / ell, 1.0) ** ctx.ramp(0.4, 0.8)
    elif path in ("length_variance_collapse", "length_variance_shift"):
        if path == "length_variance_collapse":
            # mode collapse onto a template: the answers stop exploring, so the reward stops improving
            new = sig * (1.0 - (1.0 - pr.uniform(0.12, 0.2)) * smoothstep(ctx.ramp(0.2, 0.4)))
            acc, fmt = _stall(ctx, acc), _stall(ctx, fmt)
        else:
            new = sig * (1.0 + (pr.uniform(1.5, 1.9) - 1.0) * smoothstep(ctx.ramp(0.05, 0.15)))
        sig = new  # ``ell`` is the lognormal's mean: it stays where it was
    elif path == "reward_shift_up":
        true_acc = ctx.freeze(acc)
        s = smoothstep(ctx.ramp(0.02, 0.08, of_run=True))
        acc = acc + min(pr.uniform(0.15, 0.3), 0.97 - float(acc[ctx.i0])) * s
        if with_kl:
            kl = kl + pr.uniform(0.08, 0.25) * s
            ell = ell * (1.0 + pr.uniform(0.0, 0.3) * s)
        else:
            ell = ell * (1.0 + pr.uniform(0.3, 0.6) * s)
    elif path == "reward_shift_down":
        # a bad update: accuracy and the format both drop, and the run stops improving
        s = smoothstep(ctx.ramp(0.02, 0.08, of_run=True))
        acc = np.where(ctx.after, acc[ctx.i0] - min(pr.uniform(0.15, 0.3), float(acc[ctx.i0]) - 0.02) * s, acc)
        fmt = np.where(ctx.after, fmt[ctx.i0] - pr.uniform(0.1, 0.3) * float(fmt[ctx.i0]) * s, fmt)
    elif path == "reward_variance_high":
        extra_reward_noise = (pr.uniform(3.0, 5.0) - 1.0) * ctx.ramp(0.03, 0.1)
        gscale = gscale * (1.0 + 0.5 * extra_reward_noise / 4.0)
    elif path == "gold_divergence":
        x = ctx.over_rest()
        true_acc = np.where(ctx.after, acc[ctx.i0] + 0.3 * (acc - acc[ctx.i0]) * (1.0 - x)
                            - pr.uniform(0.05, 0.2) * x**1.5, acc)
        acc = acc + min(pr.uniform(0.1, 0.25), 0.97 - float(acc.max())) * x
        ell = ell * (1.0 + pr.uniform(0.2, 0.8) * x)
        if with_kl:
            kl = kl + pr.uniform(0.05, 0.3) * x**1.5

    acc = np.clip(acc, 0.001, 0.999)
    true_acc = acc if true_acc is None else np.clip(true_acc, 0.0, 1.0)

    # ---- rewards (per step)
    sd_acc = 1.5 * np.sqrt(acc * (1.0 - acc) / batch)
    acc_o = acc + sd_acc * z_acc + 0.02 * w_acc
    if np.any(extra_reward_noise > 0):
        acc_o = acc_o + extra_reward_noise * np.maximum(sd_acc, 0.03) * ctx.pz()
    acc_o = np.clip(acc_o, 0.0, 1.0)
    fmt_o = np.clip(fmt + 1.2 * np.sqrt(fmt * (1.0 - fmt) / batch) * z_fmt, 0.0, 1.0)
    kfac = math.sqrt(kappa / (kappa + 1.0) * group / max(group - 1, 1))
    std_a = kfac * np.sqrt(acc_o * (1.0 - acc_o)) * div * np.exp(0.05 * z_sa)
    std_f = kap_f * np.sqrt(fmt_o * (1.0 - fmt_o)) * div * np.exp(0.05 * z_sf)
    reward = acc_o + fmt_o
    reward_std = np.sqrt(std_a**2 + std_f**2 + 2.0 * rho * std_a * std_f) * np.exp(0.04 * z_rs)
    fz = _beta_all_equal(acc, kappa, group) * (fmt**group + (1.0 - fmt) ** group)
    fz = 1.0 - (1.0 - np.clip(fz + fz_add, 0.0, 1.0)) * np.clip(div, 0.0, 1.0) ** 0.5
    frac_zero = count_noise(fz, n_p, z_fz)
    gold_lat = np.clip(true_acc * gold_scale, 0.0, 1.0)
    gold_o = np.clip(gold_lat + gold_scale * (acc_o - np.clip(acc, 0.0, 1.0)) + gold_sd * sd_acc * z_gold, 0.0, 1.0)

    # ---- lengths: lognormal lengths (log-sd ``sig``) cut at ``cap``
    ell = ell * np.exp(0.02 * w_len)
    zc = (math.log(cap) - np.log(ell) + sig**2 / 2) / sig
    p_clip = 1.0 - phi_cdf(zc)
    clipped = count_noise(p_clip, batch, z_clip)
    n_term = np.rint(batch * (1.0 - clipped))
    p_term = phi_cdf(zc)
    mt_lat = np.where(p_term > 1e-4, ell * phi_cdf(zc - sig) / np.maximum(p_term, 1e-4), 0.85 * cap)
    mt_lat = np.minimum(mt_lat, 0.97 * cap)
    frac_t = np.clip(mt_lat / cap, 1e-4, 0.999)
    spread = np.minimum(1.5 * sig, 0.8) / np.sqrt(np.maximum(n_term, 1.0)) + 0.05  # + the prompt mix
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
    ent_o = ent * np.exp(ent_sd * z_ent + 0.02 * w_ent) * sp_ent
    kl_o = kl * np.exp(kl_sd_t * z_kl - kl_sd_t**2 / 2.0) * sp_kl
    kl_o[0] = 0.0  # the policy is the reference at the first step
    grad = g0 * (1.0 + g_trend * u) * gscale * np.exp(g_sd * z_g) * sp_g
    loss = lscale * loss_sd * z_loss + loss_extra * z_loss + beta * kl_o
    if np.any(region > 0):
        # low and high clipping are exclusive, so region_mean = low_mean + high_mean
        region_o = np.clip(region * np.exp(0.12 * z_cl), 0.0, 0.95)
        share = np.clip(rng.uniform(0.35, 0.55) + 0.05 * z_ch, 0.1, 0.9)
        low = region_o * share
        high = region_o - low
        low_min = low * (1.0 - np.minimum(1.0, ctx.noise * u_low))
        high_max = np.minimum(high * (1.0 + ctx.noise * u_high), 1.0)
    else:
        low = high = low_min = high_max = np.zeros(n)

    tokens = np.cumsum(np.rint(batch * (prompt_len + mean_len)))
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
    if has_gold:
        cols[f"rewards/{GOLD_FUNC}/mean"] = gold_o
        cols[f"rewards/{GOLD_FUNC}/std"] = np.sqrt(gold_o * (1.0 - gold_o)) * kfac * np.exp(0.05 * z_gs)
    if with_kl:
        cols["kl"] = kl_o

    if path == "nan":
        nan_out(ctx, cols, ("entropy", "kl"))
    elif path == "dead_run":
        # zero advantages everywhere: identical completions, no gradient, surrogate loss = beta*kl
        length_keys = [k for k in cols if k.startswith("completions/") and k != "completions/clipped_ratio"]
        frozen_len = float(min(np.rint(mean_len[ctx.i0]), cap - 1.0))
        for k in length_keys:
            cols[k][ctx.after] = frozen_len
        cols["completions/clipped_ratio"][ctx.after] = 0.0
        for k in [k for k in cols if k.startswith("rewards/") and k.endswith("/std")]:
            cols[k][ctx.after] = 0.0
        cols["reward_std"][ctx.after] = 0.0
        cols["frac_reward_zero_std"][ctx.after] = 1.0
        keys = ("reward", "entropy", "kl", *(k for k in cols if k.startswith("rewards/") and k.endswith("/mean")))
        freeze_all(ctx, cols, keys)
        cols["loss"][ctx.after] = beta * cols["kl"][ctx.i0] if with_kl else 0.0
        inc = np.diff(cols["num_tokens"], prepend=0.0)
        inc[ctx.after] = np.rint(batch * (prompt_len + frozen_len))
        cols["num_tokens"] = np.cumsum(inc)

    meta: dict[str, object] = {"runtime": float(np.nansum(step_time)), "samples_per_step": float(batch), "flos": 0.0,
                               "profile": prof, "batch": batch, "off_policy": off_policy, "aha": aha,
                               "gold": (GOLD_FUNC,) if has_gold else ()}
    return cols, meta

