"""Tests for the synthetic TRL-log generator (``benchmarks/detection/synthetic``): shape, determinism, the
way rows are reduced from steps, healthy runs that look like real ones, and that each label is honest (the
pathology's signature shows after onset and not before)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import numpy as np
import pytest

from synthetic import (
    COMPOUND,
    DIAGNOSIS,
    FAMILIES,
    FAMILY_KEYS,
    GOLD_FUNC,
    KINDS,
    PATHOLOGIES,
    SUMMARY_KEYS,
    SyntheticRun,
    combinations,
    expected_gauges,
    generate_run,
    healthy_run,
)

SEEDS = (0, 1, 2)
CLIP_KEYS = ("clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max",
             "clip_ratio/region_mean")
GOLD = f"rewards/{GOLD_FUNC}/mean"
# pathologies whose run differs from the healthy one before onset, on purpose: GRPO clip pathologies need an
# off-policy run, gold_divergence a logged gold reward, margin_plateau a weak dataset from the first step
PRE_ONSET_DIFFERS = {("grpo", "ratio_blowup"), ("grpo_kl", "ratio_blowup"), ("grpo", "clip_growing"),
                     ("grpo_kl", "clip_growing"), ("grpo", "gold_divergence"), ("grpo_kl", "gold_divergence"),
                     ("dpo", "margin_plateau")}


def col(run: SyntheticRun, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, after-onset mask) over the train rows."""
    rows = [r for r in run.train_rows if key in r]
    vals = np.array([r[key] for r in rows], dtype=float)
    steps = np.array([r["step"] for r in rows])
    onset = run.onset_step if run.onset_step is not None else math.inf
    return vals, steps >= onset


def spread(run: SyntheticRun) -> tuple[np.ndarray, np.ndarray]:
    hi, after = col(run, "completions/max_length")
    lo, _ = col(run, "completions/min_length")
    mean, _ = col(run, "completions/mean_length")
    return (hi - lo) / mean, after


def dump(rows: list[dict[str, float]]) -> str:
    return json.dumps(rows)  # NaN-safe equality


# ---------------------------------------------------------------------------------------------
# structure


def test_determinism_per_seed() -> None:
    for fam, path in [("grpo", None), ("dpo", "nan"), ("ppo", "kl_runaway"), ("sft", "eval_divergence"),
                      ("grpo_kl", "kl_noisy")]:
        a = generate_run(fam, path, seed=7)
        b = generate_run(fam, path, seed=7)
        c = generate_run(fam, path, seed=8)
        assert dump(a.rows) == dump(b.rows)
        assert a.onset_step == b.onset_step and a.marks == b.marks
        assert dump(a.rows) != dump(c.rows)


def test_catalog() -> None:
    assert set(KINDS) == {p.kind for p in PATHOLOGIES.values()}
    for p in PATHOLOGIES.values():
        assert p.families and set(p.families) <= set(FAMILIES) and p.gauges and p.description
    trend_spread = [p for p in PATHOLOGIES.values() if p.kind in ("trend", "spread")]
    assert len(trend_spread) >= 20
    assert set(PATHOLOGIES) >= COMPOUND
    assert DIAGNOSIS in expected_gauges("reward_hacking", "grpo")
    assert DIAGNOSIS not in expected_gauges("length_creep_up", "grpo")


