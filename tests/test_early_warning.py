"""Every early-warning rule of issue #10, by name: it fires at or after the onset on a stream built to show it,
and stays silent on a healthy stream of the same family.

The streams are built here (a few lines each, TRL 1.16 key names, seeded Gaussian noise), not taken from the
benchmark generator, so each test says exactly what shape its rule is for.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import pytest

from wandb_rlcluster.core import DIAGNOSIS_ID, InstrumentCluster, analyze_rows
from wandb_rlcluster.core.findings import Finding

N, ONSET = 300, 150
Row = dict[str, float]
Maker = Callable[[int, random.Random], Row]


def ramp(i: int, start: int = ONSET, span: int = 100) -> float:
    """0 before ``start``, rising linearly to 1 over ``span`` rows."""
    return min(1.0, max(0.0, (i - start) / span))


def build(make: Maker, n: int = N, seed: int = 0) -> list[Row]:
    rng = random.Random(seed)
    return [{"step": float(i), **make(i, rng)} for i in range(1, n + 1)]


def grpo(i: int, g: random.Random, *, reward: float | None = None, length: float = 200.0, spread: float = 1.2,
         entropy: float | None = None, kl: float | None = None, zero_std: float = 0.1, lr: float = 1e-6,
         spread_noise: float = 0.05) -> Row:
    """A healthy GRPO row (beta > 0 when ``kl`` is given): reward creeping up, entropy easing down."""
    L = length * (1 + g.gauss(0, 0.03))
    row = {
        "loss": 0.01 + g.gauss(0, 0.01), "grad_norm": abs(0.3 + g.gauss(0, 0.03)), "learning_rate": lr,
        "reward": (0.3 + 0.3 * i / N if reward is None else reward) + g.gauss(0, 0.05),
        "reward_std": abs(0.3 + g.gauss(0, 0.02)),
        "frac_reward_zero_std": min(1.0, max(0.0, zero_std + g.gauss(0, 0.03))),
        "completions/mean_length": L,
        "completions/min_length": max(1.0, L * (1 - spread / 2) * (1 + g.gauss(0, spread_noise))),
        "completions/max_length": L * (1 + spread / 2) * (1 + g.gauss(0, spread_noise)),
        "completions/clipped_ratio": 0.02, "completions/mean_terminated_length": L * 0.99,
        "entropy": (1.2 * (1 - 0.2 * i / N) if entropy is None else entropy) * (1 + g.gauss(0, 0.02)),
    }
    if kl is not None:
        row["kl"] = kl
    return row


def ppo(i: int, g: random.Random, *, kl: float = 5.0, kl_noise: float = 0.5, clip: float = 0.06,
        ratio_var: float = 0.001, value_loss: float | None = None, value_clip: float = 0.05, lr: float = 3e-6) -> Row:
    """A healthy TRL PPO row: per-sequence KL ~5 nats, clip fraction ~6 %, value loss easing down."""
    return {
        "loss": 1.0 + g.gauss(0, 0.05), "learning_rate": lr,
        "objective/kl": kl + g.gauss(0, kl_noise), "objective/scores": 0.2 + 0.4 * i / N + g.gauss(0, 0.05),
        "objective/entropy": 25.0 * (1 - 0.1 * i / N) + g.gauss(0, 1.0),
        "policy/clipfrac_avg": max(0.0, clip + g.gauss(0, 0.01)), "val/ratio": 1.0 + g.gauss(0, 0.02),
        "val/ratio_var": max(0.0, ratio_var * (1 + g.gauss(0, 0.1))),
        "loss/value_avg": (1.0 - 0.3 * i / N if value_loss is None else value_loss) * (1 + g.gauss(0, 0.05)),
        "val/clipfrac_avg": max(0.0, value_clip + g.gauss(0, 0.01)), "val/num_eos_tokens": 30.0,
    }


def dpo(i: int, g: random.Random, *, margin: float | None = None, acc: float | None = None,
        chosen: float | None = None, rejected: float | None = None) -> Row:
    """A healthy DPO row: margin and accuracy rising, chosen drifting slightly down, rejected falling."""
    c = -0.1 * i / N if chosen is None else chosen
    r = -1.2 * i / N if rejected is None else rejected
    m = (c - r) if margin is None else margin
    a = 0.55 + 0.3 * i / N if acc is None else acc
    return {"loss": 0.69 - 0.3 * i / N + g.gauss(0, 0.02), "grad_norm": 1.0 + g.gauss(0, 0.1),
            "learning_rate": 5e-7, "rewards/chosen": c + g.gauss(0, 0.05), "rewards/rejected": r + g.gauss(0, 0.05),
            "rewards/margins": m + g.gauss(0, 0.07), "rewards/accuracies": min(1.0, max(0.0, a + g.gauss(0, 0.05)))}


def found(rows: list[Row], trainer: str, rule: str, gauge: str | None = None, **kw: object) -> list[Finding]:
    cluster = analyze_rows(rows, trainer=trainer, **kw)  # type: ignore[arg-type]
    return [f for f in cluster.findings if f.rule.split(":")[0] == rule and (gauge is None or f.gauge == gauge)]


def alarms(rows: list[Row], trainer: str, **kw: object) -> list[tuple[str, str, int]]:
    cluster = analyze_rows(rows, trainer=trainer, **kw)  # type: ignore[arg-type]
    return [(f.gauge, f.rule, f.step) for f in cluster.findings if f.severity in ("warn", "stop")]


# (rule, gauge, severity, trainer, pathological row maker, healthy row maker of the same family, extra kwargs)
CASES: list[tuple[str, str, str, str, Maker, Maker, dict[str, object]]] = [
    # --- KL -------------------------------------------------------------------------------------------------
    ("kl-growing", "kl", "warn", "grpo",
     lambda i, g: grpo(i, g, kl=0.03 * math.exp(max(0, i - ONSET) / 25) + g.gauss(0, 0.003)),
     lambda i, g: grpo(i, g, kl=0.02 + 0.04 * i / N + g.gauss(0, 0.004)), {}),
    ("kl-noisy", "kl", "warn", "ppo",
     lambda i, g: ppo(i, g, kl_noise=0.5 + 4.5 * ramp(i)),
     lambda i, g: ppo(i, g), {}),
    # --- policy ratio, clipping, value function (PPO) --------------------------------------------------------
    ("clip-growing", "policy_ratio", "warn", "ppo",
     lambda i, g: ppo(i, g, clip=0.06 + 0.3 * ramp(i, span=150)),
     # healthy: clipping rises with the learning rate during warm-up, then holds
     lambda i, g: ppo(i, g, clip=0.02 + 0.04 * min(1.0, i / 40), lr=3e-6 * min(1.0, i / 40)), {}),
    ("ratio-variance", "policy_ratio", "warn", "ppo",
     lambda i, g: ppo(i, g, ratio_var=0.001 + 0.03 * ramp(i, span=30)), lambda i, g: ppo(i, g), {}),
    ("value-loss-growing", "policy_ratio", "warn", "ppo",
     lambda i, g: ppo(i, g, value_loss=0.8 + 4.0 * ramp(i)), lambda i, g: ppo(i, g), {}),
    ("value-clip-high", "policy_ratio", "warn", "ppo",
     lambda i, g: ppo(i, g, value_clip=0.05 + 0.45 * ramp(i, span=30)), lambda i, g: ppo(i, g), {}),
    # --- reward ---------------------------------------------------------------------------------------------
    ("reward-volatile", "reward", "warn", "grpo",
     lambda i, g: dict(grpo(i, g), reward=0.3 + 0.3 * i / N + g.gauss(0, 0.05 + 0.3 * ramp(i, span=30))),
     lambda i, g: grpo(i, g), {}),
    ("reward-shift-up", "reward", "info", "grpo",
     lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, span=5)), lambda i, g: grpo(i, g), {}),
    ("reward-shift-down", "reward", "warn", "grpo",
     lambda i, g: grpo(i, g, reward=0.6 - 0.35 * ramp(i, span=5)), lambda i, g: grpo(i, g), {}),
    ("proxy-gold-divergence", "reward", "warn", "grpo",
     lambda i, g: dict(grpo(i, g, reward=0.3 + 0.5 * i / N),
                       **{"rewards/gold/mean": 0.2 + 0.3 * min(i, ONSET) / N - 0.3 * ramp(i) + g.gauss(0, 0.03)}),
     lambda i, g: dict(grpo(i, g, reward=0.3 + 0.5 * i / N),
                       **{"rewards/gold/mean": 0.2 + 0.3 * i / N + g.gauss(0, 0.03)}),
     {"params": {"reward": {"gold": ["gold"]}}}),
    ("reward-component-dominant", "reward", "info", "grpo",
     lambda i, g: dict(grpo(i, g), **{"rewards/fmt/mean": 0.1 + 0.6 * ramp(i) + g.gauss(0, 0.04),
                                      "rewards/fmt/std": 0.3 + g.gauss(0, 0.02),
                                      "rewards/acc/mean": 0.3 + g.gauss(0, 0.04), "rewards/acc/std": 0.4}),
     lambda i, g: dict(grpo(i, g), **{"rewards/fmt/mean": 0.1 + 0.6 * ramp(i) + g.gauss(0, 0.04),
                                      "rewards/fmt/std": 0.3 + g.gauss(0, 0.02),
                                      "rewards/acc/mean": 0.3 + 0.3 * ramp(i) + g.gauss(0, 0.04),
                                      "rewards/acc/std": 0.4}), {}),
    ("reward-component-saturated", "reward", "warn", "grpo",
     lambda i, g: dict(grpo(i, g), **{"rewards/fmt/mean": min(1.0, 0.2 + 0.8 * ramp(i, span=60) + abs(g.gauss(0, 0.03))
                                                              * (1 - ramp(i, span=60))),
                                      "rewards/fmt/std": 0.35 * (1 - ramp(i, span=60)),
                                      "rewards/acc/mean": 0.3 + g.gauss(0, 0.04), "rewards/acc/std": 0.4}),
     lambda i, g: dict(grpo(i, g), **{"rewards/fmt/mean": min(1.0, 0.2 + 0.8 * ramp(i, span=60)),
                                      "rewards/fmt/std": 0.35 * (1 - ramp(i, span=60)),
                                      "rewards/acc/mean": 0.3 + 0.3 * ramp(i) + g.gauss(0, 0.04),
                                      "rewards/acc/std": 0.4}), {}),
    # --- DPO ------------------------------------------------------------------------------------------------
    ("margin-plateau", "reward", "warn", "dpo",
     lambda i, g: dpo(i, g, margin=0.4 * min(1.0, i / 60), acc=0.5 + 0.1 * min(1.0, i / 60)),
     lambda i, g: dpo(i, g, acc=0.55 + 0.1 * i / N), {"onset": 60}),
    ("margin-shrinking", "reward", "warn", "dpo",
     lambda i, g: dpo(i, g, margin=1.2 * min(i, ONSET) / ONSET - 0.9 * ramp(i), acc=0.8), lambda i, g: dpo(i, g), {}),
    ("chosen-reward-runaway", "reward", "warn", "dpo",
     lambda i, g: dpo(i, g, chosen=3.0 * ramp(i, span=150), rejected=-0.2), lambda i, g: dpo(i, g), {}),
    # --- length ---------------------------------------------------------------------------------------------
    ("length-grew", "length", "warn", "grpo",
     lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, span=40))), lambda i, g: grpo(i, g), {}),
    ("length-shrank", "length", "warn", "grpo",
     lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.4 * ramp(i, span=40))),
     lambda i, g: grpo(i, g, reward=0.4), {}),
    # a steady creep to +/-50 % by the end (max_steps known, as live): caught while still under the 30 % line;
    # the healthy control drifts +15 % over the whole run
    ("length-trend-up", "length", "warn", "grpo",
     lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, span=150))),
     lambda i, g: grpo(i, g, length=200 * (1 + 0.15 * i / N)), {"max_steps": N}),
    ("length-trend-down", "length", "warn", "grpo",
     lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.45 * ramp(i, span=150))),
     lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.15 * i / N)), {"max_steps": N}),
    ("length-variance-change", "length", "warn", "grpo",
     lambda i, g: grpo(i, g, spread=1.2 + 0.8 * ramp(i, span=30)), lambda i, g: grpo(i, g), {}),
    ("length-variance-collapse", "length", "warn", "grpo",
     lambda i, g: grpo(i, g, reward=0.4, spread=1.2 - 1.0 * ramp(i, span=40)), lambda i, g: grpo(i, g, reward=0.4), {}),
    ("truncation-gap", "length", "warn", "grpo",
     lambda i, g: {k: v for k, v in grpo(i, g).items() if k != "completions/clipped_ratio"}
     | {"completions/mean_terminated_length": 200 * (0.99 - 0.3 * ramp(i, span=20))},
     lambda i, g: {k: v for k, v in grpo(i, g).items() if k != "completions/clipped_ratio"}, {}),
    # --- entropy --------------------------------------------------------------------------------------------
    ("entropy-collapse", "entropy", "warn", "grpo",
     lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.5 * ramp(i))),
     lambda i, g: grpo(i, g, reward=0.4), {}),
    ("entropy-collapse-persistent", "entropy", "stop", "grpo",
     lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.92 * ramp(i, span=60)), zero_std=0.1 + 0.85 * ramp(i)),
     lambda i, g: grpo(i, g, reward=0.4), {}),
    # --- learning rate, convergence ------------------------------------------------------------------------------
    ("lr-peak-not-reached", "learning_rate", "warn", "grpo",
     lambda i, g: grpo(i, g, lr=1e-6 * i / 1000), lambda i, g: grpo(i, g, lr=1e-6 * min(i / 30, (N - i) / (N - 30))),
     {"max_steps": N, "onset": N // 2}),
]


@pytest.mark.parametrize(("rule", "gauge", "severity", "trainer", "sick", "healthy", "kw"), CASES,
                         ids=[c[0] for c in CASES])
def test_rule_fires_after_onset_and_not_on_healthy(rule, gauge, severity, trainer, sick, healthy, kw):
    kw = dict(kw)
    onset = int(kw.pop("onset", ONSET))  # type: ignore[call-overload]
    for seed in (0, 1, 2):
        hits = found(build(sick, seed=seed), trainer, rule, gauge, **kw)
        assert hits, f"{rule} silent (seed {seed})"
        assert hits[0].step >= onset, f"{rule} fired at {hits[0].step}, before onset {onset}"
        assert hits[0].severity == severity
        assert rule in hits[0].rule and hits[0].message
        quiet = found(build(healthy, seed=seed), trainer, rule, gauge, **kw)
        assert not quiet, f"{rule} fired on the healthy stream (seed {seed}) at {quiet[0].step}: {quiet[0].message}"


# --- rules with a second condition worth showing ---------------------------------------------------------------


def test_length_trend_caught_before_the_thirty_percent_line():
    rows = build(lambda i, g: grpo(i, g, length=200 * (1 + 0.5 * ramp(i, span=150))))
    f = found(rows, "grpo", "length-trend-up", max_steps=N)[0]
    assert f.value < 200 * 1.3 and "on course for" in f.message
    assert not found(rows[:ONSET + 40], "grpo", "length-grew", max_steps=N)


def test_a_length_fall_is_read_on_a_log_scale():
    """Lengths are close to lognormal: a creep to -35 % by the end (the reward stalled) is as far as +54 %, past the
    trend's +45 % target, so it warns on course (under the 25 % line) in every seed; the same creep upwards, to
    +35 %, is short of +45 % and stays quiet until it has itself moved 25 %."""
    for seed in range(3):
        down = found(build(lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.35 * ramp(i, span=150))),
                           seed=seed), "grpo", "length-trend-down", max_steps=N)
        assert down and down[0].step > ONSET and "on course for" in down[0].message, (seed, down)
        up = found(build(lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 + 0.35 * ramp(i, span=150))),
                         seed=seed), "grpo", "length-trend-up", max_steps=N)
        assert all("on course for" not in f.message for f in up), (seed, up)


def test_a_length_projection_never_passes_minus_100_percent():
    """The projection to the end of the run is a straight line in log space: a steep fall early in a long run is on
    course for close to -100 %, never past it (a straight line in tokens printed "on course for -151 %")."""
    for seed in range(3):
        rows = build(lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.6 * ramp(i, span=300))), seed=seed)
        down = found(rows, "grpo", "length-trend-down", max_steps=4 * N)
        assert down and "on course for" in down[0].message, (seed, down)
        course = int(down[0].message.split("on course for ")[1].split("%")[0])
        assert -100 < course <= -31, (seed, down[0].message)


def test_two_outlier_rows_are_not_a_reward_shift_but_a_drop_that_holds_is():
    """Heavy-tailed reward noise: two rows 8 sigmas down in a row, then back, in a healthy run. A row's CUSUM
    residual is clipped at 4 sigmas, at 8 where the row before it was out too, so they add 3 + 7, not 14, and the
    reward-shift-down line (12) is not crossed; a drop of 4 sigmas that holds is caught within a few rows, and a
    collapse of 16 sigmas on its third row (unclipped: on its first)."""
    def outliers(i: int, g: random.Random) -> Row:
        row = grpo(i, g, reward=0.5)
        if i in (200, 201):
            row["reward"] = 0.5 - 8 * 0.05
        if i == 250:
            row["reward"] = 0.5 - 30 * 0.05
        return row

    for seed in range(3):
        assert not found(build(outliers, seed=seed), "grpo", "reward-shift-down", max_steps=N), seed
        held = found(build(lambda i, g: grpo(i, g, reward=0.5 - 0.2 * (i >= 200)), seed=seed), "grpo",
                     "reward-shift-down", max_steps=N)
        assert held and 200 <= held[0].step <= 210, (seed, held)
        collapse = found(build(lambda i, g: grpo(i, g, reward=0.9 - 0.8 * (i >= 200)), seed=seed), "grpo",
                         "reward-shift-down", max_steps=N)
        assert collapse and collapse[0].step <= 202, (seed, collapse)


def test_a_length_climb_is_projected_in_tokens_and_a_resumed_run_from_its_first_step():
    """A climb is carried on as a straight line in tokens (compounded in log space, +0.3 % a row printed
    +14,619 % by step 2,000 and +5e23 % by step 100,000), and past 10x the message says so instead of a number; a
    resumed run's rows left are counted from its first logged step (5,001), not from step 0."""
    def climbing(i: int, g: random.Random) -> Row:
        return grpo(i, g, reward=0.4, length=200 + 0.6 * i)

    rows = build(climbing)
    assert "on course for +5" in found(rows, "grpo", "length-trend-up", max_steps=2000)[0].message
    assert "more than 10x the baseline by step 100000" in found(rows, "grpo", "length-trend-up",
                                                                 max_steps=100_000)[0].message
    resumed = [dict(r, step=r["step"] + 5000) for r in build(lambda i, g: grpo(i, g, reward=0.4,
                                                                                length=200 * (1 - 0.002 * i)))]
    down = found(resumed, "grpo", "length-trend-down", max_steps=10_000)
    assert down and "on course for -100% by step 10000" in down[0].message, down


