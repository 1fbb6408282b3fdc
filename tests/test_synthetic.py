"""Tests for the synthetic TRL-log generator: shape, determinism and that each label is honest
(the pathology's signature shows after onset and not before)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import numpy as np
import pytest

from synthetic import (
    FAMILIES,
    FAMILY_KEYS,
    PATHOLOGIES,
    SUMMARY_KEYS,
    SyntheticRun,
    combinations,
    expected_gauges,
    generate_run,
    healthy_run,
)

SEEDS = (0, 1, 2)
CLIP_KEYS = (
    "clip_ratio/low_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_mean",
    "clip_ratio/high_max",
    "clip_ratio/region_mean",
)
# pathologies whose run differs from the healthy one before onset, on purpose
PRE_ONSET_DIFFERS = {("grpo", "ratio_blowup"), ("grpo_kl", "ratio_blowup")}


def col(run: SyntheticRun, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, after-onset mask) over the train rows."""
    rows = run.train_rows
    vals = np.array([r[key] for r in rows], dtype=float)
    steps = np.array([r["step"] for r in rows])
    onset = run.onset_step if run.onset_step is not None else math.inf
    return vals, steps >= onset


def dump(rows: list[dict[str, float]]) -> str:
    return json.dumps(rows)  # NaN-safe equality


# ---------------------------------------------------------------------------------------------
# structure


def test_determinism_per_seed() -> None:
    for fam, path in [("grpo", None), ("dpo", "nan"), ("ppo", "kl_runaway"), ("sft", "eval_divergence")]:
        a = generate_run(fam, path, seed=7)
        b = generate_run(fam, path, seed=7)
        c = generate_run(fam, path, seed=8)
        assert dump(a.rows) == dump(b.rows)
        assert a.onset_step == b.onset_step
        assert dump(a.rows) != dump(c.rows)


@pytest.mark.parametrize(("family", "pathology"), combinations())
def test_every_combination_generates(family: str, pathology: str | None) -> None:
    run = generate_run(family, pathology, seed=3, n_steps=120)
    assert run.family == family and run.pathology == pathology and run.seed == 3
    assert run.expected_gauges == expected_gauges(pathology, family)
    if pathology is None:
        assert run.onset_step is None and run.expected_gauges == ()
    else:
        assert run.expected_gauges and set(run.expected_gauges) <= set(PATHOLOGIES[pathology].gauges)
        assert 1 <= run.onset_step <= 120
    for row in run.train_rows:
        assert tuple(row) == FAMILY_KEYS[family]
    summary = run.rows[-1]
    assert set(summary) == set(SUMMARY_KEYS) and summary["step"] == 120
    steps = [r["step"] for r in run.train_rows]
    assert steps == list(range(1, 121))


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


def test_family_keys() -> None:
    assert "kl" not in FAMILY_KEYS["grpo"]
    assert "kl" in FAMILY_KEYS["grpo_kl"]
    for fam in FAMILIES:
        assert {"step", "epoch", "learning_rate", "loss", "grad_norm"} <= set(FAMILY_KEYS[fam])
    for seed in SEEDS:
        run = healthy_run("grpo", seed=seed)
        for key in CLIP_KEYS:
            assert all(r[key] == 0.0 for r in run.train_rows), key


def test_logging_steps_and_lr_schedule() -> None:
    run = healthy_run("grpo_kl", n_steps=300, logging_steps=10, seed=1)
    steps = [r["step"] for r in run.train_rows]
    assert steps == list(range(10, 301, 10))
    for fam, peak in (("grpo", 1e-6), ("sft", 2e-5)):
        lr, _ = col(healthy_run(fam, n_steps=200), "learning_rate")
        assert lr[0] < lr.max() == pytest.approx(peak)
        assert int(np.argmax(lr)) <= 12  # 5 % warm-up
        assert lr[-1] < 0.02 * peak


def test_onset_resolution() -> None:
    assert generate_run("sft", "nan", onset=0.5, n_steps=200).onset_step == 100
    assert generate_run("sft", "nan", onset=37, n_steps=200).onset_step == 37
    assert generate_run("sft", "nan", onset=37, n_steps=200, logging_steps=5).onset_step == 40
    for seed in range(10):
        onset = generate_run("dpo", "nan", seed=seed, n_steps=200).onset_step
        assert 60 <= onset <= 140
    assert generate_run("ppo", "kl_near_zero", onset=0.5).onset_step == 1