@pytest.mark.parametrize(("family", "pathology"), combinations())
def test_every_combination_generates(family: str, pathology: str | None) -> None:
    run = generate_run(family, pathology, seed=3, n_steps=120)
    assert run.family == family and run.pathology == pathology and run.seed == 3
    assert run.expected_gauges == expected_gauges(pathology, family)
    assert run.n_steps == 120 and run.logging_steps == 1
    if pathology is None:
        assert run.onset_step is None and run.expected_gauges == () and run.kind is None
    else:
        assert set(run.expected_gauges) - {DIAGNOSIS} <= set(PATHOLOGIES[pathology].gauges)
        assert 1 <= run.onset_step <= 120 and run.kind == PATHOLOGIES[pathology].kind
    keys = FAMILY_KEYS[family]
    for row in run.train_rows:
        assert set(keys) <= set(row) and (set(row) - set(keys)) == ({GOLD, GOLD.replace("/mean", "/std")}
                                                                     if run.gold else set())
        assert all(isinstance(v, (int, float)) for v in row.values())
    summary = run.rows[-1]
    assert set(summary) == set(SUMMARY_KEYS) and summary["step"] == 120
    assert [r["step"] for r in run.train_rows] == list(range(1, 121))


def test_invalid_combinations_rejected() -> None:
    with pytest.raises(ValueError):
        generate_run("grpo", "kl_runaway")  # no kl logged at beta = 0
    with pytest.raises(ValueError):
        generate_run("dpo", "entropy_collapse")
    with pytest.raises(ValueError):
        generate_run("rloo")
    with pytest.raises(ValueError):
        generate_run("sft", "nan", onset=1.5)
    with pytest.raises(ValueError):
        generate_run("sft", "nan", onset=500, n_steps=200)
    with pytest.raises(ValueError):
        generate_run("grpo", profile="chat")


def test_family_keys_and_clipping() -> None:
    assert "kl" not in FAMILY_KEYS["grpo"]
    assert "kl" in FAMILY_KEYS["grpo_kl"]
    for fam in FAMILIES:
        assert {"step", "epoch", "learning_rate", "loss", "grad_norm"} <= set(FAMILY_KEYS[fam])
    on, off = 0, 0
    for seed in range(12):
        run = healthy_run("grpo", seed=seed, n_steps=100)
        region, _ = col(run, "clip_ratio/region_mean")
        if run.config["off_policy"]:  # num_iterations > 1: a few percent of tokens clipped
            off += 1
            low, _ = col(run, "clip_ratio/low_mean")
            high, _ = col(run, "clip_ratio/high_mean")
            np.testing.assert_allclose(region, low + high)
            assert 0.01 < region.mean() < 0.2
        else:  # default GRPO is on-policy: every clip fraction exactly 0
            on += 1
            for key in CLIP_KEYS:
                assert all(r[key] == 0.0 for r in run.train_rows), key
    assert on >= 6 and off >= 1


def test_rows_are_means_over_the_logging_window() -> None:
    """TRL averages its metrics over the steps since the last row; grad_norm and the LR are the step's."""
    fine = healthy_run("grpo_kl", n_steps=300, logging_steps=1, seed=4)
    coarse = healthy_run("grpo_kl", n_steps=300, logging_steps=10, seed=4)
    assert [r["step"] for r in coarse.train_rows] == list(range(10, 301, 10))
    for key in ("reward", "kl", "entropy", "completions/mean_length", "frac_reward_zero_std"):
        f, _ = col(fine, key)
        c, _ = col(coarse, key)
        np.testing.assert_allclose(c, f.reshape(30, 10).mean(axis=1), rtol=1e-9, atol=1e-12)
    for key in ("grad_norm", "learning_rate", "num_tokens"):
        f, _ = col(fine, key)
        c, _ = col(coarse, key)
        np.testing.assert_allclose(c, f[9::10])
    # averaging shrinks the row-to-row noise
    f, _ = col(fine, "reward")
    c, _ = col(coarse, "reward")
    assert np.std(np.diff(c)) < np.std(np.diff(f))


def test_lr_schedules() -> None:
    warmups = []
    for seed in range(10):
        run = healthy_run("sft", n_steps=200, seed=seed)
        lr, _ = col(run, "learning_rate")
        peak = float(run.config["lr_peak"])
        assert lr.max() == pytest.approx(peak, rel=0.06)
        warmups.append(int(np.argmax(lr)))
        if run.config["lr_decay"] != "constant":
            assert lr[-1] < 0.05 * peak
    assert max(warmups) <= 22 and min(warmups) == 0  # warm-up 0-10 % of the run
    bad = generate_run("dpo", "lr_peak_not_reached", n_steps=200, seed=1)
    lr, after = col(bad, "learning_rate")
    assert after.all() and bad.onset_step == 1
    assert np.all(np.diff(lr) > 0) and lr[-1] < 0.85 * float(bad.config["lr_peak"])