def test_lengths_at_zero_for_thousands_of_rows_do_not_break_the_projection():
    """Empty completions from step 50 on: the smoothed length decays to exactly 0.0 after ~3,300 rows, a -100 %
    change whose log does not exist (the log-space projection raised a math domain error there)."""
    rows = [{"step": float(i), "reward": 0.5, "completions/mean_length": 200.0 if i < 50 else 0.0}
            for i in range(1, 4000)]
    cluster = analyze_rows(rows, trainer="grpo", max_steps=4000)
    assert found(rows, "grpo", "length-collapse", max_steps=4000)
    assert -1.0 <= cluster.gauges["length"].derived["length_projected"] < -0.99


def test_clip_high_needs_the_level_past_the_line_not_one_noisy_row():
    """A healthy PPO run at 12 % clipped whose noisy rows pass 30 % one at a time (every 40th row) is not warned;
    the same run whose clip fraction moves to 35 % and stays is warned within 3 rows."""
    def spiky(i: int, g: random.Random) -> Row:
        return ppo(i, g, clip=0.36 if i % 40 == 0 else 0.12)

    for seed in range(3):
        assert not found(build(spiky, seed=seed), "ppo", "clip-high"), seed
        moved = found(build(lambda i, g: ppo(i, g, clip=0.35 if i >= 200 else 0.12), seed=seed), "ppo", "clip-high")
        assert moved and 200 <= moved[0].step <= 203, (seed, moved)


