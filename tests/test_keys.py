"""Key registry: TRL 1.x names, older TRL names, W&B export names, and trainer detection."""

from __future__ import annotations

import math

import pytest

from wandb_rlcluster.core.keys import Normalizer, canonical_family, detect_family

# Keys as TRL 1.16 logs them (read from the trainers' source), per family.
TRL_KEYS = {
    "grpo": ["loss", "grad_norm", "learning_rate", "num_tokens", "completions/mean_length",
             "completions/clipped_ratio", "rewards/accuracy_reward/mean", "rewards/accuracy_reward/std",
             "reward", "reward_std", "frac_reward_zero_std", "entropy", "clip_ratio/low_mean",
             "clip_ratio/high_mean", "clip_ratio/region_mean"],
    "dpo": ["loss", "grad_norm", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
            "logps/chosen", "logps/rejected", "logits/chosen", "logits/rejected", "entropy",
            "mean_token_accuracy", "num_tokens"],
    "kto": ["loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
            "logps/rejected", "logits/chosen", "logits/rejected", "entropy", "num_tokens"],
    "orpo": ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
             "logps/chosen", "nll_loss", "log_odds_ratio", "log_odds_chosen"],
    "online_dpo": ["loss", "objective/kl", "objective/entropy", "objective/non_score_reward",
                   "objective/rlhf_reward", "objective/scores", "rewards/chosen", "rewards/margins",
                   "logps/chosen", "val/contain_eos_token"],
    "ppo": ["objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
            "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
            "val/clipfrac_avg", "policy/entropy_avg", "val/ratio", "val/ratio_var", "val/num_eos_tokens"],
    "reward": ["loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward", "num_tokens"],
    "sft": ["loss", "grad_norm", "learning_rate", "entropy", "mean_token_accuracy", "num_tokens"],
}


@pytest.mark.parametrize("family", sorted(TRL_KEYS))
def test_detect_family_from_trl_keys(family):
    assert detect_family(TRL_KEYS[family]) == family


def test_older_trl_names_map_to_canonical():
    n = Normalizer()
    row = n.normalize({"completion_length": 120.0, "clip_ratio": 0.1, "rewards/format_reward": 0.5,
                       "rewards/chosen": 1.0, "lr": 1e-5, "step": 3})
    assert row is not None
    assert row.values == {"completions/mean_length": 120.0, "clip_ratio/region_mean": 0.1,
                          "rewards/format_reward/mean": 0.5, "rewards/chosen": 1.0, "learning_rate": 1e-5}
    assert row.step == 3


def test_canonical_spelling_wins_over_alias_in_same_row():
    row = Normalizer().normalize({"completion_length": 1.0, "completions/mean_length": 2.0})
    assert row is not None and row.values["completions/mean_length"] == 2.0
    row = Normalizer().normalize({"completions/mean_length": 2.0, "completion_length": 1.0})
    assert row is not None and row.values["completions/mean_length"] == 2.0


def test_wandb_export_names():
    n = Normalizer()
    row = n.normalize({"train/global_step": 7, "train/loss": "0.5", "eval/loss": 0.7, "_runtime": 3.0,
                       "myrun - train/reward": 0.2, "myrun - train/reward__MIN": 0.1, "_timestamp": 1.0})
    assert row is not None
    assert row.step == 7
    assert row.values == {"loss": 0.5, "eval_loss": 0.7, "reward": 0.2}


def test_values_strings_none_and_bad_tokens():
    row = Normalizer().normalize({"loss": "NaN", "kl": "inf", "reward": None, "grad_norm": "abc",
                                  "entropy": [1, 2], "num_tokens": True})
    assert row is not None
    assert math.isnan(row.values["loss"]) and row.values["kl"] == math.inf
    assert set(row.values) == {"loss", "kl", "num_tokens"}


def test_row_kinds():
    n = Normalizer()
    assert n.normalize({"loss": 1.0, "step": 1}).kind == "train"  # type: ignore[union-attr]
    assert n.normalize({"eval_loss": 1.0, "eval_runtime": 2.0, "step": 1}).kind == "eval"  # type: ignore[union-attr]
    assert n.normalize({"train_runtime": 9.0, "train_loss": 0.4, "step": 1}).kind == "summary"  # type: ignore[union-attr]
    assert n.normalize({"step": 5}) is None  # nothing but a step


def test_step_restart_keeps_steps_monotonic():
    n = Normalizer()
    steps = [n.normalize({"loss": 1.0, "step": s}).step for s in (1, 2, 3, 1, 2, 10)]  # type: ignore[union-attr]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert n.restarts == [3]
    no_step = Normalizer()
    assert [no_step.normalize({"loss": 1.0}).step for _ in range(3)] == [0, 1, 2]  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "family"), [("GRPOTrainer", "grpo"), ("rloo", "grpo"), ("CPO", "orpo"),
                                               ("online-dpo", "online_dpo"), ("ppo", "ppo")])
def test_canonical_family(name, family):
    assert canonical_family(name) == family


def test_unknown_family_is_an_error():
    with pytest.raises(ValueError, match="unknown trainer"):
        canonical_family("banana")