def test_onset_resolution() -> None:
    assert generate_run("sft", "nan", onset=0.5, n_steps=200).onset_step == 100
    assert generate_run("sft", "nan", onset=37, n_steps=200).onset_step == 37
    assert generate_run("sft", "nan", onset=37, n_steps=200, logging_steps=5).onset_step == 40
    for seed in range(10):
        assert 60 <= generate_run("dpo", "nan", seed=seed, n_steps=200).onset_step <= 140
        assert 20 <= generate_run("dpo", "margin_plateau", seed=seed, n_steps=200).onset_step <= 70
    assert generate_run("ppo", "kl_near_zero", onset=0.5).onset_step == 1
    assert generate_run("grpo", "lr_peak_not_reached", logging_steps=5).onset_step == 5


def test_pathological_run_matches_healthy_before_onset() -> None:
    """Baseline and pathology randomness are separate streams: a labelled run is the healthy run of the same
    seed up to its onset, which makes paired comparisons exact."""
    for fam, path in combinations(include_healthy=False):
        if (fam, path) in PRE_ONSET_DIFFERS:
            continue
        for ls in (1, 5):
            run = generate_run(fam, path, seed=5, logging_steps=ls)
            base = healthy_run(fam, seed=5, logging_steps=ls)
            pre = [r for r in run.train_rows if r["step"] < run.onset_step]
            assert dump(pre) == dump(base.train_rows[: len(pre)]), (fam, path, ls)


def test_noise_zero_is_smooth() -> None:
    for seed in range(4):
        reward, _ = col(healthy_run("grpo", noise=0.0, seed=seed), "reward")
        assert np.all(np.diff(reward) >= -1e-12)
        loss, _ = col(healthy_run("sft", noise=0.0, seed=seed), "loss")
        assert np.all(np.diff(loss) <= 1e-12)


def test_large_run_is_fast() -> None:
    t0 = time.perf_counter()
    run = generate_run("grpo", n_steps=100_000, seed=0)
    assert time.perf_counter() - t0 < 5.0
    assert len(run.rows) == 100_001


# ---------------------------------------------------------------------------------------------
# healthy runs look like real ones


@pytest.mark.parametrize("seed", SEEDS)
def test_healthy_grpo(seed: int) -> None:
    run = healthy_run("grpo", seed=seed)
    loss, _ = col(run, "loss")
    assert abs(loss.mean()) < 0.03 and np.abs(loss).max() < 0.6  # surrogate, not a loss curve
    reward, _ = col(run, "reward")
    assert reward[-20:].mean() > reward[:20].mean()
    mean, _ = col(run, "completions/mean_length")
    lo, _ = col(run, "completions/min_length")
    hi, _ = col(run, "completions/max_length")
    assert np.all(lo <= mean) and np.all(mean <= hi)
    tokens, _ = col(run, "num_tokens")
    assert np.all(np.diff(tokens) > 0)
    frac, _ = col(run, "frac_reward_zero_std")
    assert np.all((frac >= 0) & (frac <= 1))
    kl, _ = col(healthy_run("grpo_kl", seed=seed), "kl")
    assert kl[0] == 0.0 and np.median(kl) < 0.15 and kl[-20:].mean() > kl[:20].mean()