def test_kl_growing_fires_before_the_level_line():
    rows = build(lambda i, g: grpo(i, g, kl=0.03 * math.exp(max(0, i - ONSET) / 25) + g.gauss(0, 0.003)))
    grow = found(rows, "grpo", "kl-growing")[0]
    warn = found(rows, "grpo", "kl-warn")[0]
    assert grow.value < 0.5 and grow.step < warn.step


def test_kl_growing_near_the_end_of_a_run_only_warns_if_it_passes_the_line_in_the_run():
    """The same accelerating KL, in a run planned to end at step 215: it would pass the warn line at step ~223, after
    the last step, so "on course to pass the line within 20 logged steps" is not true and is not said; in a run
    planned for 300 steps it is warned while KL is still under half the line."""
    rows = build(lambda i, g: grpo(i, g, kl=0.03 * math.exp(max(0, i - ONSET) / 25) + g.gauss(0, 0.003)))
    assert found(rows, "grpo", "kl-warn")[0].step > 215
    assert not found(rows[:215], "grpo", "kl-growing", max_steps=215)
    longer = found(rows[:215], "grpo", "kl-growing", max_steps=N)
    assert longer and longer[0].value < 0.25
    # a log that runs on past its planned end (stages joined, a replayed resume, a wrong max_steps) has no end to read
    # from: one window, as with no plan, warned before the line (not "within about 0 logged steps" after it)
    past = found(rows, "grpo", "kl-growing", max_steps=150)
    assert past and past[0].step < found(rows, "grpo", "kl-warn")[0].step and past[0].value < 0.5, past


def test_one_giant_kl_estimate_does_not_set_the_noise_reference():
    """A per-token k3 estimate 1000x the rest on one early row: the level the noise is read against is a median,
    so the rows after it do not look quiet, and the ordinary noise later is not "3x its earlier level"."""
    def row(i: int, g: random.Random) -> Row:
        return grpo(i, g, kl=20.0 if i == 26 else 0.02 * math.exp(g.gauss(0, 0.4)))

    for seed in range(3):
        assert not found(build(row, seed=seed), "grpo", "kl-noisy")
    noisy = build(lambda i, g: grpo(i, g, kl=20.0 if i == 26 else 0.02 * math.exp(g.gauss(0, 0.4 + 1.2 * ramp(i)))))
    assert [f.step for f in found(noisy, "grpo", "kl-noisy")][:1] > [ONSET]


def test_kl_noisy_from_negative_estimates():
    """PPO's k1 estimate turning negative on a fifth of the rows, around an unchanged level."""
    rows = build(lambda i, g: dict(ppo(i, g, kl=1.0, kl_noise=0.2),
                                   **({"objective/kl": -0.5} if i > ONSET and i % 4 == 0 else {})))
    hits = found(rows, "ppo", "kl-noisy")
    assert hits and hits[0].step > ONSET and "negative" in hits[0].message


def test_single_kl_spike_is_info_and_repeated_spikes_warn():
    one = build(lambda i, g: grpo(i, g, kl=0.05 + g.gauss(0, 0.003) + (0.8 if i == 160 else 0)))
    assert [(f.rule, f.severity) for f in analyze_rows(one, trainer="grpo").findings if f.gauge == "kl"] == [
        ("kl-spike", "info")]
    many = build(lambda i, g: grpo(i, g, kl=0.05 + g.gauss(0, 0.003) + (0.8 if i in (160, 170, 180) else 0)))
    hits = found(many, "grpo", "kl-spike-repeated")
    assert hits and hits[0].step == 180 and hits[0].severity == "warn"


def test_spikes_at_the_runs_own_rate_are_not_repeated_spikes():
    """A heavy-tailed KL estimate spikes now and then all run long; over 1,500 rows three land within 25 rows by
    chance. Against the run's own spike rate that is no surprise: no warning. The same three spikes after a quiet
    run are."""
    n = 1500
    steady = {40 * k + 7 for k in range(1, 37)} | {1402, 1412}  # one every 40 rows; 1402, 1407, 1412 close together
    noisy = build(lambda i, g: grpo(i, g, kl=0.05 + g.gauss(0, 0.003) + (0.8 if i in steady else 0)), n=n)
    assert not found(noisy, "grpo", "kl-spike-repeated")
    was = found(noisy, "grpo", "kl-spike-repeated", params={"kl": {"spike_repeat_p": 1.01}})  # the count alone
    assert [f.step for f in was] == [1412]
    quiet = build(lambda i, g: grpo(i, g, kl=0.05 + g.gauss(0, 0.003) + (0.8 if i in (1402, 1407, 1412) else 0)),
                  n=n)
    assert [f.step for f in found(quiet, "grpo", "kl-spike-repeated")] == [1412]


@pytest.mark.slow
def test_kl_growing_slowly_in_a_long_run_is_projected_to_the_end_of_the_run():
    """A climb too slow to reach the warn line within one window reaches it before the planned end: a warning
    while KL is still half the line. A run with no planned length, a wander, and a KL that rises early and levels
    off below the line (a straight line from its early slope would cross it) are not warned."""
    n, start = 2000, 600

    def climbing(i: int, g: random.Random) -> Row:
        return grpo(i, g, kl=0.05 + 0.6 * max(0, i - start) / (n - start) + g.gauss(0, 0.005))

    rows = build(climbing, n=n)
    f = found(rows, "grpo", "kl-growing", max_steps=n)[0]
    assert start < f.step < 1300 and f.value < 0.25 and "still climbing" in f.message
    assert not [x for x in found(rows, "grpo", "kl-growing") if x.step < 1300]  # no planned length: one window
    # a wander of the noise: a 40-row climb within a flat run, projected 1,000 rows on, is not a runaway
    bump = build(lambda i, g: grpo(i, g, kl=0.15 + 0.05 * math.sin(i / 15) + g.gauss(0, 0.003)), n=n)
    assert not found(bump, "grpo", "kl-growing", max_steps=n)
    for m, seed in ((500, 0), (1000, 1), (2000, 2)):  # healthy GRPO KL: up fast, then holding at 0.35
        level = build(lambda i, g: grpo(i, g, kl=0.35 * (1 - math.exp(-5 * i / m)) + g.gauss(0, 0.01)),  # noqa: B023
                      n=m, seed=seed)
        assert not found(level, "grpo", "kl-growing", max_steps=m)


def test_zero_std_groups_while_the_reward_still_rises_are_solved_prompts():
    """Half the groups without reward spread while a noisy reward still rises (the entropy gauge's test of
    progress, t >= 1 over the run, not a clear t >= 3 climb): prompts being solved, ``info``; the same with the
    reward flat is the warning when the level says most uniform groups failed (issue #28: at a success rate p at
    least f - p of the groups failed every completion, half the uniform ones once p <= f / 2; at p = 0.5 a 60 %
    uniform share can be solved and failed prompts alike, which the level alone cannot call a vanishing signal)."""
    rising = build(lambda i, g: grpo(i, g, zero_std=0.2 + 0.4 * ramp(i), reward=0.3 + 0.03 * i / N))
    assert not found(rising, "grpo", "zero-std-high")
    assert found(rising, "grpo", "zero-std-solved")
    flat = build(lambda i, g: grpo(i, g, zero_std=0.2 + 0.4 * ramp(i), reward=0.25))
    assert found(flat, "grpo", "zero-std-high")


def test_clip_growing_caught_before_thirty_percent():
    for seed in range(5):
        rows = build(lambda i, g: ppo(i, g, clip=0.06 + 0.3 * ramp(i, span=150)), seed=seed)
        f = found(rows, "ppo", "clip-growing")[0]
        assert f.value < 0.3 and not [x for x in found(rows, "ppo", "clip-high") if x.step < f.step]


