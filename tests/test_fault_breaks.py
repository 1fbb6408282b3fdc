"""The abrupt-break causes of the fault benchmark (benchmarks/faults/causes.py ``BREAKS``): each switch does to a real
TRL GRPO trainer what its description says, and the damage rule written for the reward-function breaks reads a
proxy that parts from its gold, and only that.

The switches are applied to a real ``GRPOTrainer`` on the tiny model (built, not trained: a second or two); the
recorded runs themselves are ``python benchmarks/faults/bench.py --causes breaks``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

FAULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "faults"
if str(FAULTS) not in sys.path:
    sys.path.insert(0, str(FAULTS))

import causes  # noqa: E402
from causes import (  # noqa: E402
    BASES,
    BREAKS,
    CAUSES,
    FRESH_SEEDS,
    TUNING_SEEDS,
    Ctx,
    GoldReward,
    ProxyReward,
    SwitchableCollator,
    damage_decoupled,
)

COMPLETIONS = ["ocean", "cone", "zebra", "no", "open ocean", "a", "onto", "canoe"]


def _rows(proxy: list[float], gold: list[float]) -> list[dict[str, Any]]:
    pairs = enumerate(zip(proxy, gold, strict=True))
    return [{"step": i + 1, "rewards/proxy/mean": p, "rewards/gold/mean": g} for i, (p, g) in pairs]


def test_break_causes_are_new_distinct_and_their_seeds_kept_apart() -> None:
    assert len(BREAKS) >= 6 and len(set(BREAKS)) == len(BREAKS)
    assert all(c in CAUSES for c in BREAKS)
    assert len({CAUSES[c].switch for c in BREAKS}) == len(BREAKS)
    assert not set(BREAKS) & {"lr_spike", "kl_removed", "length_reward", "reward_constant", "reward_nan", "reward_flip",
                              "temperature", "grads_cut", "grad_explosion", "prompt_shift", "rloo_reward_flip",
                              "dpo_pair_swap", "sft_corruption"}
    assert not set(TUNING_SEEDS) & set(FRESH_SEEDS)
    assert not set(FRESH_SEEDS) & set(range(0, 15)), "fresh seeds must not be the seeds 0-14 the other causes used"


def test_the_reward_function_modes_pay_what_they_say() -> None:
    proxy, gold = ProxyReward(seed=3), GoldReward()
    healthy = proxy(COMPLETIONS)
    assert len(proxy.recent) == len(COMPLETIONS), "the healthy judge's spread is remembered before any fault"
    proxy.mode = "rescaled"
    assert proxy(COMPLETIONS) == pytest.approx([ProxyReward.RESCALE * r for r in healthy])
    proxy.mode = "rubric"
    rubric = proxy(COMPLETIONS)
    shortcut_only = [h - g for h, g in zip(healthy, gold(COMPLETIONS), strict=True)]
    assert rubric == pytest.approx(shortcut_only), "the task term is dropped"
    assert len(proxy.recent) == len(COMPLETIONS), "a broken judge's scores are not taken for the healthy spread"
    proxy.mode = "noisy"
    proxy.noise_sd = 0.5
    noisy = [proxy(COMPLETIONS) for _ in range(400)]
    diffs = [n - h for batch in noisy for n, h in zip(batch, healthy, strict=True)]
    sd = math.sqrt(sum(d * d for d in diffs) / len(diffs))
    assert abs(sum(diffs) / len(diffs)) < 0.05 and 0.45 < sd < 0.55


def test_decoupling_damage_reads_a_proxy_that_parts_from_its_gold_and_nothing_else() -> None:
    rule = damage_decoupled()
    gold = [0.3 + 0.005 * i + 0.02 * math.sin(i) for i in range(60)]
    together = [1.3 * g for g in gold]
    assert rule(_rows(together, gold), 30) is None, "a proxy that keeps moving with its gold is no damage"
    rescaled = [p if i + 1 < 30 else 0.55 * p for i, p in enumerate(together)]
    step = rule(_rows(rescaled, gold), 30)
    assert step is not None and 30 <= step <= 30 + 2 * causes.ROLL, step
    both_fall = [p if i + 1 < 30 else 0.55 * p for i, p in enumerate(together)]
    gold_falls = [g if i + 1 < 30 else 0.55 * g for i, g in enumerate(gold)]
    assert rule(_rows(both_fall, gold_falls), 30) is None, "proxy and gold falling together is another cause's harm"


@pytest.fixture(scope="module")
def grpo(tmp_path_factory: pytest.TempPathFactory) -> Ctx:
    """A real TRL GRPO trainer as the benchmark builds it (its base's config, proxy and gold rewards), not trained."""
    from wandb_rlcluster import tiny

    b = BASES["grpo"]
    overrides = {k: v for k, v in b.overrides.items() if k != "eval_steps"}
    proxy = ProxyReward(seed=0)
    trainer = tiny.make_trainer(b.kind, output_dir=tmp_path_factory.mktemp("breaks"), max_steps=1, seed=0,
                                reward_funcs=[proxy, GoldReward()], **overrides)
    proxy(COMPLETIONS)  # the healthy judge has been heard once
    return Ctx(trainer, proxy, SwitchableCollator(trainer.data_collator, 0), seed=0)


def test_checkpoint_noise_perturbs_every_weight_tensor_by_its_own_spread(grpo: Ctx) -> None:
    import torch

    before = {n: p.detach().clone() for n, p in grpo.trainer.model.named_parameters()}
    CAUSES["checkpoint_noise"].switch(grpo)
    ratios = [float((p.detach() - before[n]).std() / before[n].std())
              for n, p in grpo.trainer.model.named_parameters() if p.numel() > 1 and before[n].std() > 0]
    assert ratios and all(abs(r - causes.CHECKPOINT_NOISE) < 0.25 * causes.CHECKPOINT_NOISE for r in ratios), ratios
    assert all(torch.isfinite(p).all() for p in grpo.trainer.model.parameters())


def test_ref_swapped_loads_the_base_weights_into_the_reference_only(grpo: Ctx) -> None:
    import torch

    from wandb_rlcluster import tiny

    policy = {n: p.detach().clone() for n, p in grpo.trainer.model.named_parameters()}
    CAUSES["ref_swapped"].switch(grpo)
    base = tiny.build_model(tiny.build_tokenizer(), seed=0).state_dict()
    for name, p in grpo.trainer.ref_model.named_parameters():
        assert torch.equal(p.detach(), base[name].to(p.dtype)), name
    assert all(torch.equal(p.detach(), policy[n]) for n, p in grpo.trainer.model.named_parameters())


def test_sampler_breaks_change_what_the_trainer_generates_with(grpo: Ctx) -> None:
    CAUSES["temperature_up"].switch(grpo)
    assert grpo.trainer.generation_config.temperature == causes.HOT_TEMPERATURE
    CAUSES["completion_cut"].switch(grpo)
    assert grpo.trainer.generation_config.max_new_tokens == causes.CUT_COMPLETION
    assert grpo.trainer.max_completion_length == causes.CUT_COMPLETION
    for kwargs in (getattr(grpo.trainer, "generation_kwargs", None),):
        if isinstance(kwargs, dict):
            assert kwargs["temperature"] == causes.HOT_TEMPERATURE
            assert kwargs["max_new_tokens"] == causes.CUT_COMPLETION


def test_judge_noisy_multiplies_the_rewards_spread_it_measured_before_onset(grpo: Ctx) -> None:
    assert grpo.proxy is not None
    vals = list(grpo.proxy.recent)
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    CAUSES["judge_noisy"].switch(grpo)
    assert grpo.proxy.mode == "noisy"
    assert grpo.proxy.noise_sd == pytest.approx(sd * math.sqrt(causes.JUDGE_NOISE ** 2 - 1))
    grpo.proxy.mode = "ok"