def test_healthy_grpo_sharpens_like_real_runs() -> None:
    """Base models' entropy halves while the reward (and the gold reward) rise; instruct models start low."""
    ratios, gold_up = [], 0
    for seed in range(12):
        run = healthy_run("grpo", seed=seed, n_steps=120, profile="base", gold=True, n_prompts=2, group_size=8)
        ent, _ = col(run, "entropy")
        reward, _ = col(run, "reward")
        gold, _ = col(run, GOLD)
        assert 0.9 < ent[:10].mean() < 2.1
        ratios.append(ent[-10:].mean() / ent[:10].mean())
        assert reward[-20:].mean() > reward[:20].mean()
        gold_up += gold[-20:].mean() > gold[:20].mean()
        assert run.gold == (GOLD_FUNC,) and run.config["batch"] == 16
    assert np.median(ratios) < 0.6 and max(ratios) < 0.8
    assert gold_up >= 10
    for seed in range(5):
        ent, _ = col(healthy_run("grpo", seed=seed, profile="instruct"), "entropy")
        assert 0.15 < ent[:10].mean() < 0.55


@pytest.mark.parametrize("seed", SEEDS)
def test_healthy_ppo_dpo_sft(seed: int) -> None:
    ppo = healthy_run("ppo", seed=seed)
    kl, _ = col(ppo, "objective/kl")
    assert kl.min() >= 0.0 and 1.0 < kl[-20:].mean() < 6.0
    ratio, _ = col(ppo, "val/ratio")
    assert np.all(np.abs(ratio - 1.0) < 0.15)
    clip, _ = col(ppo, "policy/clipfrac_avg")
    assert 0.03 < clip.mean() < 0.25
    scores, _ = col(ppo, "objective/scores")
    rlhf, _ = col(ppo, "objective/rlhf_reward")
    nsr, _ = col(ppo, "objective/non_score_reward")
    np.testing.assert_allclose(rlhf, scores + nsr)

    dpo = healthy_run("dpo", seed=seed)
    loss, _ = col(dpo, "loss")
    assert loss[0] == pytest.approx(math.log(2.0)) and loss[-20:].mean() < 0.6
    acc, _ = col(dpo, "rewards/accuracies")
    assert np.all((acc >= 0) & (acc <= 1)) and acc[-30:].mean() > 0.6

    sft = healthy_run("sft", seed=seed, with_eval=True)
    loss, _ = col(sft, "loss")
    assert loss[:3].max() > 1.2 and loss[-20:].mean() < 0.5 * loss[:3].mean()
    evals = [r for r in sft.rows if "eval_loss" in r]
    assert 8 <= len(evals) <= 15 and set(evals[0]) == {"eval_loss", "eval_runtime", "eval_samples_per_second",
                                                        "epoch", "step"}
    assert evals[-1]["eval_loss"] > loss[-20:].mean() * 0.9
    grad, _ = col(sft, "grad_norm")
    local = np.median(np.lib.stride_tricks.sliding_window_view(grad, 11), axis=1)
    spikes = np.flatnonzero(grad[5:-5] > 3.0 * local)
    assert 1 <= len(spikes) <= 8


def test_dpo_margins_exact_and_falling_chosen_is_healthy() -> None:
    fell = 0
    for seed in range(8):
        for path in (None, "margin_collapse", "loss_spike", "dead_run", "chosen_runaway"):
            run = generate_run("dpo", path, seed=seed, logging_steps=2)
            for r in run.train_rows:
                assert r["rewards/margins"] == r["rewards/chosen"] - r["rewards/rejected"]
        chosen, _ = col(healthy_run("dpo", seed=seed), "rewards/chosen")
        margins, _ = col(healthy_run("dpo", seed=seed), "rewards/margins")
        fell += chosen[-20:].mean() < chosen[0]
        assert margins[-20:].mean() > 0.3  # ... while the margin grows
    assert fell >= 2


def test_no_nan_in_healthy_runs() -> None:
    for fam in FAMILIES:
        for ls in (1, 10):
            run = healthy_run(fam, seed=4, with_eval=True, n_steps=400, logging_steps=ls, noise=2.0)
            for r in run.rows:
                assert all(math.isfinite(v) for v in r.values()), (fam, r)