def test_clip_low_is_info_on_off_policy_runs_only():
    timid = build(lambda i, g: dict(grpo(i, g), **{"clip_ratio/region_mean": 0.003}))
    assert [f.severity for f in found(timid, "grpo", "clip-low")] == ["info"]
    on_policy = build(lambda i, g: dict(grpo(i, g), **{"clip_ratio/region_mean": 0.0}))
    assert not found(on_policy, "grpo", "clip-low")


def test_gold_message_names_the_function_the_gap_and_since_when():
    rows = build(CASES[[c[0] for c in CASES].index("proxy-gold-divergence")][4])
    f = found(rows, "grpo", "proxy-gold-divergence", params={"reward": {"gold": ["gold"]}})[0]
    assert "'gold'" in f.message and "gap" in f.message and "since step" in f.message
    cluster = analyze_rows(rows, trainer="grpo", params={"reward": {"gold": ["gold"]}})
    assert "rlcluster" not in cluster.gauges["reward"].note and cluster.derived()["reward/proxy_gold_gap"] > 3


def test_gold_name_missing_from_the_log_is_a_note():
    s = analyze_rows(build(grpo), trainer="grpo", params={"reward": {"gold": ["verifer"]}}).summary()
    assert "rewards/verifer/mean" in s["gauges"]["reward"]["note"]


def test_length_shorter_with_rising_reward_is_concise_not_a_warning():
    # "improving" for the length rules means now: a clear rise over the last 45 logged rows
    rows = build(lambda i, g: grpo(i, g, reward=0.2 + 0.7 * i / N, length=200 * (1 - 0.4 * ramp(i, span=40))))
    concise = found(rows, "grpo", "length-shorter-concise")
    assert concise and {f.severity for f in concise} == {"info"}
    assert not [a for a in alarms(rows, "grpo") if a[0] == "length" and a[1] != "length-collapse"]


def test_length_spread_narrowing_with_rising_reward_is_info_unless_deep():
    rows = build(lambda i, g: grpo(i, g, reward=0.2 + 0.7 * i / N, spread=1.2 * (1 - 0.8 * ramp(i, span=40)),
                                   spread_noise=0.01))  # to 0.2x its start while the reward climbs
    narrowing = found(rows, "grpo", "length-spread-narrowing")
    assert narrowing and {f.severity for f in narrowing} == {"info"}
    assert not found(rows, "grpo", "length-variance-collapse")
    # to 0.08x while the reward only creeps (not clearly rising now, issue #28: depth alone no longer decides)
    deep = build(lambda i, g: grpo(i, g, spread=1.2 * (1 - 0.92 * ramp(i, span=40))))
    assert found(deep, "grpo", "length-variance-collapse")


def test_user_baseline_is_the_sft_models_length():
    """The post: measure the SFT model's length distribution first; >30 % from it deserves a look."""
    rows = build(grpo)  # 200 tokens from the first step
    sft = {"length": {"baseline_mean": 140.0, "baseline_std": 30.0, "batch_completions": 16}}
    grew = found(rows, "grpo", "length-grew", params=sft)
    assert grew and grew[0].step <= 20 and "140 ->" in grew[0].message
    assert not found(rows, "grpo", "length-grew", params={"length": {"baseline_mean": 200.0}})
    # 16 normal draws span ~3.5 sigma: the SFT batches' (max - min) / mean was ~3.5 * 30 / 140 = 0.76, this run's
    # is 1.2: the variance is ~2.5x the SFT model's
    cluster = analyze_rows(rows, trainer="grpo", params=sft)
    assert 2.0 < cluster.derived()["length/variance_vs_baseline"] < 3.0
    assert [f.rule for f in cluster.findings if f.rule == "length-variance-change"]


def test_entropy_halving_while_reward_rises_is_sharpening_not_a_warning():
    """The realistic healthy GRPO run of issue #10: entropy halves (1.4 -> 0.6) while the reward climbs."""
    for seed in range(5):
        rows = build(lambda i, g: grpo(i, g, reward=0.2 + 0.5 * i / N, entropy=1.4 * (1 - 0.57 * i / N),
                                       zero_std=0.1 + 0.2 * i / N), seed=seed)
        assert not alarms(rows, "grpo"), alarms(rows, "grpo")
        assert [f.severity for f in found(rows, "grpo", "entropy-sharpening")] == ["info"]


def test_entropy_below_a_fifth_while_most_completions_fail_warns_even_while_reward_creeps_up():
    """Issue #37: entropy at 0.1x its start while the score creeps from 0.2 to 0.35 is a template that fails (most
    completions still do), not sharpening on answers that work."""
    rows = build(lambda i, g: grpo(i, g, reward=0.2 + 0.15 * i / N, entropy=1.2 * (1 - 0.9 * ramp(i, span=60))))
    f = found(rows, "grpo", "entropy-collapse")
    assert f and f[0].step > ONSET and "0.2x" in f[0].message and "still fail" in f[0].message
    assert not found(rows, "grpo", "entropy-collapse-persistent")  # no stop while the reward still rises


@pytest.mark.xfail(strict=True, reason=(
    "this round's fast-fall rule (issue #47: entropy from 0.7x to under 0.2x its start within a third of the run left, "
    "the score climbing under 0.2 meanwhile, is collapse) reads this synthetic fall (0.9 of the entropy gone in 60 of "
    "300 rows, the score +0.1 over those rows) as collapse; the real verl runs this test stood for stay quiet "
    "(make bench-real: verl healthy 0 of 11 warned). Telling a steady learner's fast sharpening from a creeping "
    "reward's collapse needs the score's gain over the run, which a noisy start makes a coin toss at this margin"))
def test_entropy_below_a_fifth_while_the_score_climbs_past_half_is_sharpening():
    """Issue #37 (the verl Qwen2.5-0.5B GSM8K runs: entropy 0.12x its start, score 0.01 -> 0.7): sharpening, info."""
    rows = build(lambda i, g: grpo(i, g, reward=0.3 + 0.5 * i / N, entropy=1.2 * (1 - 0.9 * ramp(i, span=60))))
    assert not found(rows, "grpo", "entropy-collapse")
    assert [f.severity for f in found(rows, "grpo", "entropy-sharpening")] == ["info"]


def test_there_is_no_absolute_entropy_floor():
    """An instruct model starting at 0.3 and a base model starting at 1.5 are judged against their own start."""
    for start in (0.3, 0.9, 1.5):
        rows = build(lambda i, g, s=start: grpo(i, g, entropy=s * (1 - 0.2 * i / N)))
        assert not alarms(rows, "grpo")


def test_lr_peak_never_reached_offline():
    rows = build(lambda i, g: grpo(i, g, lr=1e-6 * i / 1000))
    f = found(rows, "grpo", "lr-peak-not-reached")
    assert f and f[0].step == N and "warm-up" in f[0].message


def test_eval_oscillating():
    def sft(i: int, g: random.Random, osc: bool) -> Row:
        row = {"loss": 2.0 - i / N + g.gauss(0, 0.02), "grad_norm": 0.5, "learning_rate": 1e-5}
        if i % 10 == 0:
            k = i // 10
            ev = 2.0 - 0.9 * min(i, ONSET) / N + (0.15 * (k % 2) if osc and i > ONSET else 0) + g.gauss(0, 0.003)
            return {"eval_loss": ev, **row}
        return row

    sick = [dict(r, step=float(i)) for i, r in enumerate(build(lambda i, g: sft(i, g, True)), 1)]
    hits = found(sick, "sft", "eval-oscillating")
    assert hits and hits[0].step > ONSET and hits[0].severity == "warn"
    assert not found(build(lambda i, g: sft(i, g, False)), "sft", "eval-oscillating")


# --- diagnoses -------------------------------------------------------------------------------------------------

DIAGNOSES: list[tuple[str, str, Maker, Maker, dict[str, object]]] = [
    ("reward-hacking", "grpo",  # reward jumps and length climbs with it; no gold to say otherwise
     lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, span=10), length=200 * (1 + 1.5 * ramp(i, span=40))),
     lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, span=10)), {}),
    ("over-optimisation", "grpo",  # gold reward peaks and falls while the proxy keeps rising
     lambda i, g: dict(grpo(i, g, reward=0.3 + 0.5 * i / N),
                       **{"rewards/gold/mean": 0.2 + 0.3 * min(i, ONSET) / N - 0.3 * ramp(i) + g.gauss(0, 0.03)}),
     lambda i, g: dict(grpo(i, g, reward=0.3 + 0.5 * i / N), **{"rewards/gold/mean": 0.2 + 0.3 * i / N}),
     {"params": {"reward": {"gold": ["gold"]}}}),
    ("mode-collapse", "grpo",  # entropy down, zero-std groups up, reward flat
     lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.5 * ramp(i)), zero_std=0.1 + 0.7 * ramp(i)),
     lambda i, g: grpo(i, g, reward=0.4), {}),
    ("unstable-updates", "ppo",  # clip fraction growing and the ratio's variance up
     lambda i, g: ppo(i, g, clip=0.06 + 0.2 * ramp(i, span=150), ratio_var=0.001 + 0.02 * ramp(i, span=60)),
     lambda i, g: ppo(i, g), {}),
    ("dead-run", "grpo",  # every group alike from the onset: no gradient
     lambda i, g: dict(grpo(i, g), **({"frac_reward_zero_std": 1.0, "grad_norm": 0.0} if i > ONSET else {})),
     lambda i, g: grpo(i, g), {}),
]