def test_pathological_run_matches_healthy_before_onset() -> None:
    """Baseline and pathology randomness are separate streams: a labelled run is the healthy run
    of the same seed up to its onset, which makes paired comparisons exact."""
    for fam, path in combinations(include_healthy=False):
        if (fam, path) in PRE_ONSET_DIFFERS:
            continue
        run = generate_run(fam, path, seed=5)
        base = healthy_run(fam, seed=5)
        pre = [r for r in run.train_rows if r["step"] < run.onset_step]
        assert dump(pre) == dump(base.train_rows[: len(pre)]), (fam, path)


def test_noise_zero_is_smooth() -> None:
    reward, _ = col(healthy_run("grpo", noise=0.0, seed=2), "reward")
    assert np.all(np.diff(reward) >= -1e-12)
    loss, _ = col(healthy_run("sft", noise=0.0, seed=2), "loss")
    assert np.all(np.diff(loss) <= 1e-12)


def test_large_run_is_fast() -> None:
    t0 = time.perf_counter()
    run = generate_run("grpo", n_steps=100_000, seed=0)
    assert time.perf_counter() - t0 < 3.0
    assert len(run.rows) == 100_001


# ---------------------------------------------------------------------------------------------
# healthy runs look healthy


@pytest.mark.parametrize("seed", SEEDS)
def test_healthy_grpo(seed: int) -> None:
    run = healthy_run("grpo", seed=seed)
    loss, _ = col(run, "loss")
    assert abs(loss.mean()) < 0.02 and np.abs(loss).max() < 0.4  # surrogate, not a loss curve
    ent, _ = col(run, "entropy")
    assert ent.min() > 0.6 * ent[0]
    clipped, _ = col(run, "completions/clipped_ratio")
    assert clipped.max() < 0.05
    rstd, _ = col(run, "reward_std")
    assert rstd.min() > 0.1 and rstd.max() < 0.7
    frac, _ = col(run, "frac_reward_zero_std")
    assert frac.mean() < 0.2
    reward, _ = col(run, "reward")
    assert reward[-20:].mean() > reward[:20].mean()
    mean, _ = col(run, "completions/mean_length")
    lo, _ = col(run, "completions/min_length")
    hi, _ = col(run, "completions/max_length")
    assert np.all(lo <= mean) and np.all(mean <= hi)
    tokens, _ = col(run, "num_tokens")
    assert np.all(np.diff(tokens) > 0)
    kl, _ = col(healthy_run("grpo_kl", seed=seed), "kl")
    assert kl[0] == 0.0 and kl.max() < 0.2 and kl[-20:].mean() > kl[:20].mean()


@pytest.mark.parametrize("seed", SEEDS)
def test_healthy_ppo_dpo_sft(seed: int) -> None:
    ppo = healthy_run("ppo", seed=seed)
    kl, _ = col(ppo, "objective/kl")
    assert kl.min() >= 0.0 and 1.0 < kl[-20:].mean() < 6.0
    ratio, _ = col(ppo, "val/ratio")
    assert np.all(np.abs(ratio - 1.0) < 0.1)
    clip, _ = col(ppo, "policy/clipfrac_avg")
    assert 0.03 < clip.mean() < 0.25
    scores, _ = col(ppo, "objective/scores")
    rlhf, _ = col(ppo, "objective/rlhf_reward")
    nsr, _ = col(ppo, "objective/non_score_reward")
    np.testing.assert_allclose(rlhf, scores + nsr)

    dpo = healthy_run("dpo", seed=seed)
    loss, _ = col(dpo, "loss")
    assert loss[0] == pytest.approx(math.log(2.0)) and 0.2 < loss[-20:].mean() < 0.55
    acc, _ = col(dpo, "rewards/accuracies")
    assert np.all((acc >= 0) & (acc <= 1)) and acc[-30:].mean() > 0.65

    sft = healthy_run("sft", seed=seed, with_eval=True)
    loss, _ = col(sft, "loss")
    assert loss[:3].max() > 1.2 and loss[-20:].mean() < 0.5 * loss[:3].mean()
    evals = [r for r in sft.rows if "eval_loss" in r]
    assert len(evals) == 10 and set(evals[0]) == {
        "eval_loss",
        "eval_runtime",
        "eval_samples_per_second",
        "epoch",
        "step",
    }
    assert evals[-1]["eval_loss"] > loss[-20:].mean() * 0.9
    grad, _ = col(sft, "grad_norm")
    local = np.median(np.lib.stride_tricks.sliding_window_view(grad, 11), axis=1)
    spikes = np.flatnonzero(grad[5:-5] > 3.0 * local)
    assert 1 <= len(spikes) <= 6 and np.all(np.diff(spikes) > 1)  # isolated single points