# ---------------------------------------------------------------------------------------------
# pathology signatures: present after onset, absent before


def kl_key(run: SyntheticRun) -> str:
    return "kl" if run.family == "grpo_kl" else "objective/kl"


def reward_key(run: SyntheticRun) -> str:
    return {"ppo": "objective/scores", "dpo": "rewards/margins"}.get(run.family, "reward")


def pre_post(run: SyntheticRun, key: str, k: int = 20) -> tuple[np.ndarray, np.ndarray]:
    v, after = col(run, key)
    return v[~after][-k:], v[after][-k:]


def sig_kl_runaway(run: SyntheticRun) -> None:
    kl, after = col(run, kl_key(run))
    warn, stop = (0.2, 1.0) if run.family == "grpo_kl" else (12.0, 30.0)
    assert np.median(kl[~after]) < warn
    assert kl[after].max() > stop


def sig_kl_near_zero(run: SyntheticRun) -> None:
    kl, after = col(run, kl_key(run))
    assert after.all() and kl.max() < 1e-3
    reward, _ = col(run, reward_key(run))
    assert reward[-20:].mean() > reward[:20].mean()  # training otherwise proceeds


def sig_negative_kl(run: SyntheticRun) -> None:
    kl, after = col(run, "objective/kl")
    assert kl[~after].min() >= 0.0
    assert kl[after].min() < -0.5 and kl[-10:].mean() < -0.4


def sig_reward_hacking(run: SyntheticRun) -> None:
    base = healthy_run(run.family, seed=run.seed)
    r, _ = col(run, reward_key(run))
    ref, _ = col(base, reward_key(run))
    assert r[-10:].mean() - ref[-10:].mean() > (1.5 if run.family == "ppo" else 0.2)
    if run.family == "ppo":
        kl_pre, kl_post = pre_post(run, "objective/kl", 10)
        assert kl_post.mean() > 2 * kl_pre.mean()
        eos_pre, eos_post = pre_post(run, "val/num_eos_tokens", 10)
        assert eos_post.mean() < 0.8 * eos_pre.mean()
        return
    pre, post = pre_post(run, "completions/mean_length", 10)
    assert post.mean() > 2.0 * pre.mean()
    if run.family == "grpo_kl":
        pre, post = pre_post(run, "kl", 10)
        assert post.mean() > 2 * pre.max()


def sig_margin_collapse(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "rewards/margins", 10)
    assert post.mean() < 0.5 * pre.mean()
    acc, _ = col(run, "rewards/accuracies")
    assert acc[-10:].mean() < 0.75


def sig_reward_std_collapse(run: SyntheticRun) -> None:
    rstd, after = col(run, "reward_std")
    frac, _ = col(run, "frac_reward_zero_std")
    assert rstd[~after].min() > 0.05 and frac[~after].mean() < 0.6
    assert rstd[-10:].max() < 0.05 and frac[-10:].mean() > 0.9


def sig_entropy_collapse(run: SyntheticRun) -> None:
    """Collapse: entropy falls far, and the reward stops rising while zero-std groups pile up."""
    ent, after = col(run, "entropy")
    assert ent[after][-10:].mean() < 0.3 * ent[~after][-10:].mean()
    r_pre, r_post = pre_post(run, "reward", 10)
    twin, _ = col(healthy_run(run.family, seed=run.seed, n_steps=run.n_steps), "reward")
    assert r_post.mean() < r_pre.mean() + 0.1 and r_post.mean() < twin[-10:].mean()
    f_pre, f_post = pre_post(run, "frac_reward_zero_std", 10)
    assert f_post.mean() > f_pre.mean() + 0.1


def sig_length_explosion(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "completions/mean_length", 10)
    assert post.mean() >= 3.0 * pre.mean()
    c_pre, c_post = pre_post(run, "completions/clipped_ratio", 10)
    assert c_post.mean() > max(0.1, c_pre.max())