@pytest.mark.parametrize(("name", "trainer", "sick", "healthy", "kw"), DIAGNOSES, ids=[d[0] for d in DIAGNOSES])
def test_diagnosis_fires_after_onset_and_not_on_healthy(name, trainer, sick, healthy, kw):
    for seed in (0, 1):
        hits = [f for f in found(build(sick, seed=seed), trainer, name, DIAGNOSIS_ID, **kw)]
        assert hits and hits[0].step >= ONSET, (name, seed)
        assert "What to do:" in hits[0].message and "since step" in hits[0].message
        assert not found(build(healthy, seed=seed), trainer, name, DIAGNOSIS_ID, **kw)


def test_over_optimisation_from_kl_climbing_while_reward_plateaus():
    rows = build(lambda i, g: grpo(i, g, reward=0.4, kl=0.03 * math.exp(max(0, i - ONSET) / 30) + g.gauss(0, 0.003)))
    assert found(rows, "grpo", "over-optimisation", DIAGNOSIS_ID)


def test_gold_that_rises_with_the_proxy_vetoes_reward_hacking():
    rows = build(lambda i, g: dict(grpo(i, g, reward=0.3 + 0.4 * ramp(i, span=10),
                                        length=200 * (1 + 1.5 * ramp(i, span=40))),
                                   **{"rewards/gold/mean": 0.2 + 0.3 * ramp(i, span=10) + g.gauss(0, 0.03)}))
    assert found(rows, "grpo", "reward-hacking", DIAGNOSIS_ID)  # without telling it about the gold
    assert not found(rows, "grpo", "reward-hacking", DIAGNOSIS_ID, params={"reward": {"gold": ["gold"]}})
    assert found(rows, "grpo", "gold-rising", "reward", params={"reward": {"gold": ["gold"]}})


def test_a_flat_gold_does_not_veto_reward_hacking():
    """The same jump with length climbing, but the logged gold stays flat. A gold that does not rise confirms
    nothing: the diagnosis fires after onset in every seed, no later than the proxy-gold divergence (which in 2 of
    the 6 seeds never fires: a flat gold that does not fall is not a divergence), and says the gold does not follow.
    Before round 9, naming a flat gold silenced the diagnosis until the divergence fired, and for good without it.
    (Noise can read a flat gold as rising for a while: in seed 3 its half-run trend reaches t = 2.1 at row 156,
    ``gold-rising`` holds the diagnosis back, and it fires at row 182.)"""
    not_following = 0
    for seed in range(6):
        rows = build(lambda i, g: dict(grpo(i, g, reward=0.3 + 0.4 * ramp(i, span=10),
                                            length=200 * (1 + 1.5 * ramp(i, span=40))),
                                       **{"rewards/gold/mean": 0.2 + g.gauss(0, 0.03)}), seed=seed)
        cluster = analyze_rows(rows, trainer="grpo", params={"reward": {"gold": ["gold"]}})
        hacking = [f for f in cluster.findings if f.gauge == DIAGNOSIS_ID and f.rule == "reward-hacking"]
        divergence = [f.step for f in cluster.findings if f.rule == "proxy-gold-divergence"]
        assert hacking and hacking[0].step >= ONSET and hacking[0].step <= min(divergence, default=N), seed
        not_following += "the gold reward does not rise with it" in hacking[0].message
    assert not_following >= 4, not_following


def test_diagnoses_are_the_same_row_by_row_and_in_batch():
    """The batch path runs one gauge over all rows before the next; the diagnoser must not notice."""
    from wandb_rlcluster.core import Normalizer

    for name, trainer, sick, _healthy, kw in DIAGNOSES:
        rows = build(sick)
        live = analyze_rows(rows, trainer=trainer, **kw)  # type: ignore[arg-type]
        batch = InstrumentCluster(trainer=trainer, **kw)  # type: ignore[arg-type]
        norm = Normalizer()
        batch.update_batch([r for r in (norm.normalize(x) for x in rows) if r is not None])
        batch.finalize()
        key = sorted((f.gauge, f.rule, f.step, f.message) for f in live.findings)
        assert sorted((f.gauge, f.rule, f.step, f.message) for f in batch.findings) == key, name


def test_state_with_components_gold_and_diagnoser_resumes_identically():
    rows = build(lambda i, g: dict(grpo(i, g, reward=0.3 + 0.4 * ramp(i, span=10),
                                        length=200 * (1 + 1.5 * ramp(i, span=40))),
                                   **{"rewards/fmt/mean": 0.5 + g.gauss(0, 0.05), "rewards/fmt/std": 0.3,
                                      "rewards/acc/mean": 0.3 + g.gauss(0, 0.05), "rewards/acc/std": 0.3,
                                      "rewards/gold/mean": 0.2 + g.gauss(0, 0.03)}))
    params = {"reward": {"gold": ["gold"]}}
    full = analyze_rows(rows, trainer="grpo", params=params)
    a = InstrumentCluster(trainer="grpo", params=params)
    for r in rows[:170]:
        a.update(r)
    b = InstrumentCluster(trainer="grpo", params=params)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for r in rows[170:]:
        b.update(r)
    b.finalize()
    assert [(f.gauge, f.rule, f.step) for f in b.findings] == [(f.gauge, f.rule, f.step) for f in full.findings]
    assert any(f.gauge == DIAGNOSIS_ID for f in full.findings)


# --- the run's planned length (round 3) --------------------------------------------------------------------------


def test_persistence_factor_shortens_only_short_runs():
    from wandb_rlcluster.core.gauge import PERSIST_FLOOR, SHORT_RUN_ROWS, persistence_factor

    assert persistence_factor(SHORT_RUN_ROWS * 0.6) == pytest.approx(0.6)
    assert persistence_factor(10) == PERSIST_FLOOR  # never below the floor
    assert persistence_factor(SHORT_RUN_ROWS) == persistence_factor(5000) == 1.0  # long runs keep every for_


def test_short_run_holds_a_trend_warning_for_fewer_rows_but_not_a_stop():
    """A 60-row run (max_steps known, as the callback passes it) warns about length growth sooner than the same rows
    with the run's length unknown; a stop rule (grad-zero on SFT) keeps its full hold either way."""
    rows = build(lambda i, g: grpo(i, g, length=200 * (1 + 0.6 * ramp(i, start=25, span=10))), n=60)
    short = found(rows, "grpo", "length-grew", max_steps=60)
    unknown = found(rows, "grpo", "length-grew")
    assert short and unknown and short[0].step < unknown[0].step
    assert not found(rows[:25], "grpo", "length-grew", max_steps=60)  # not before onset
    sft = [{"step": float(i), "loss": 1.0 - 0.001 * i, "grad_norm": 0.0 if i > 30 else 0.5} for i in range(1, 61)]
    assert [f.step for f in found(sft, "sft", "grad-zero", max_steps=60)] == \
        [f.step for f in found(sft, "sft", "grad-zero")] != []


def test_long_hold_factor_grows_only_past_300_rows():
    from wandb_rlcluster.core.gauge import LONG_RUN_ROWS, long_hold_factor

    assert long_hold_factor(50) == long_hold_factor(LONG_RUN_ROWS) == 1.0
    assert long_hold_factor(2 * LONG_RUN_ROWS) == pytest.approx(1.5)
    assert long_hold_factor(4 * LONG_RUN_ROWS) == pytest.approx(2.0)


def _hold_pattern(pattern: str, max_steps: int, for_: int = 5, long_hold: bool = True) -> int | None:
    """The row (1-based) at which a warn rule held ``for_`` rows first fires, fed ``pattern`` (1: true, 0: false)
    in a run planned for ``max_steps`` rows; the engine alone, on a one-rule gauge."""
    from wandb_rlcluster.core.build import core_build
    from wandb_rlcluster.core.gauge import Gauge
    from wandb_rlcluster.core.keys import Row as KeyRow

    if core_build() == "compiled":  # make test-compiled: a compiled class cannot be subclassed in Python
        pytest.skip("the compiled core's Gauge cannot be subclassed from Python; the pure core runs this test")

    class OneRule(Gauge):
        id, title, inputs, outputs = "one", "One rule", ("x",), ()

        def observe(self, row: KeyRow) -> None:
            self.check("x-high", row.values["x"] > 0, "warn", "x", row.values["x"], "x is high", for_=for_,
                       long_hold=long_hold)

    g = OneRule("grpo")
    g.max_steps = max_steps
    for i, c in enumerate(pattern, start=1):
        if g.update(KeyRow(step=i, kind="train", values={"x": float(c)}, index=i)):
            return i
    return None


def test_a_long_run_holds_a_warning_longer_and_counts_k_of_n():
    """Planned for 1,200 rows, a warn rule held 5 rows needs 10 (x2); a quiet row takes one row off the count
    instead of resetting it, so a condition true 3 rows in 4 still fires (a pathology that flickers), while one
    true every other row never does. A 300-row run keeps 5 rows in a row; stop rules, rules held under 5 rows and
    rules that opt out (``long_hold=False``: their window is a share of the run already) keep their hold."""
    assert _hold_pattern("1" * 20, 300) == 5
    assert _hold_pattern("1111011110" + "1" * 10, 300) == 15  # a quiet row resets a short run's count
    assert _hold_pattern("1" * 20, 1200) == 10
    assert _hold_pattern("1110" * 10, 1200) == 18  # 3 in 4: +3 -1 per 4 rows, 10 reached on row 18
    assert _hold_pattern("10" * 20, 1200) is None
    assert _hold_pattern("1" * 20, 1200, for_=3) == 3
    assert _hold_pattern("1" * 20, 1200, long_hold=False) == 5


