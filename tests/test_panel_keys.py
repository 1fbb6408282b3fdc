"""Every key a report panel plots exists in a real run of that family, read back from the W&B offline run.

Checked against what W&B actually stores, not against the layout files: transformers' ``WandbCallback`` writes
``eval_*`` keys as ``eval/*`` and everything else as ``train/*``, so a panel built from the layout alone once plotted
``train/eval_loss``, a key that never exists. The runs are the ones ``test_callback_trl`` reads (shared per session):
real TRL trainers on the tiny model, the callback attached, every live probe on.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from wandb_rlcluster.layouts import load_layout
from wandb_rlcluster.readers.wandb import read_offline_run

from .test_callback_trl import metrics_run, ppo_rows_run

pytestmark = pytest.mark.trains  # trains a tiny model for real (make test-kernels)

# Keys a real run of that kind may lack, each with the reason. Anything else a panel plots must be in the run, and a
# key listed here that the run has after all fails the test too (the list must not rot).
LORA = {k: "LoRA panels need a PEFT adapter (the sft_peft run in test_callback_trl carries them)"
        for k in ("rlcluster/lora/norm_mean", "rlcluster/lora/effective_rank")}
NO_EVAL = {"eval/loss": "this run does not evaluate (no eval_dataset); the SFT run shows W&B stores eval/loss",
           "rlcluster/convergence/gap": "the train/eval gap needs an evaluating run"}
PPO_LR = {"train/lr": "PPOv1's name for the learning rate, plotted on the same panel"}
OPTIONAL: dict[str, dict[str, str]] = {
    "grpo_kl": {**LORA, **NO_EVAL, **PPO_LR},
    "rloo": {**LORA, **NO_EVAL, **PPO_LR},
    "dpo": {**LORA, **NO_EVAL, **PPO_LR, "train/kl": "DPO logs no KL; the panel is for KTO's reference-point estimate"},
    "kto": {**LORA, **NO_EVAL, **PPO_LR,
            "train/rewards/accuracies": "KTO scores unpaired completions: no preference accuracy",
            "rlcluster/reward/accuracy_ewma": "KTO logs no accuracy to smooth"},
    "sft": {**LORA, **PPO_LR},
    "online_dpo": {**LORA, **NO_EVAL, **PPO_LR,
                   "rlcluster/efficiency/tokens_per_s": "Online DPO logs no num_tokens to count throughput with"},
    "ppo": {**LORA, **NO_EVAL,
            **{k: "the PPO rows are a real log replayed through Trainer.log() with the live probes off"
               for k in ("rlcluster/attention_entropy/mean", "rlcluster/attention_entropy/max_possible",
                         "rlcluster/samples/repetition_rate", "rlcluster/gradients/layer_spread")},
            "rlcluster/efficiency/tokens_per_s": "PPOv1 logs no num_tokens",
            "train/loss": "PPOv1 logs loss/policy_avg and loss/value_avg (Value function panel), no loss",
            "rlcluster/loss/loss_ewma": "PPOv1 logs no loss",
            "train/grad_norm": "PPOv1 logs no grad_norm",
            "train/learning_rate": "PPOv1 logs it as lr (train/lr, on the same panel)"},
}
LAYOUT_OF = {"grpo_kl": "grpo", "rloo": "grpo", "dpo": "dpo", "kto": "dpo", "sft": "sft", "online_dpo": "online_dpo",
             "ppo": "ppo"}


def _plotted(kind: str) -> list[str]:
    layout = load_layout(LAYOUT_OF[kind])
    return sorted({y for sec in layout.sections for p in sec.panels for y in p.y})


def _missing(kind: str, run_dir: str) -> tuple[list[str], list[str]]:
    """(keys plotted but absent from the run and not optional, optional keys that the run has after all)."""
    keys = {k for row in read_offline_run(run_dir).history for k in row}
    optional = OPTIONAL[kind]
    missing, needless = [], []
    for y in _plotted(kind):
        present = any(fnmatch.fnmatchcase(k, y) for k in keys) if "*" in y else y in keys
        if not present and y not in optional:
            missing.append(y)
        elif present and y in optional:
            needless.append(y)
    return missing, needless


@pytest.mark.parametrize("kind", ["grpo_kl", "rloo", "dpo", "kto", "sft", "online_dpo"])
def test_every_plotted_key_exists_in_a_real_run(tmp_path_factory: pytest.TempPathFactory, kind: str):
    res = metrics_run(tmp_path_factory, kind)
    missing, needless = _missing(kind, res["run_dir"])
    assert not missing, f"{kind}: panels plot keys the real run never wrote: {missing}"
    assert not needless, f"{kind}: keys listed as optional are there after all (drop them from OPTIONAL): {needless}"


def test_every_plotted_ppo_key_exists_in_the_replayed_ppo_run(tmp_path_factory: pytest.TempPathFactory,
                                                               real_logs: Path):
    res = ppo_rows_run(tmp_path_factory, real_logs)
    missing, needless = _missing("ppo", res["run_dir"])
    assert not missing, f"ppo: panels plot keys the real run never wrote: {missing}"
    assert not needless, f"ppo: keys listed as optional are there after all: {needless}"


def test_sft_eval_loss_is_stored_as_eval_slash_loss(tmp_path_factory: pytest.TempPathFactory):
    """The trap itself: the evaluated SFT run has eval/loss and no train/eval_loss, and the panels plot the former."""
    keys = {k for row in read_offline_run(metrics_run(tmp_path_factory, "sft")["run_dir"]).history for k in row}
    assert "eval/loss" in keys and "train/eval_loss" not in keys
    plotted = _plotted("sft")
    assert "eval/loss" in plotted and "train/eval_loss" not in plotted