def sig_length_collapse(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "completions/mean_length", 10)
    assert post.mean() < 0.4 * pre.mean()
    lo, _ = col(run, "completions/min_length")
    assert lo[-10:].max() <= 5
    s, after = spread(run)
    assert np.mean(s[-10:]) < 0.7 * np.mean(s[~after])


def sig_truncation(run: SyntheticRun) -> None:
    clipped, after = col(run, "completions/clipped_ratio")
    length, _ = col(run, "completions/mean_length")
    term, _ = col(run, "completions/mean_terminated_length")
    cap = col(run, "completions/max_length")[0].max()
    assert clipped[~after].max() < 0.1
    assert clipped[-10:].mean() > 0.5
    assert length[-10:].mean() > 0.85 * cap
    assert term[-10:].mean() < length[-10:].mean() - 0.1 * cap


def sig_ratio_blowup(run: SyntheticRun) -> None:
    if run.family == "ppo":
        ratio, after = col(run, "val/ratio")
        clip, _ = col(run, "policy/clipfrac_avg")
        assert np.all(np.abs(ratio[~after] - 1.0) < 0.15) and clip[~after].max() < 0.3
        assert not 0.5 <= ratio[-1] <= 2.0 and clip[-5:].mean() > 0.4
        return
    region, after = col(run, "clip_ratio/region_mean")
    assert region[~after].min() > 0.02 and region[~after].max() < 0.3  # off-policy but fine
    assert region[after].max() > 0.4


def sig_loss_spike(run: SyntheticRun) -> None:
    loss, after = col(run, "loss")
    i0 = int(np.argmax(after))
    level = loss[i0 - 10: i0].mean()
    assert loss[i0] > 2.5 * level
    assert loss[i0: i0 + 5].min() > 1.8 * level  # sustained, not a single point
    assert loss[-5:].mean() < loss[i0]


def sig_nan(run: SyntheticRun) -> None:
    loss, after = col(run, "loss")
    grad, _ = col(run, "grad_norm")
    assert np.array_equal(np.isnan(loss), after)
    assert np.array_equal(~np.isfinite(grad), after)
    assert math.isnan(run.rows[-1]["train_loss"])


def sig_dead_run(run: SyntheticRun) -> None:
    grad, after = col(run, "grad_norm")
    loss, _ = col(run, "loss")
    assert np.all(grad[~after] > 0) and np.all(grad[after] == 0.0)
    assert np.all(loss[after] == loss[after][0])
    if run.family in ("grpo", "grpo_kl"):
        for key, value in (("frac_reward_zero_std", 1.0), ("reward_std", 0.0)):
            v, _ = col(run, key)
            assert np.all(v[after] == value)
        for key in ("reward", "completions/mean_length"):
            v, _ = col(run, key)
            assert np.all(v[after] == v[after][0])


def sig_eval_divergence(run: SyntheticRun) -> None:
    evals = [(r["step"], r["eval_loss"]) for r in run.rows if "eval_loss" in r]
    assert len(evals) >= 8
    pre = [v for s, v in evals if s < run.onset_step]
    post = [v for s, v in evals if s >= run.onset_step]
    assert len(post) >= 2 and post[-1] > 1.1 * min(pre)
    loss, after = col(run, "loss")
    assert loss[-10:].mean() < loss[after][:10].mean()


def sig_clip_growing(run: SyntheticRun) -> None:
    key = "policy/clipfrac_avg" if run.family == "ppo" else "clip_ratio/region_mean"
    pre, post = pre_post(run, key, 10)
    assert pre.mean() < 0.2 and post.mean() > 0.3
    mark = run.marks["clip_crosses_0.30"]
    assert mark > run.onset_step
    v, _ = col(run, key)
    steps = np.array([r["step"] for r in run.train_rows])
    assert np.median(v[(steps >= run.onset_step) & (steps < mark)]) < 0.3  # the window to catch it in