def test_not_learning_yet_waits_for_a_long_runs_warm_up():
    """A flat reward over the first 150 rows is a plateau in a 150-step run, but only the warm-up of a 2000-step
    one: reward-plateau waits for 8 % of the planned run (160 rows) there, and then until the slope's upper bound
    rules out a gain of 2 noise sigmas over the 2000 planned rows (issue #28: 250-990 rows of a flat reward here)."""
    rows = build(lambda i, g: grpo(i, g, reward=0.3), n=150)
    assert found(rows, "grpo", "reward-plateau", max_steps=150)
    assert found(rows, "grpo", "reward-plateau")  # length unknown: the fixed 50 rows
    assert not found(rows, "grpo", "reward-plateau", max_steps=2000)
    for seed in range(6):  # a flat reward is a plateau within the first half of the 2000 planned rows
        late = found(build(lambda i, g: grpo(i, g, reward=0.3), n=1000, seed=seed), "grpo", "reward-plateau",
                     max_steps=2000)
        assert late and late[0].step > 160, seed


# --- round 4: the run's planned length sets windows; falls from the peak; a collapse read in log space --------------


def _first(rows: list[Row], trainer: str, rule: str, **kw: object) -> int | None:
    hits = found(rows, trainer, rule, **kw)
    return hits[0].step if hits else None


SHORT_RUNS = [
    # (rule, trainer, rows, onset): each pathology starts in the second half of a run of 50-60 logged rows
    ("kl-noisy", "ppo", lambda i, g: ppo(i, g, kl_noise=0.5 + 3.5 * ramp(i, start=25, span=3)), 50, 25),
    # the reward rose for 30 rows, then stalled; length falls 45 %: over 45 rows, the reward still looks "rising"
    ("length-shrank", "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.4 * min(i, 30) / 30,
                                              length=200 * (1 - 0.45 * ramp(i, start=35, span=15))), 60, 35),
    ("reward-volatile", "dpo", lambda i, g: dict(dpo(i, g), **{
        "rewards/margins": 0.1 + 1.1 * i / 60 + g.gauss(0, 0.07 + 0.4 * ramp(i, start=30, span=3))}), 60, 30),
]


@pytest.mark.parametrize("rule, trainer, make, n, onset", SHORT_RUNS, ids=[c[0] for c in SHORT_RUNS])
def test_a_short_run_shortens_the_windows_and_warm_ups_that_would_eat_it(rule, trainer, make, n, onset):
    """With max_steps known (the callback passes it), a 50-60-row run gets windows and warm-ups shortened by the
    persistence factor: each pathology is caught after its onset, at least 5 rows sooner than with the length unknown
    (fixed 20-45-row windows), or only then. The hold alone (round 3) saves at most 3 rows here."""
    for seed in range(3):
        rows = build(make, n=n, seed=seed)
        known, unknown = _first(rows, trainer, rule, max_steps=n), _first(rows, trainer, rule)
        assert known is not None and known >= onset, (seed, known)
        assert unknown is None or known + 5 <= unknown, (seed, known, unknown)


def test_a_short_run_reads_loss_oscillation_with_a_shorter_warm_up():
    """A 45-row SFT run whose loss starts swinging +-35 % (a 6-row period) at row 20: the oscillation rule's
    reference needs 16 earlier swings (row 45) in a run of unknown length, so it is silent while the run goes; with
    max_steps known it needs fewer (round 5) and fires after the onset. The same run without the swing stays quiet."""
    def loss(i: int, g: random.Random, swing: float) -> Row:
        osc = 1 + swing * math.sin(2 * math.pi * i / 6) if i > 20 else 1.0
        return {"loss": (2.0 - 0.5 * i / 60) * osc * math.exp(g.gauss(0, 0.03)), "grad_norm": 0.5,
                "learning_rate": 1e-5}

    for seed in range(3):
        sick = build(lambda i, g: loss(i, g, 0.35), n=45, seed=seed)
        known = _first(sick, "sft", "loss-oscillating", max_steps=45)
        assert known is not None and known > 20, (seed, known)
        # without it, nothing while the run goes: at most the end-of-log report of a test still building (info)
        late = found(sick, "sft", "loss-oscillating")
        assert not late or (late[0].step == 45 and late[0].severity == "info"
                            and late[0].message.startswith("building: ")), (seed, late)
        assert _first(build(lambda i, g: loss(i, g, 0.0), n=45, seed=seed), "sft", "loss-oscillating",
                      max_steps=45) is None


@pytest.mark.slow
def test_a_long_runs_trend_windows_cover_a_share_of_it():
    """Slow climbs over a long run, logged every step: the clip fraction creeping from 6 % and a DPO chosen reward
    running away are trends over 5 % of the planned run, not over a fixed 20-30 rows that per-step noise hides."""
    for seed in range(3):
        clip = build(lambda i, g: ppo(i, g, clip=0.06 + 0.3 * ramp(i, start=800, span=1200)), n=2000, seed=seed)
        known, unknown = _first(clip, "ppo", "clip-growing", max_steps=2000), _first(clip, "ppo", "clip-growing")
        assert known is not None and known >= 800 and (unknown is None or known + 50 <= unknown), (known, unknown)
        off = _first(clip, "ppo", "clip-growing", max_steps=2000, params={"policy_ratio": {"grow_share": 0.0}})
        assert off is None or known + 50 <= off, (known, off)
        noise = random.Random(seed)
        chosen = [dict(r, **{"rewards/chosen": r["rewards/chosen"] + noise.gauss(0, 0.8)}) for r in build(
            lambda i, g: dpo(i, g, chosen=3.5 * ramp(i, start=700, span=700) ** 1.5,
                             rejected=-1.2 * i / N + 2.0 * ramp(i, start=700, span=700) ** 1.5), n=1400, seed=seed)]
        known = _first(chosen, "dpo", "chosen-reward-runaway", max_steps=1400)
        assert known is not None and known >= 700
        assert _first(chosen, "dpo", "chosen-reward-runaway", max_steps=1400,
                      params={"reward": {"runaway_share": 0.0, "runaway_half_t": 0.0}}) is None


def test_a_slow_runaway_under_per_step_noise_is_read_over_the_runs_second_half():
    """A chosen reward climbing +2.5 over 800 per-step rows (the rejected side rising slower), with per-step noise
    1.0: every 5 % window (54 rows) sees a rise far inside its noise (t < 3), the run's second half sees it plainly.
    Without the half-run reading it is silent; a healthy run with the same noise (chosen drifting down) is silent
    with it."""
    def chosen_noise(rows: list[Row], seed: int) -> list[Row]:
        noise = random.Random(seed + 100)
        return [dict(r, **{"rewards/chosen": r["rewards/chosen"] + noise.gauss(0, 1.0)}) for r in rows]

    for seed in range(3):
        sick = chosen_noise(build(lambda i, g: dpo(i, g, chosen=2.5 * ramp(i, start=280, span=800),
                                                   rejected=-0.2 + 1.0 * ramp(i, start=280, span=800)),
                                  n=1080, seed=seed), seed)
        hit = _first(sick, "dpo", "chosen-reward-runaway", max_steps=1080)
        assert hit is not None and hit >= 280, (seed, hit)
        assert _first(sick, "dpo", "chosen-reward-runaway", max_steps=1080,
                      params={"reward": {"runaway_half_t": 0.0}}) is None
        healthy = chosen_noise(build(dpo, n=1080, seed=seed), seed)
        assert _first(healthy, "dpo", "chosen-reward-runaway", max_steps=1080) is None


def test_a_margin_falling_from_a_late_peak_is_read_since_that_peak():
    """The margin climbs for 200 rows, then gives back 40 % of it over the last 100 (per-row noise 0.2): the
    run's second half still holds the climb, so its fit stays flat; a fit since the peak shows the fall. It is
    caught after the peak, and later or never with that fit off; the same climb without the fall is silent."""
    def margin(fall: float) -> Callable[[int, random.Random], Row]:
        return lambda i, g: dict(dpo(i, g, acc=0.8), **{
            "rewards/margins": 1.2 * min(i, 200) / 200 - fall * ramp(i, start=200, span=100) + g.gauss(0, 0.2)})

    for seed in range(3):
        sick = build(margin(0.5), seed=seed)
        hit = _first(sick, "dpo", "margin-shrinking", max_steps=N)
        assert hit is not None and hit > 200, (seed, hit)
        off = _first(sick, "dpo", "margin-shrinking", max_steps=N, params={"reward": {"margin_peak_rows": 0}})
        assert off is None or off > hit, (seed, hit, off)
        assert _first(build(margin(0.0), seed=seed), "dpo", "margin-shrinking", max_steps=N) is None


def test_reward_falling_from_its_peak_while_still_learning_is_a_shift_down():
    """A reward that climbed fast and then lost 45 % of its gain in 4 rows: the CUSUM's noise scale holds the
    learning, so it stays under its line; the fall from the peak names the peak, its step and the share lost. The
    same climb without the fall raises nothing."""
    def climb(fall: float) -> list[Row]:
        return build(lambda i, g: grpo(i, g, reward=0.2 + 1.6 * min(i, 120) / 120
                                       - fall * ramp(i, start=120, span=4) + g.gauss(0, 0.25)), n=200)

    hits = found(climb(0.9), "grpo", "reward-shift-down", max_steps=200)
    assert hits and hits[0].step > 120 and "fell from its peak" in hits[0].message and "step 120" in hits[0].message
    assert not found(climb(0.9), "grpo", "reward-shift-down", max_steps=200, params={"reward": {"drop_share": 0.0}})
    assert not found(climb(0.0), "grpo", "reward-shift-down", max_steps=200)


