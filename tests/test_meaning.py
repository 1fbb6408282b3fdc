"""Judgement by meaning (issue 47 item 3): what a shape means, read as a general rule, not per log.

Each class below was a false alarm or a miss on fresh real logs: a KL exactly 0 read as a policy that does not move,
a fixed output format read as mode collapse, a first-row loss read as oscillation, an isolated gradient burst read
as an explosion, a loss exactly 0 from the first step passed as healthy, a fast entropy collapse read as sharpening
because the reward crept, a namespaced reward total not read as the reward. Streams are made with the row makers of
``core/streams.py``; where a real log of the shape is in ``../shared/real-logs`` it is read too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.core import analyze_rows
from wandb_rlcluster.core.cluster import InstrumentCluster
from wandb_rlcluster.core.keymap import guess_key
from wandb_rlcluster.core.keys import Normalizer
from wandb_rlcluster.core.streams import grpo, ramp, sft

from .conftest import shared_log


def findings(rows: list[dict[str, float]], trainer: str, n: int | None = None) -> dict[str, set[str]]:
    """rule id -> the severities it raised."""
    c = analyze_rows(rows, trainer=trainer, max_steps=n or len(rows))
    out: dict[str, set[str]] = {}
    for f in c.findings:
        out.setdefault(f.rule, set()).add(f.severity)
    return out


def alarms(found: dict[str, set[str]]) -> set[str]:
    return {r for r, sev in found.items() if sev & {"warn", "stop"}}


def stream(maker, n: int, seed: int = 0, **kw: object) -> list[dict[str, float]]:  # type: ignore[no-untyped-def]
    g = np.random.default_rng(seed)
    return [{"step": float(i), **maker(i, g, **kw)} for i in range(1, n + 1)]


# -- a series exactly constant: say which -----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_a_kl_exactly_zero_on_every_row_is_the_term_switched_off_not_a_policy_that_does_not_move(seed: int) -> None:
    rows = stream(lambda i, g: grpo(i, g, n=300, kl=0.0), 300, seed)
    found = findings(rows, "grpo")
    assert found.get("kl-term-off") == {"info"}
    assert "kl-near-zero" not in found and not {r for r in alarms(found) if r.startswith("kl")}
    c = analyze_rows(rows, trainer="grpo", max_steps=300)
    msg = next(f.message for f in c.findings if f.rule == "kl-term-off")
    assert "switched off" in msg and "not moving" not in msg


def test_a_tiny_measured_kl_is_still_a_policy_that_does_not_move() -> None:
    """The meaning is the exact 0: a KL estimate pinned near 0 but measured (1e-6 scattered) keeps its warning."""
    rows = stream(lambda i, g: grpo(i, g, kl=1e-6 * abs(g.normal())), 200)
    found = findings(rows, "grpo")
    assert "kl-near-zero" in alarms(found) and "kl-term-off" not in found


def test_a_kl_exactly_zero_only_at_the_first_step_is_read_as_a_kl() -> None:
    rows = stream(lambda i, g: grpo(i, g, kl=0.0 if i == 1 else 0.02 + 0.005 * g.normal()), 200)
    assert "kl-term-off" not in findings(rows, "grpo")


@pytest.mark.parametrize("trainer, maker", [("sft", sft), ("dpo", None)])
def test_a_loss_exactly_zero_from_the_first_step_stops_nothing_is_learned(trainer: str, maker: object) -> None:
    from wandb_rlcluster.core.streams import dpo

    make = sft if trainer == "sft" else dpo
    rows = stream(make, 100)
    for r in rows:
        r["loss"] = 0.0
    c = analyze_rows(rows, trainer=trainer, max_steps=100)
    stop = [f for f in c.findings if f.rule == "loss-zero"]
    assert stop and stop[0].severity == "stop" and stop[0].step <= 6
    assert "nothing is being learned" in stop[0].message and "masked" in stop[0].message


def test_a_loss_that_becomes_exactly_zero_is_a_broken_loss_and_a_surrogate_zero_is_nothing() -> None:
    rows = stream(lambda i, g: sft(i, g, loss=0.0 if i > 60 else None), 120)
    found = findings(rows, "sft")
    assert found.get("loss-went-zero") == {"warn"} and "loss-zero" not in found
    # TRL's on-policy GRPO logs a surrogate loss of exactly 0 (advantages sum to 0 in every group): not news
    g_rows = stream(lambda i, g: grpo(i, g), 120)
    for r in g_rows:
        r["loss"] = 0.0
    assert not {"loss-zero", "loss-went-zero"} & set(findings(g_rows, "grpo"))


# -- a fixed output format is not mode collapse ------------------------------------------------------------------------
def _format(i: int, g: np.random.Generator, entropy_up: bool) -> dict[str, float]:
    row = grpo(i, g, reward=0.4, spread=1.2 - 1.15 * ramp(i, 100, 40))
    row["entropy"] = 0.6 * (1 + (0.5 if entropy_up else -0.3) * ramp(i, 100, 40)) + 0.01 * g.normal()
    return row


@pytest.mark.parametrize("seed", range(3))
def test_length_variance_collapse_beside_a_rising_entropy_is_a_fixed_format(seed: int) -> None:
    found = findings(stream(_format, 200, seed, entropy_up=True), "grpo")
    assert found.get("length-fixed-format") == {"info"}
    assert not {"length-variance-collapse", "length-variance-change", "mode-collapse"} & alarms(found)


def test_the_same_collapse_beside_a_falling_entropy_is_still_a_warning() -> None:
    found = findings(stream(_format, 200, 0, entropy_up=False), "grpo")
    assert "length-variance-collapse" in alarms(found) and "length-fixed-format" not in found


# -- the start is not oscillation --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, noise", [(60, 0.05), (372, 0.05), (372, 0.2), (2400, 0.1)])
def test_a_first_row_outlier_is_the_start_not_oscillation(n: int, noise: float) -> None:
    """An SFT loss of 20 on its first logged row and about 0.15 on every later one: the start (the period fit's
    step-skew gate and the swing's running median keep it out)."""
    g = np.random.default_rng(1)
    rows = [{"step": float(i * 10), "loss": 20.0 if i == 1 else 0.15 * math.exp(noise * g.normal()),
             "grad_norm": abs(1.0 + 0.2 * g.normal()), "learning_rate": 2e-5} for i in range(1, n + 1)]
    found = findings(rows, "sft", n * 10)
    assert not {"loss-oscillating", "loss-spike", "loss-shift-up"} & set(found)


def test_a_real_sft_log_that_starts_at_15_is_not_oscillating() -> None:
    path = shared_log("corpus", "healthy", "sft_gemma3_1b_tasfia.json")  # first loss 14.8, median 0.49
    s = analyze_path(str(path)).to_dict()
    assert not [f for f in s["findings"] if f["rule"] == "loss-oscillating" or f["severity"] in ("warn", "stop")]


# -- an isolated gradient burst no other gauge feels is info ----------------------------------------------------------
def _bursts(seed: int, loss_follows: bool, n: int = 2400) -> list[dict[str, float]]:
    g = np.random.default_rng(seed)
    starts = (300, 900, 1500, 2100)
    rows = []
    for i in range(1, n + 1):
        burst = any(s <= i < s + 3 for s in starts)
        grad = (0.26 * math.exp(-i / 600) + 0.05) * abs(1 + 0.1 * g.normal()) * (20.0 + 5 * (i % 3) if burst else 1)
        row = sft(i, g, n=n, grad=grad, noise=0.03)
        if loss_follows and any(s <= i < s + 6 for s in starts):
            row["loss"] *= 2.0
        rows.append({"step": float(i), **row})
    return rows


@pytest.mark.parametrize("seed", range(2))
def test_an_isolated_gradient_burst_the_loss_does_not_feel_is_info(seed: int) -> None:
    found = findings(_bursts(seed, loss_follows=False), "sft")
    assert found.get("grad-burst-unfelt") == {"info"}
    assert not alarms(found)


def test_a_gradient_burst_the_loss_follows_is_an_explosion() -> None:
    found = findings(_bursts(0, loss_follows=True), "sft")
    assert "grad-explosion" in alarms(found)


def test_a_sustained_explosion_warns_even_before_the_loss_moves() -> None:
    rows = stream(lambda i, g: sft(i, g, grad=8.0 * (1 + 0.1 * g.normal()) if i >= 60 else None), 100)
    c = analyze_rows(rows, trainer="sft", max_steps=100)
    first = min(f.step for f in c.findings if f.rule == "grad-explosion")
    assert 60 <= first <= 70


def test_the_real_long_sft_with_isolated_grad_spikes_stays_quiet() -> None:
    path = shared_log("sft_llama3_8b_mob_3750.json")  # 50 norms > 5x the median, the loss unmoved
    s = analyze_path(str(path)).to_dict()
    assert s["verdict"] == "ok" and not [f for f in s["findings"] if f["rule"] == "grad-explosion"]


# -- entropy: how far and how fast -------------------------------------------------------------------------------------
def _fast_collapse(i: int, g: np.random.Generator) -> dict[str, float]:
    e = 1.2 if i < 100 else 1.2 * (0.13 + 0.87 * math.exp(-(i - 100) / 10))
    return grpo(i, g, reward=0.55 + 0.25 * i / 200, entropy=e)


def _sharpening(i: int, g: np.random.Generator) -> dict[str, float]:
    return grpo(i, g, reward=0.3 + 0.6 * (1 - math.exp(-i / 50)), entropy=1.2 * (0.15 + 0.85 * math.exp(-i / 60)))


@pytest.mark.parametrize("seed", range(4))
def test_entropy_at_13_percent_within_a_quarter_of_the_run_is_collapse_though_the_reward_creeps(seed: int) -> None:
    c = analyze_rows(stream(_fast_collapse, 200, seed), trainer="grpo", max_steps=200)
    warn = [f for f in c.findings if f.rule == "entropy-collapse"]
    assert warn and "too fast" in warn[0].message


@pytest.mark.parametrize("seed", range(4))
def test_entropy_as_deep_over_the_whole_run_with_the_score_climbing_is_sharpening(seed: int) -> None:
    found = findings(stream(_sharpening, 200, seed), "grpo")
    assert "entropy-sharpening" in found and not {"entropy-collapse", "mode-collapse"} & alarms(found)


def test_a_real_fast_sharpening_that_solves_the_task_is_not_collapse() -> None:
    """verl GRPO on Qwen2-7B math: entropy 0.34 -> 0.06 while the score climbs 0.26 -> 0.98."""
    path = shared_log("new", "verl", "verl_grpo_qwen2_7b_math_diqiu_megatron.log")
    s = analyze_path(str(path)).to_dict()
    assert not [f for f in s["findings"] if f["gauge"] == "entropy" and f["severity"] in ("warn", "stop")]


# -- reward keys by meaning --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["train/reward/total", "rollout/reward/total", "env/rewards/mean", "agent/reward/avg",
                                 "train/rewards/total", "reward/total"])