def sig_kl_growing(run: SyntheticRun) -> None:
    warn = 0.5 if run.family == "grpo_kl" else 6.0
    kl, after = col(run, kl_key(run))
    assert np.median(kl[~after]) < 0.3 * warn
    mark = run.marks.get("kl_crosses_warn", run.n_steps + 1)
    assert mark - run.onset_step > 0.4 * (run.n_steps - run.onset_step)  # the level line is crossed late
    steps = np.array([r["step"] for r in run.train_rows])
    early = kl[(steps >= run.onset_step) & (steps < run.onset_step + 0.3 * (run.n_steps - run.onset_step))]
    assert np.median(early) < warn
    assert kl[-10:].mean() > 2 * np.median(kl[~after][-20:])


def _length_ratio(run: SyntheticRun) -> float:
    pre, post = pre_post(run, "completions/mean_length", 10)
    return float(post.mean() / pre.mean())


def sig_length_creep_up(run: SyntheticRun) -> None:
    assert _length_ratio(run) > 1.3


def _reward_stalls(run: SyntheticRun) -> None:
    """After onset the reward stops improving, where its healthy twin keeps climbing."""
    r, after = col(run, "reward")
    twin, _ = col(healthy_run(run.family, seed=run.seed, n_steps=run.n_steps), "reward")
    assert r[-10:].mean() < r[~after][-10:].mean() + 0.1 and r[-10:].mean() <= twin[-10:].mean() + 0.02


def sig_length_creep_down(run: SyntheticRun) -> None:
    assert _length_ratio(run) < 0.8
    _reward_stalls(run)


def sig_length_shift(run: SyntheticRun) -> None:
    r = _length_ratio(run)
    assert r > 1.25 or r < 0.75


def sig_truncation_gap(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "completions/clipped_ratio", 10)
    assert pre.mean() < 0.04 and 0.05 < post.mean() < 0.3
    gap = [(r["completions/mean_length"] - r["completions/mean_terminated_length"]) / r["completions/mean_length"]
           for r in run.train_rows[-10:]]
    assert np.mean(gap) > 0.03


def sig_length_variance_collapse(run: SyntheticRun) -> None:
    s, after = spread(run)
    assert np.mean(s[after][-10:]) < 0.35 * np.mean(s[~after][-10:])
    assert 0.7 < _length_ratio(run) < 1.4  # the mean stays put
    _reward_stalls(run)


def sig_length_variance_shift(run: SyntheticRun) -> None:
    s, after = spread(run)
    assert np.mean(s[after][-10:]) > 1.3 * np.mean(s[~after][-10:])
    assert 0.7 < _length_ratio(run) < 1.4


def sig_margin_plateau(run: SyntheticRun) -> None:
    m, after = col(run, "rewards/margins")
    acc, _ = col(run, "rewards/accuracies")
    assert 0.2 < m[after][-30:].mean() < 0.6 and acc[after][-30:].mean() < 0.72


def sig_rewards_converging(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "rewards/margins", 20)
    assert post.mean() < 0.8 * pre.mean()


def sig_chosen_runaway(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "rewards/chosen", 10)
    assert post.mean() > pre.mean() + 1.5


def sig_reward_shift_up(run: SyntheticRun) -> None:
    pre, post = pre_post(run, reward_key(run), 10)
    assert post.mean() > pre.mean() + (0.8 if run.family == "ppo" else 0.1)
    if run.family == "grpo":
        assert _length_ratio(run) > 1.2
    else:
        kl_pre, kl_post = pre_post(run, kl_key(run), 10)
        assert kl_post.mean() > 2 * kl_pre.mean()


def sig_reward_shift_down(run: SyntheticRun) -> None:
    pre, post = pre_post(run, reward_key(run), 10)
    assert post.mean() < pre.mean() - (0.5 if run.family == "ppo" else 0.08)