def test_dpo_margins_exact_and_falling_chosen_is_healthy() -> None:
    fell = 0
    for seed in range(8):
        for path in (None, "margin_collapse", "loss_spike", "dead_run"):
            run = generate_run("dpo", path, seed=seed)
            for r in run.train_rows:
                assert r["rewards/margins"] == r["rewards/chosen"] - r["rewards/rejected"]
        chosen, _ = col(healthy_run("dpo", seed=seed), "rewards/chosen")
        margins, _ = col(healthy_run("dpo", seed=seed), "rewards/margins")
        fell += chosen[-20:].mean() < chosen[0]
        assert margins[-20:].mean() > 0.3  # ... while the margin grows
    assert fell >= 2


def test_no_nan_in_healthy_runs() -> None:
    for fam in FAMILIES:
        run = healthy_run(fam, seed=4, with_eval=True)
        for r in run.rows:
            assert all(math.isfinite(v) for v in r.values()), (fam, r)


# ---------------------------------------------------------------------------------------------
# pathology signatures: present after onset, absent before


def kl_key(run: SyntheticRun) -> str:
    return "kl" if run.family == "grpo_kl" else "objective/kl"


def sig_kl_runaway(run: SyntheticRun) -> None:
    kl, after = col(run, kl_key(run))
    warn, stop = (0.2, 1.0) if run.family == "grpo_kl" else (10.0, 30.0)
    assert kl[~after].max() < warn
    assert kl[after].max() > stop


def sig_kl_near_zero(run: SyntheticRun) -> None:
    kl, after = col(run, kl_key(run))
    assert after.all() and kl.max() < 1e-3
    key = "reward" if run.family == "grpo_kl" else "objective/scores"
    reward, _ = col(run, key)
    assert reward[-20:].mean() > reward[:20].mean()  # training otherwise proceeds


def sig_negative_kl(run: SyntheticRun) -> None:
    kl, after = col(run, "objective/kl")
    assert kl[~after].min() >= 0.0
    assert kl[after].min() < -0.5 and kl[-10:].mean() < -0.4


def sig_reward_hacking(run: SyntheticRun) -> None:
    base = healthy_run(run.family, seed=run.seed)
    if run.family == "ppo":
        scores, _ = col(run, "objective/scores")
        ref, _ = col(base, "objective/scores")
        assert scores[-10:].mean() - ref[-10:].mean() > 1.5
        kl, after = col(run, "objective/kl")
        assert kl[-10:].mean() > 2 * kl[~after][-10:].mean()
        eos, after = col(run, "val/num_eos_tokens")
        assert eos[-10:].mean() < 0.8 * eos[~after].mean()
        return
    reward, _ = col(run, "reward")
    ref, _ = col(base, "reward")
    assert reward[-10:].mean() - ref[-10:].mean() > 0.2
    length, after = col(run, "completions/mean_length")
    assert length[-10:].mean() > 2.0 * length[~after][-20:].mean()
    if run.family == "grpo_kl":
        kl, after = col(run, "kl")
        assert kl[-10:].mean() > 2 * kl[~after].max()


def sig_margin_collapse(run: SyntheticRun) -> None:
    margins, after = col(run, "rewards/margins")
    assert margins[-10:].mean() < 0.5 * margins[~after][-10:].mean()
    acc, _ = col(run, "rewards/accuracies")
    assert acc[-10:].mean() < 0.7