def test_any_namespaced_reward_total_or_mean_is_the_reward(key: str) -> None:
    row = Normalizer().normalize({key: 0.4, "step": 3})
    assert row is not None and row.values.get("reward") == 0.4


@pytest.mark.parametrize("key", ["train/reward/format", "rollout/reward/format/mean", "eval/reward/total",
                                 "reward/total_max"])
def test_a_reward_component_or_an_eval_reward_is_not_taken_for_the_reward(key: str) -> None:
    g = guess_key(Normalizer().key(key) or key)
    assert g is None or not g.applied or g.role != "reward"


def test_a_custom_loop_logging_train_reward_total_is_read_as_rl_with_its_reward() -> None:
    rng = np.random.default_rng(0)
    c = InstrumentCluster()
    for s in range(120):
        c.update({"step": s, "train/reward/total": 0.2 + 0.5 * min(1.0, s / 80) + 0.03 * rng.normal(),
                  "train/reward/format": 0.9, "policy/entropy": 1.0 - 0.2 * s / 120})
    c.finalize()
    assert c.family == "grpo"
    assert "train/reward/total" in c.normalizer.read_by_meaning


def test_a_real_sharpening_on_a_solved_task_is_not_collapse_and_the_later_fault_is_still_named() -> None:
    """verl GRPO (FSDP): entropy 0.20 -> 0.035 over 60 rows while the score sits at 0.87-0.93 (solved: sharpening),
    then from ~step 155 the responses explode: no entropy warning in the healthy part, the length fault named."""
    path = shared_log("new", "verl", "verl_grpo_qwen2_7b_math_diqiu_fsdp.log")
    s = analyze_path(str(path)).to_dict()
    warned = [f for f in s["findings"] if f["severity"] in ("warn", "stop")]
    assert not [f for f in warned if f["gauge"] == "entropy" and f["step"] < 155]
    assert any(f["rule"] == "length-explosion" for f in warned)