def test_length_spread_collapse_is_read_in_log_space():
    """The within-batch spread falling 10x in 3 rows (a template takes over) with a flat reward: the geometric
    mean reaches the collapse line within 8 rows; the arithmetic EWMA alone needs 11."""
    rows = build(lambda i, g: grpo(i, g, spread=1.2 * (1 - 0.9 * ramp(i, start=150, span=3)), reward=0.5), n=200)
    step = _first(rows, "grpo", "length-variance-collapse")
    assert step is not None and 150 < step <= 158
    assert _first(build(lambda i, g: grpo(i, g, reward=0.5), n=200), "grpo", "length-variance-collapse") is None


@pytest.mark.parametrize("trainer, make, n", [
    ("dpo", SHORT_RUNS[2][2], 60),
    ("ppo", lambda i, g: ppo(i, g, clip=0.06 + 0.3 * ramp(i, start=800, span=1200)), 2000),
], ids=["short", "long"])
def test_windows_set_from_the_planned_length_survive_a_resume(trainer, make, n):
    """The planned length is read once, on the first row; a checkpoint keeps the windows it set, so a resumed run
    (which never sees its first row again) judges the rest exactly as an unbroken one."""
    rows = build(make, n=n)
    full = analyze_rows(rows, trainer=trainer, max_steps=n)
    a = InstrumentCluster(trainer=trainer)
    a.set_max_steps(n)
    for r in rows[: n // 2]:
        a.update(r)
    b = InstrumentCluster(trainer=trainer)
    b.set_max_steps(n)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for r in rows[n // 2:]:
        b.update(r)
    b.finalize()
    got = [(f.gauge, f.rule, f.step) for f in b.findings]  # the checkpoint carries the findings so far
    assert got == [(f.gauge, f.rule, f.step) for f in full.findings] and got


def test_length_variance_growth_is_read_on_log_max_over_min_when_the_longest_hit_the_cap():
    """Lengths' log-spread grows 1.7x while the longest answers sit at max_completion_length (400): (max - min) / mean
    moves only ~1.1x, under the post's 50 % variance line, but log(max / min) shows the variance doubling."""
    def row(i: int, g: random.Random, grow: bool) -> Row:
        sigma = 0.5 * (1 + (0.7 * ramp(i, start=150, span=20) if grow else 0.0)) * (1 + g.gauss(0, 0.03))
        r = grpo(i, g, reward=0.5)
        L = r["completions/mean_length"]
        r["completions/min_length"] = L * math.exp(-2 * sigma)
        r["completions/max_length"] = min(400.0, L * math.exp(2 * sigma))
        return r

    hits = found(build(lambda i, g: row(i, g, True)), "grpo", "length-variance-change")
    assert hits and hits[0].step > 150
    linear = float(hits[0].message.split("the length variance is ")[1].split("x")[0])
    assert linear < 1.5 and "on log(max / min)" in hits[0].message, hits[0].message
    assert not found(build(lambda i, g: row(i, g, False)), "grpo", "length-variance-change")


@pytest.mark.parametrize("steps, max_steps, short", [
    ([10 * k for k in range(1, 52)], 510, True),  # the usual: every 10th step
    ([1] + [10 * k for k in range(1, 51)], 500, True),  # logging_first_step: step 1, then every 10th
    ([0] + [10 * k for k in range(1, 51)], 500, True),  # a first row at step 0
    ([5001 + 10 * k for k in range(60)], 10_000, False),  # attached mid-way through a resumed run
    ([1] + [10 * k for k in range(1, 201)], 2000, False),  # logging_first_step on a long run
], ids=["regular", "logging_first_step", "step_0", "resumed", "long_first_step"])
def test_the_planned_length_is_read_from_the_logging_interval(steps, max_steps, short):
    """Windows are sized from the planned rows: the rows seen plus the steps left over the interval seen so far.
    A first row that misreads the interval (step 1 before every 10th, step 0, step 5001 of a resumed run) is
    corrected on the second row, so a 51-row run gets short windows and neither a 500-row remainder of a
    resumed run nor a 200-row run does (nor a clip trend over half of it)."""
    c = InstrumentCluster(trainer="ppo")
    c.set_max_steps(max_steps)
    g = random.Random(0)
    for s in steps:
        c.update({"step": float(s), **ppo(s, g)})
    kl, ratio = c.gauges["kl"], c.gauges["policy_ratio"]
    rows = len(steps) + (max_steps - steps[-1]) // 10
    assert kl.planned_rows == pytest.approx(rows, rel=0.1)
    assert (kl.cusum.win.size < 20) is short
    assert ratio.clip_trend.size == max(20, round(0.05 * rows))


def _two_component_run(acc: Callable[[int], float], gold_drift: Callable[[int], float],
                       fmt: Callable[[int], float] = lambda i: 0.0, seed: int = 0) -> list[Row]:
    """GRPO with a correctness and a format reward; the gold scores what the correctness reward scores (it
    shares its batch noise) plus ``gold_drift``: the part of the gold the trained reward does not see."""

    def make(i: int, g: random.Random) -> Row:
        batch = g.gauss(0, 0.04)  # an easy or a hard batch moves the correctness reward and the gold together
        a = acc(i) + batch
        f = 0.4 + 0.5 * min(1.0, i / 120) + fmt(i) + g.gauss(0, 0.02)  # the format reward carries the total's rise
        row = grpo(i, g, reward=a + f)
        row["reward"] = a + f
        return {**row, "rewards/acc/mean": a, "rewards/acc/std": 0.4, "rewards/fmt/mean": f, "rewards/fmt/std": 0.3,
                "rewards/gold/mean": 0.8 * a + gold_drift(i) + g.gauss(0, 0.01)}

    return build(make, seed=seed)


@pytest.mark.parametrize("seed", range(3))
def test_a_format_reward_learned_first_while_the_gold_stalls_with_correctness_is_quiet(seed):
    """The format reward is learned first (the total rises 0.5) while correctness, and the gold that scores the same
    thing, stay flat: read against the total that is "proxy up, gold stalled"; read against the component the
    gold shares its batch noise with, nothing diverged. The gate is what keeps it quiet."""
    rows = _two_component_run(lambda i: 0.3, lambda i: 0.0, seed=seed)
    gold = {"reward": {"gold": ["gold"]}}
    assert found(rows, "grpo", "proxy-gold-divergence", params={"reward": {"gold": ["gold"], "gold_explained_se": 0}})
    assert not found(rows, "grpo", "proxy-gold-divergence", params=gold)


def _flat_format(i: int) -> float:
    return -0.5 * min(1.0, i / 120)  # cancels the format reward's early rise: the total moves with correctness only


def test_gold_falling_while_its_component_rises_is_over_optimisation():
    rows = _two_component_run(lambda i: 0.3 + 0.15 * ramp(i), lambda i: -0.2 * ramp(i), fmt=_flat_format)
    hits = found(rows, "grpo", "proxy-gold-divergence", params={"reward": {"gold": ["gold"]}})
    assert hits and hits[0].step >= ONSET


@pytest.mark.parametrize("seed", range(3))
def test_correctness_traded_for_a_gamed_format_reward_is_over_optimisation(seed):
    """The policy games the format reward after the onset and gives up correctness for it: the total keeps rising,
    the correctness reward and the gold, which scores the same thing, fall together. The gold moving *with* a
    trained component must not excuse it (a first gate did; a review found this stream silent, and the gate
    was narrowed to stalls)."""
    rows = _two_component_run(lambda i: 0.3 + 0.1 * min(i, ONSET) / ONSET - 0.12 * ramp(i), lambda i: 0.0,
                              fmt=lambda i: -0.3 * min(1.0, i / 120) + 0.4 * ramp(i))
    hits = found(rows, "grpo", "proxy-gold-divergence", params={"reward": {"gold": ["gold"]}})
    assert hits and hits[0].step >= ONSET


def test_a_reward_function_logged_as_nan_on_some_rows_does_not_break_the_gold_reading():
    """TRL logs NaN for a reward function that returned None for the whole batch; the gold's matched component
    missing on a row must not raise (it used to: a KeyError that lost the row for every later gauge)."""
    rows = _two_component_run(lambda i: 0.3 + 0.15 * ramp(i), lambda i: -0.2 * ramp(i), fmt=_flat_format)
    rows = [dict(r, **{"rewards/acc/mean": math.nan}) if i % 7 == 3 else
            {k: v for k, v in r.items() if k != "rewards/acc/mean"} if i % 11 == 5 else r for i, r in enumerate(rows)]
    cluster = analyze_rows(rows, trainer="grpo", params={"reward": {"gold": ["gold"]}})
    assert cluster.gauges["reward"].coupling.match in ("rewards/acc/mean", "reward")
    assert any(f.rule == "proxy-gold-divergence" and f.step >= ONSET for f in cluster.findings)


def _sft_loss(i: int, g: random.Random, swing: float, onset: int = 25, period: float = 9.0) -> Row:
    """An SFT loss falling to its floor with a drop at the second epoch (row 45) and heavy-tailed batch noise; from
    ``onset`` it stops converging and swings by ``swing`` with ``period`` rows."""
    lat = (2.0 * math.exp(-min(i, onset if swing else i) / 30) + 0.8) * (0.85 if i > 45 else 1.0)
    osc = 1 + swing * math.sin(2 * math.pi * (i - onset) / period) if i > onset else 1.0
    noise = g.gauss(0, 0.05) * (3.0 if g.random() < 0.05 else 1.0)
    return {"loss": lat * osc * math.exp(noise), "grad_norm": 0.5, "learning_rate": 1e-5}


def test_loss_oscillation_is_read_from_its_period_when_the_run_has_no_clean_reference():
    """A 90-row SFT run whose loss swings +-30 % with a 9-row period from row 25 on: by the time the swing's earlier
    reference (rows n/4 .. n/2) is read it holds the swing too, so the amplitude reading is silent (round 6's
    miss); the period reading finds one sinusoid that explains most of the detrended log loss and fires within
    30 rows of the onset. The healthy twin (a drop at the second epoch, 5 % of rows three times as noisy) stays
    quiet."""
    off = {"loss": {"osc_share": 1.01}}
    for seed in range(3):
        sick = build(lambda i, g: _sft_loss(i, g, 0.3), n=90, seed=seed)
        step = _first(sick, "sft", "loss-oscillating", max_steps=90)
        assert step is not None and 25 < step <= 55, (seed, step)
        assert "repeating every" in found(sick, "sft", "loss-oscillating", max_steps=90)[0].message
        assert _first(sick, "sft", "loss-oscillating", max_steps=90, params=off) is None
        healthy = build(lambda i, g: _sft_loss(i, g, 0.0), n=90, seed=seed)
        assert _first(healthy, "sft", "loss-oscillating", max_steps=90) is None
        assert not alarms(healthy, "sft", max_steps=90), seed


def _staircase(epochs: int, per_epoch: int, drop: float, seed: int, with_epoch: bool) -> list[Row]:
    """A small dataset trained for several epochs: the loss drops at each epoch boundary and drifts in between (a
    staircase; after the trend is removed, a sawtooth whose period is the epoch's)."""
    g = random.Random(seed)
    rows = []
    for i in range(epochs * per_epoch):
        ll = math.log(1.3) - drop * (i // per_epoch) - 0.03 * (i % per_epoch) / per_epoch + g.gauss(0, 0.03)
        row: Row = {"step": float((i + 1) * 10), "loss": math.exp(ll), "grad_norm": 1.0, "learning_rate": 5e-6}
        if with_epoch:
            row["epoch"] = (i + 1) / per_epoch
        rows.append(row)
    return rows


def test_a_multi_epoch_staircase_is_not_an_oscillation():
    """A hostile review's case: 10 epochs of 6 logged rows, the loss 33 % lower each epoch, is a sawtooth the period
    reading fitted at 65 %+ (8 seeds in 10 warned "repeating every 6 logged rows"). With TRL's epoch counter in the
    rows the epoch's own period is not read as a swing; without it, a swing that goes down in one step and drifts
    back is told from an oscillation by the skew of its row-to-row steps."""
    for seed in range(5):
        for with_epoch in (True, False):
            for epochs, per_epoch, drop in ((10, 6, 0.4), (4, 8, 0.45)):
                rows = _staircase(epochs, per_epoch, drop, seed, with_epoch)
                assert not found(rows, "sft", "loss-oscillating", max_steps=len(rows) * 10), (seed, with_epoch)


def test_eval_rows_between_train_rows_do_not_silence_the_period_reading():
    """The reading's cadence (every 3rd row) counts train rows: with an eval row after every 2nd train row, a
    cadence on all rows always landed on an eval row and the period was never read."""
    for seed in range(3):
        g = random.Random(seed)
        rows: list[Row] = []
        for i in range(90):
            swing = 0.25 * math.sin(2 * math.pi * i / 6) if i > 30 else 0.0
            rows.append({"step": float((i + 1) * 10), "loss": math.exp(math.log(1.2) - 0.4 * i / 90 + swing
                                                                        + g.gauss(0, 0.03)),
                         "grad_norm": 1.0, "learning_rate": 1e-5})
            if i % 2:
                rows.append({"step": float((i + 1) * 10), "eval_loss": 1.0 - 0.2 * i / 90})
        hits = found(rows, "sft", "loss-oscillating", max_steps=900, params={"loss": {"osc_ratio": 1e9}})
        assert hits and hits[0].step > 300 and "repeating every" in hits[0].message, seed


def test_a_loss_at_or_below_zero_gives_no_period_reading():
    """A loss that can reach 0 (a hinge DPO loss) has no log: the period reading restarts instead of raising."""
    rows = build(lambda i, g: {"loss": max(0.0, 0.3 * math.sin(2 * math.pi * i / 8) + g.gauss(0, 0.02)),
                               "grad_norm": 0.5, "learning_rate": 1e-5}, n=80)
    assert not [f for f in found(rows, "dpo", "loss-oscillating", max_steps=80) if "repeating" in f.message]


# -- issue #37: framework semantics, judged by meaning -----------------------------------------------------------


def test_a_gap_in_the_log_is_not_the_start_of_the_run():
    """A trimmed log (4 early rows, then a late contiguous block, as TinyZero's notes): the entropy's start is the rows
    before the gap, so a collapse to 0.005 while most completions fail is a warning on the first late row."""
    g = random.Random(0)
    early = [(2, 1.21, 0.025), (52, 1.33, 0.036), (92, 0.91, 0.089), (122, 0.79, 0.087)]
    rows = [{"step": float(s), "entropy": h, "reward": r, "completions/mean_length": 150.0} for s, h, r in early]
    rows += [{"step": float(s), "entropy": 0.005 * (1 + g.gauss(0, 0.2)), "reward": 0.18 + g.gauss(0, 0.05),
              "completions/mean_length": 35.0} for s in range(383, 400)]
    f = [x for x in found(rows, "ppo", "entropy-collapse") if x.severity == "warn"]
    assert f and f[0].step == 383 and "still fail" in f[0].message
    # the same late block with no early rows: nothing says where the run started, so nothing to compare against
    assert not found(rows[4:], "ppo", "entropy-collapse")


def test_length_that_fell_while_the_reward_climbed_and_now_holds_is_not_shrinking():
    """verl's GSM8K PPO: answers 235 -> 150 tokens while the score climbs 0 -> 0.65, then both hold: concise."""
    def make(i: int, g: random.Random) -> Row:
        climb = min(1.0, i / 80)
        return grpo(i, g, reward=0.05 + 0.6 * climb, length=235 - 85 * climb)
    rows = build(make)
    assert not found(rows, "grpo", "length-shrank")
    # a length falling now while the reward does not move is still the post's "short answers are safer"
    flat = build(lambda i, g: grpo(i, g, reward=0.4, length=200 * (1 - 0.4 * ramp(i, span=100))))
    assert found(flat, "grpo", "length-shrank")


def test_relative_spread_grown_only_by_a_falling_mean_under_the_cap_is_not_a_wider_shape():
    """The max pinned at the cap (256), the min steady: (max - min) / mean grows as answers shorten, the range in
    tokens does not."""
    def make(i: int, g: random.Random) -> Row:
        mean = 235 - 80 * min(1.0, i / 60)
        return {**grpo(i, g, reward=0.05 + 0.6 * min(1.0, i / 60)), "completions/mean_length": mean,
                "completions/min_length": 60.0 * (1 + g.gauss(0, 0.1)), "completions/max_length": 256.0}
    assert not found(build(make), "grpo", "length-variance-change")
    wider = build(lambda i, g: grpo(i, g, spread=1.2 + 0.8 * ramp(i, span=30)))
    assert found(wider, "grpo", "length-variance-change")


def test_the_critics_value_clip_in_its_warm_up_is_info_and_warns_if_it_lasts():
    """PPO's critic: 40 % of value predictions clipped in its first rows is a fresh value head (info); past the
    warm-up it is the post's value-function warning."""
    warm = build(lambda i, g: ppo(i, g, value_clip=0.4 if i <= 5 else 0.02))
    assert not found(warm, "ppo", "value-clip-high")
    assert [f.severity for f in found(warm, "ppo", "value-clip-warmup")] == ["info"]
    lasting = build(lambda i, g: ppo(i, g, value_clip=0.4))
    f = found(lasting, "ppo", "value-clip-high")
    assert f and f[0].step > 10


def test_a_score_held_at_its_ceiling_is_saturated_not_a_plateau():
    """dstack's resumed GSM8K run: the score at 0.91-0.98 from its first row: solved, not stalled."""
    rows = build(lambda i, g: grpo(i, g, reward=0.93))
    assert not found(rows, "grpo", "reward-plateau") and not found(rows, "grpo", "reward-flatline")
    assert [f.severity for f in found(rows, "grpo", "reward-saturated")] == ["info"]
    assert found(build(lambda i, g: grpo(i, g, reward=0.4)), "grpo", "reward-plateau")  # not near the ceiling


def test_eval_loss_held_at_the_end_of_the_schedule_is_converged_not_a_plateau():
    """A long SFT run whose eval loss stops improving as its learning rate decays to nothing has converged where it was
    planned to end (info); the same stall while the learning rate is still high is the patience warning."""
    def rows(decay: bool) -> list[Row]:
        out: list[Row] = []
        for i in range(1, N + 1):
            lr = 2e-5 * (0.5 * (1 + math.cos(math.pi * i / N)) if decay else 1.0)
            out.append({"step": float(i), "loss": 1.0 + math.exp(-i / 60), "learning_rate": lr})
            if i % 10 == 0:
                out.append({"step": float(i), "eval_loss": 1.1 + 0.8 * math.exp(-min(i, 230) / 40)})
        return out
    converged = analyze_rows(rows(True), trainer="sft").findings
    assert not [f for f in converged if f.rule == "eval-plateau"]
    assert [f.severity for f in converged if f.rule == "eval-converged"] == ["info"]
    assert [f for f in analyze_rows(rows(False), trainer="sft").findings if f.rule == "eval-plateau"]