def sig_reward_std_collapse(run: SyntheticRun) -> None:
    rstd, after = col(run, "reward_std")
    frac, _ = col(run, "frac_reward_zero_std")
    assert rstd[~after].min() > 0.1 and frac[~after].mean() < 0.2
    assert rstd[-10:].max() < 0.02 and frac[-10:].mean() > 0.9


def sig_entropy_collapse(run: SyntheticRun) -> None:
    ent, after = col(run, "entropy")
    assert ent[~after].min() > 0.6 * ent[0]
    assert ent[after].min() < 0.2 * ent[0]


def sig_length_explosion(run: SyntheticRun) -> None:
    length, after = col(run, "completions/mean_length")
    clipped, _ = col(run, "completions/clipped_ratio")
    assert length[-10:].mean() >= 3.0 * length[~after][-20:].mean()
    assert clipped[-10:].mean() > max(0.1, clipped[~after].max())


def sig_length_collapse(run: SyntheticRun) -> None:
    length, after = col(run, "completions/mean_length")
    lo, _ = col(run, "completions/min_length")
    hi, _ = col(run, "completions/max_length")
    assert length[-10:].mean() < 0.4 * length[~after][-20:].mean()
    assert lo[-10:].max() <= 5
    spread = hi - lo
    assert spread[-10:].mean() < 0.5 * spread[~after].mean()


def sig_truncation(run: SyntheticRun) -> None:
    clipped, after = col(run, "completions/clipped_ratio")
    length, _ = col(run, "completions/mean_length")
    term, _ = col(run, "completions/mean_terminated_length")
    cap, _ = col(run, "completions/max_length")
    cap_v = cap.max()
    assert clipped[~after].max() < 0.05
    assert clipped[-10:].mean() > 0.5
    assert length[-10:].mean() > 0.85 * cap_v
    assert term[-10:].mean() < length[-10:].mean() - 0.1 * cap_v


def sig_ratio_blowup(run: SyntheticRun) -> None:
    if run.family == "ppo":
        ratio, after = col(run, "val/ratio")
        clip, _ = col(run, "policy/clipfrac_avg")
        assert np.all(np.abs(ratio[~after] - 1.0) < 0.1) and clip[~after].max() < 0.3
        assert not 0.5 <= ratio[-1] <= 2.0 and clip[-5:].mean() > 0.4
        return
    region, after = col(run, "clip_ratio/region_mean")
    low, _ = col(run, "clip_ratio/low_mean")
    high, _ = col(run, "clip_ratio/high_mean")
    np.testing.assert_allclose(region, low + high)
    assert region[~after].min() > 0.02 and region[~after].max() < 0.3  # off-policy but fine
    assert region[after].max() > 0.4


def sig_loss_spike(run: SyntheticRun) -> None:
    loss, after = col(run, "loss")
    i0 = int(np.argmax(after))
    level = loss[i0 - 10 : i0].mean()
    assert loss[i0] > 2.5 * level
    assert loss[i0 : i0 + 5].min() > 1.8 * level  # sustained, not a single point
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
    assert len(evals) == 10
    pre = [v for s, v in evals if s < run.onset_step]
    post = [v for s, v in evals if s >= run.onset_step]
    assert len(post) >= 2 and post[-1] > 1.1 * min(pre)
    loss, after = col(run, "loss")
    assert loss[-10:].mean() < loss[after][:10].mean()


SIGNATURES: dict[str, Callable[[SyntheticRun], None]] = {name: globals()[f"sig_{name}"] for name in PATHOLOGIES}


@pytest.mark.parametrize(("family", "pathology"), combinations(include_healthy=False))
def test_pathology_signature(family: str, pathology: str) -> None:
    for seed in SEEDS:
        run = generate_run(family, pathology, seed=seed)
        assert run.onset_step is not None and 1 <= run.onset_step <= 200
        SIGNATURES[pathology](run)


def test_signature_also_holds_with_coarse_logging() -> None:
    for fam, path in [("grpo_kl", "kl_runaway"), ("grpo", "entropy_collapse"), ("sft", "nan")]:
        run = generate_run(fam, path, seed=1, n_steps=1000, logging_steps=10)
        SIGNATURES[path](run)


def test_eval_divergence_forces_eval_rows() -> None:
    run = generate_run("sft", "eval_divergence", seed=0, with_eval=False)
    assert any("eval_loss" in r for r in run.rows)
