"""The tiny local models and real TRL trainers: they build offline, train, and log the keys the gauges read."""

from __future__ import annotations

import math
import os

import pytest

# Nothing in these tests may reach the Hub (tiny.py sets the same defaults; this covers an earlier hub import).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from wandb_rlcluster import tiny  # noqa: E402

# TRL 1.16 itself still calls the deprecated transformers alias; that is not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

# Keys each TRL 1.16 trainer logs per step (a subset of the real log rows, enough to pin the metric family).
_GROUP_RL = {
    "loss",
    "grad_norm",
    "entropy",
    "num_tokens",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/clipped_ratio",
    "clip_ratio/region_mean",
    "rewards/reward_letter_a/mean",
    "rewards/reward_letter_a/std",
    "rewards/reward_length/mean",
    "rewards/reward_length/std",
}
EXPECTED_KEYS: dict[str, set[str]] = {
    "grpo": _GROUP_RL,
    "grpo_kl": _GROUP_RL | {"kl"},
    "rloo": _GROUP_RL | {"kl"},
    "dpo": {
        "loss",
        "rewards/chosen",
        "rewards/rejected",
        "rewards/margins",
        "rewards/accuracies",
        "logps/chosen",
        "logps/rejected",
        "logits/chosen",
        "mean_token_accuracy",
    },
    "kto": {"loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logits/chosen"},
    "online_dpo": {
        "loss",
        "beta",
        "objective/kl",
        "objective/entropy",
        "objective/non_score_reward",
        "objective/rlhf_reward",
        "objective/scores",
        "objective/scores_margin",
        "rewards/margins",
        "rewards/accuracies",
        "logps/chosen",
        "val/contain_eos_token",
    },
    "sft": {"loss", "grad_norm", "mean_token_accuracy", "entropy", "num_tokens"},
}
# Keys that must NOT appear: GRPO with the default beta=0 builds no reference model, so it logs no KL.
ABSENT_KEYS: dict[str, set[str]] = {"grpo": {"kl"}}


def _step_rows(trainer: object) -> list[dict[str, float]]:
    """The per-step log rows (the final row is the train summary, with train_runtime instead of loss)."""
    return [row for row in trainer.state.log_history if "train_runtime" not in row]


def test_tokenizer_round_trips_text() -> None:
    tokenizer = tiny.build_tokenizer()
    for text in ("Hello, world!", "  two  spaces\n\ttab {json: [1, 2]} ~`|", "héllo ✓"):
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.decode(ids) == text
    assert len(tokenizer("abc")["input_ids"]) == 3  # one token per byte, no special tokens added
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == tiny.SPECIAL_TOKENS
    assert tokenizer.padding_side == "left"
    assert tokenizer("<s>hi</s>")["input_ids"] == [tokenizer.bos_token_id, *tokenizer("hi")["input_ids"], 2]


def test_chat_template_renders_and_marks_assistant_tokens() -> None:
    tokenizer = tiny.build_tokenizer()
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "user: hi\nassistant: "
    out = tokenizer.apply_chat_template(messages, return_dict=True, return_assistant_tokens_mask=True)
    marked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tokenizer.decode(marked) == "yo</s>"


def test_model_forward_shape_and_seed_determinism() -> None:
    tokenizer = tiny.build_tokenizer()
    model = tiny.build_model(tokenizer, seed=3)
    batch = tokenizer(["hello", "a"], return_tensors="pt", padding=True)
    logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], len(tokenizer))
    assert model.config.pad_token_id == tokenizer.pad_token_id == model.generation_config.pad_token_id
    same, other = tiny.build_model(tokenizer, seed=3), tiny.build_model(tokenizer, seed=4)
    w = model.model.embed_tokens.weight
    assert torch.equal(w, same.model.embed_tokens.weight)
    assert not torch.equal(w, other.model.embed_tokens.weight)


def test_reward_model_scores_one_value_per_sequence() -> None:
    tokenizer = tiny.build_tokenizer()
    rm = tiny.build_reward_model(tokenizer)
    batch = tokenizer(["good", "bad answer"], return_tensors="pt", padding=True)
    assert rm(**batch).logits.shape == (2, 1)
    assert rm.config.pad_token_id == tokenizer.pad_token_id


def test_reward_functions_accept_standard_and_conversational_completions() -> None:
    completions = ["a banana", [{"role": "assistant", "content": "Aa"}]]
    assert tiny.reward_letter_a(completions) == [4.0, 2.0]
    assert tiny.reward_length(completions) == [0.8, 0.2]


@pytest.mark.trains
@pytest.mark.parametrize("kind", tiny.KINDS)
def test_trainer_trains_and_logs_trl_keys(kind: str, tmp_path) -> None:
    trainer = tiny.make_trainer(kind, output_dir=tmp_path, max_steps=2)
    trainer.train()
    rows = _step_rows(trainer)
    assert [row["step"] for row in rows] == [1, 2]
    keys = set().union(*rows)
    assert EXPECTED_KEYS[kind] <= keys, f"{kind} missing {sorted(EXPECTED_KEYS[kind] - keys)}"
    assert not (ABSENT_KEYS.get(kind, set()) & keys)
    for row in rows:
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float)), row
    assert "train_runtime" in trainer.state.log_history[-1]


@pytest.mark.trains
def test_sft_with_peft_trains_a_lora_adapter(tmp_path) -> None:
    PeftModel = pytest.importorskip("peft").PeftModel
    trainer = tiny.make_trainer("sft", output_dir=tmp_path, max_steps=2, peft=True)
    assert isinstance(trainer.model, PeftModel)
    trainable = {name for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert any("q_proj" in name for name in trainable) and not any("mlp" in name for name in trainable)
    trainer.train()
    assert {"loss", "mean_token_accuracy"} <= set().union(*_step_rows(trainer))


@pytest.mark.trains
def test_overrides_reach_the_config_and_checkpoints_save_offline(tmp_path) -> None:
    trainer = tiny.make_trainer(
        "grpo_kl", output_dir=tmp_path, max_steps=2, learning_rate=5e-3, save_strategy="steps", save_steps=2, seed=7
    )
    args = trainer.args
    assert (args.beta, args.learning_rate, args.seed, args.save_steps) == (0.1, 5e-3, 7, 2)
    assert (args.use_cpu, args.bf16, args.logging_steps, args.report_to) == (True, False, 1, [])
    trainer.train()
    assert (tmp_path / "checkpoint-2").is_dir()


@pytest.mark.trains
def test_reward_model_joins_the_reward_functions(tmp_path) -> None:
    trainer = tiny.make_trainer("grpo", output_dir=tmp_path, max_steps=1, reward_model=True)
    trainer.train()
    assert "rewards/tiny-llama-rm/mean" in set().union(*_step_rows(trainer))


def test_unknown_kind_is_rejected(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        tiny.make_trainer("ppo", output_dir=tmp_path)
