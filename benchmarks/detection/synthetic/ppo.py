"""PPO runs shaped like TRL's PPOTrainer logs; ``objective/kl`` is a per-sequence sum.

PPO logs one update per row (no averaging over ``logging_steps``). Healthy runs: the score rises and
saturates, KL grows to 2-4 nats per sequence with 15-35 % row-to-row noise, clipfrac sits at 6-15 %, the
value loss falls and its clip fraction shrinks.
"""

from __future__ import annotations

import math

import numpy as np

from .context import Ctx, accelerate, count_noise, freeze_all, nan_out, sat, smoothstep


def build(ctx: Ctx) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    rng, pr, n, u, path = ctx.rng, ctx.prng, ctx.n, ctx.u, ctx.pathology
    batch = int(rng.choice([16, 32, 64]))
    resp_len = rng.uniform(40.0, 160.0)
    kl_coef, vf_coef = 0.05, 0.1
    kl_end, kl_pow, kl_sd = rng.uniform(2.0, 4.0), rng.uniform(0.8, 1.3), rng.uniform(0.1, 0.2)
    s0, s_gain, tau_s = rng.uniform(-1.5, 0.5), rng.uniform(0.8, 2.5), rng.uniform(0.2, 0.5)
    s_sd = rng.uniform(0.08, 0.2)
    e0, e_dec = rng.uniform(0.6, 1.8), rng.uniform(0.05, 0.3)
    akl0, cf0 = rng.uniform(0.005, 0.03), rng.uniform(0.06, 0.15)
    v0, v_dec, vcf0 = rng.uniform(0.3, 2.0), rng.uniform(0.4, 0.8), rng.uniform(0.05, 0.25)
    eos_p = rng.uniform(0.85, 0.98)
    rv0 = 10 ** rng.uniform(-6.0, -4.0)
    g0 = rng.uniform(0.3, 1.5)
    t_step = rng.uniform(5.0, 30.0)
    z_kl, z_kla, z_s, w_s, z_e, z_oe = ctx.z(), ctx.z(), ctx.z(), ctx.wander(0.03 * n), ctx.z(), ctx.z()
    z_akl, z_cf, z_pl, z_v, z_vcf, z_r, z_rv, z_eos, z_t = (ctx.z() for _ in range(9))
    z_g = ctx.z(heavy=True)
    sp_g = ctx.spikes(0.01, 2.0, 6.0)

    kl = kl_end * u**kl_pow
    if ctx.noise_model == "saturating_kl":  # a per-sequence KL that saturates: 1 - exp(-t/tau), decelerating
        kl = ctx.nrng.uniform(2.5, 4.5) * (1.0 - np.exp(-u / ctx.nrng.uniform(0.03, 0.2)))
    kl_add_sd = np.full(n, 0.03)
    scores = s0 + s_gain * sat(u, tau_s)
    scores_sd = np.full(n, s_sd)
    ent = e0 * (1.0 - e_dec * u)
    akl = akl0 * (1.0 + 0.5 * u)
    cf = cf0 + 0.02 * u
    ratio_log = np.zeros(n)
    ratio_sd = np.full(n, 0.012)
    rv = np.full(n, rv0)
    vloss = v0 * (1.0 - v_dec * sat(u, 0.3))
    vcf = vcf0 * (1.0 - 0.6 * u)
    eos = np.full(n, eos_p)
    len_f = np.ones(n)
    gscale = np.ones(n)
    pl_scale = np.ones(n)

    if path == "kl_runaway":
        x = ctx.x(pr.uniform(0.2, 0.4) * ctx.remaining)
        target = pr.uniform(40.0, 80.0)
        kl = kl + accelerate(x, target, 1.5 * target)
        xc = np.minimum(x, 1.0)
        akl = akl * (1.0 + 6.0 * np.minimum(x, 2.0))
        cf = cf + (pr.uniform(0.25, 0.35) - cf) * xc
        ent = ent * (1.0 - 0.3 * xc)
        gscale = gscale * (1.0 + 2.0 * np.minimum(x, 1.5))
    elif path == "kl_near_zero":
        kl = np.full(n, 1e-5)
        kl_add_sd = np.zeros(n)
    elif path == "negative_kl":
        d = smoothstep(ctx.ramp(0.03, 0.08, of_run=True))
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
    elif path == "clip_growing":
        x = np.clip(ctx.x(pr.uniform(0.5, 0.9) * ctx.remaining), 0.0, 1.0)
        cf = np.where(ctx.after, cf[ctx.i0] + (pr.uniform(0.33, 0.4) - cf[ctx.i0]) * x ** pr.uniform(1.0, 1.5), cf)
        akl = akl * (1.0 + 3.0 * x**2)
        kl = kl * (1.0 + pr.uniform(0.5, 1.5) * x**2)  # the KL explosion it precedes, starting late
        ctx.mark("clip_crosses_0.30", cf >= 0.30)
    elif path == "kl_growing":
        x = ctx.x(pr.uniform(0.6, 1.0) * ctx.remaining)
        kl = kl + pr.uniform(5.5, 7.0) * x ** pr.uniform(1.0, 2.0)
        ctx.mark("kl_crosses_warn", kl >= 6.0)
    elif path == "kl_noisy":
        kl_add_sd = kl_add_sd + pr.uniform(0.8, 1.4) * (kl + 0.5) * ctx.ramp(0.02, 0.06)
    elif path == "kl_noise_ramp":
        kl_add_sd = kl_add_sd + pr.uniform(0.8, 1.5) * (kl + 0.5) * ctx.over_rest()
    elif path == "reward_shift_up":
        s = smoothstep(ctx.ramp(0.02, 0.08, of_run=True))
        scores = scores + pr.uniform(1.0, 2.0) * s
        kl = kl + pr.uniform(3.0, 8.0) * s
        len_f = len_f * (1.0 + pr.uniform(0.0, 0.3) * s)
    elif path == "reward_shift_down":
        s = smoothstep(ctx.ramp(0.02, 0.08, of_run=True))
        scores = scores - pr.uniform(1.0, 2.0) * s
    elif path == "reward_variance_high":
        scores_sd = scores_sd * (1.0 + (pr.uniform(3.0, 5.0) - 1.0) * ctx.ramp(0.03, 0.1))
    elif path == "value_blowup":
        x = np.clip(ctx.x(pr.uniform(0.4, 0.8) * ctx.remaining), 0.0, 1.0)
        vloss = vloss * np.exp(math.log(pr.uniform(5.0, 30.0)) * x ** pr.uniform(1.0, 1.5))
        vcf = vcf + (pr.uniform(0.5, 0.8) - vcf) * x
        gscale = gscale * (1.0 + 0.5 * x)
    elif path == "ratio_variance":
        x = np.clip(ctx.x(pr.uniform(0.3, 0.7) * ctx.remaining), 0.0, 1.0)
        rv = rv * np.exp(math.log(pr.uniform(100.0, 1000.0)) * x)
        ratio_sd = ratio_sd + (pr.uniform(0.04, 0.07) - 0.012) * x
        cf = cf + 0.05 * x

    kl_o = kl * np.exp(kl_sd * z_kl - kl_sd**2 / 2.0) + kl_add_sd * np.where(kl_add_sd > 0.03, z_kla,
                                                                                      np.abs(z_kla))
    if path != "kl_near_zero":
        kl_o[0] = 0.03 * abs(z_kla[0])
    scores_o = scores + scores_sd * z_s + 0.05 * w_s
    if path == "reward_variance_high":
        scores_o = scores + s_sd * z_s + (scores_sd - s_sd) * ctx.pz() + 0.05 * w_s
    nsr = -kl_coef * kl_o
    ent_o = ent * np.exp(0.05 * z_e)
    obj_ent = ent * resp_len * len_f * np.exp(0.08 * z_oe)
    akl_o = akl * np.exp(0.3 * z_akl)
    cf_o = np.clip(cf + 0.15 * cf0 * z_cf, 0.0, 1.0)
    pol = pl_scale * (-0.005 + 0.02 * z_pl)
    val = vloss * np.exp(0.1 * z_v)
    vcf_o = np.clip(vcf + 0.02 * z_vcf, 0.0, 1.0)
    ratio = np.exp(ratio_log + ratio_sd * z_r)
    rv_o = rv * np.exp(0.5 * z_rv)
    n_eos = np.rint(count_noise(eos, batch, z_eos) * batch)
    grad = g0 * gscale * np.exp(0.25 * z_g) * sp_g
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
        "episode": (ctx.t * batch).astype(float),
    }
    if path == "nan":
        nan_out(ctx, cols,
                ("loss/policy_avg", "loss/value_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/ratio"))
    elif path == "dead_run":
        model_keys = tuple(k for k in cols if k.startswith(("objective/", "loss/", "policy/", "val/")))
        freeze_all(ctx, cols, model_keys)
        for k, v in (("val/ratio", 1.0), ("val/ratio_var", 0.0), ("policy/clipfrac_avg", 0.0),
                     ("val/clipfrac_avg", 0.0), ("policy/approxkl_avg", 0.0), ("loss/policy_avg", 0.0)):
            cols[k][ctx.after] = v
        cols["loss"] = np.where(ctx.after, vf_coef * cols["loss/value_avg"], cols["loss"])
    meta: dict[str, object] = {"runtime": float(np.sum(times)), "samples_per_step": float(batch), "flos": 0.0,
                               "batch": batch, "gold": ()}
    return cols, meta