def sig_gold_divergence(run: SyntheticRun) -> None:
    assert run.gold == (GOLD_FUNC,)
    r_pre, r_post = pre_post(run, "reward", 10)
    g_pre, g_post = pre_post(run, GOLD, 10)
    assert r_post.mean() > r_pre.mean() and g_post.mean() < g_pre.mean()


def sig_reward_variance_high(run: SyntheticRun) -> None:
    v, after = col(run, reward_key(run))
    assert np.std(np.diff(v[after][-30:])) > 1.8 * np.std(np.diff(v[~after][-30:]))


def sig_value_blowup(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "loss/value_avg", 10)
    assert post.mean() > 3 * pre.mean()
    pre, post = pre_post(run, "val/clipfrac_avg", 10)
    assert post.mean() > 0.45 > pre.mean()


def sig_ratio_variance(run: SyntheticRun) -> None:
    pre, post = pre_post(run, "val/ratio_var", 10)
    assert np.median(post) > 50 * np.median(pre)
    ratio, after = col(run, "val/ratio")
    assert 0.8 < np.median(ratio[after]) < 1.25


def _detrended(v: np.ndarray) -> float:
    """Residual spread around a straight line, relative to the level."""
    x = np.arange(len(v))
    return float(np.std(v - np.polyval(np.polyfit(x, v, 1), x)) / np.mean(v))


def sig_convergence_oscillation(run: SyntheticRun) -> None:
    loss, after = col(run, "loss")
    assert _detrended(loss[after][-40:]) > 1.2 * _detrended(loss[~after][-40:])  # swings around the level


def _noise(v: np.ndarray) -> float:
    """Row-to-row noise: of log(v) for a positive series (per-token KL), else relative to the level."""
    if np.all(v > 0):
        return float(np.median(np.abs(np.diff(np.log(v)))))
    return float(np.std(np.diff(v)) / max(np.median(np.abs(v)), 1e-9))


def sig_kl_noisy(run: SyntheticRun) -> None:
    kl, after = col(run, kl_key(run))
    assert _noise(kl[after][-40:]) > 2.0 * _noise(kl[~after][-40:])
    if run.family == "ppo":
        assert (kl[after] < 0).mean() > 0.1  # negative estimates


def sig_kl_noise_ramp(run: SyntheticRun) -> None:
    kl, after = col(run, kl_key(run))
    post = kl[after]
    k = max(len(post) // 4, 5)
    assert _noise(post[-k:]) > 2.0 * _noise(kl[~after][-k:])


def sig_lr_peak_not_reached(run: SyntheticRun) -> None:
    lr, after = col(run, "learning_rate")
    assert after.all() and np.all(np.diff(lr) >= 0) and lr[-1] < 0.85 * float(run.config["lr_peak"])


SIGNATURES: dict[str, Callable[[SyntheticRun], None]] = {name: globals()[f"sig_{name}"] for name in PATHOLOGIES}


@pytest.mark.parametrize(("family", "pathology"), combinations(include_healthy=False))
def test_pathology_signature(family: str, pathology: str) -> None:
    for seed in SEEDS:
        run = generate_run(family, pathology, seed=seed, n_steps=300)
        assert run.onset_step is not None and 1 <= run.onset_step <= 300
        SIGNATURES[pathology](run)


@pytest.mark.parametrize(("family", "pathology"), [
    ("grpo_kl", "kl_runaway"), ("grpo", "entropy_collapse"), ("sft", "nan"), ("ppo", "clip_growing"),
    ("grpo", "length_variance_collapse"), ("grpo_kl", "kl_growing"), ("dpo", "chosen_runaway")])
def test_signature_also_holds_with_coarse_logging(family: str, pathology: str) -> None:
    SIGNATURES[pathology](generate_run(family, pathology, seed=1, n_steps=1000, logging_steps=10))


def test_eval_divergence_forces_eval_rows() -> None:
    run = generate_run("sft", "eval_divergence", seed=0, with_eval=False)
    assert any("eval_loss" in r for r in run.rows)
