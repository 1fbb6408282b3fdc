"""Tiny, locally built models and real TRL trainers for tests and the CPU demo.

Everything here is built in code (tokenizer, model weights, data sets), so the test suite and the demo exercise the
real TRL logging paths -- the exact metric keys the instrument cluster reads -- without touching the Hugging Face Hub
and in seconds on a laptop CPU.  Heavy imports live at module top on purpose: this module is only imported by the
tests and the demo, never by the package's ``__init__``.
"""

from __future__ import annotations

import os

# Nothing here may reach the Hub; telemetry pings and hub look-ups must stay off before huggingface_hub is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from datasets import disable_progress_bars as disable_datasets_progress_bars
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
)
from transformers.utils import logging as hf_logging

__all__ = [
    "CHAT_TEMPLATE",
    "KINDS",
    "REWARD_FUNCS",
    "SPECIAL_TOKENS",
    "build_model",
    "build_reward_model",
    "bias_toward_eos",
    "build_tokenizer",
    "make_dataset",
    "make_trainer",
    "pretrain",
    "reward_length",
    "reward_letter_a",
]

#: Every trainer kind :func:`make_trainer` can build.
KINDS: tuple[str, ...] = ("grpo", "grpo_kl", "rloo", "dpo", "kto", "online_dpo", "sft")

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)

# A plain-text chat format: byte-level friendly, and the `generation` block lets SFT's assistant-only loss find the
# assistant spans if a caller turns it on.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ 'assistant: ' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ message['role'] + ': ' + message['content'] + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


# --------------------------------------------------------------------------------------------------------------------
# Tokenizer and models
# --------------------------------------------------------------------------------------------------------------------


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A 260-token byte-level tokenizer built in code, so any text round-trips without a downloaded vocabulary.

    BPE with no merges over the 256 ByteLevel symbols means one token per byte; the four special tokens come first
    (``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3).  Padding is on the left, which is what generation wants; TRL's
    trainers pad explicitly on the side they need anyway.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *alphabet])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        truncation_side="left",
        model_max_length=256,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _llama_config(tokenizer: PreTrainedTokenizerFast, *, hidden: int, layers: int, heads: int, **extra: Any) -> Any:
    """A Llama config whose vocabulary and special ids agree with ``tokenizer``."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        **extra,
    )


def build_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    attn_implementation: str = "eager",
) -> PreTrainedModel:
    """A randomly initialised tiny ``LlamaForCausalLM``; the same seed always gives the same weights."""
    config = _llama_config(tokenizer, hidden=hidden, layers=layers, heads=heads)
    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation)
    model.config._name_or_path = "tiny-llama"
    gen = model.generation_config
    gen.bos_token_id, gen.eos_token_id, gen.pad_token_id = (
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    return model


def build_reward_model(
    tokenizer: PreTrainedTokenizerFast, *, hidden: int = 32, layers: int = 1, heads: int = 4, seed: int = 0
) -> PreTrainedModel:
    """A tiny scalar-head ``LlamaForSequenceClassification``; its ``pad_token_id`` locates each sequence's end."""
    config = _llama_config(tokenizer, hidden=hidden, layers=layers, heads=heads, num_labels=1)
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification._from_config(config, attn_implementation="eager")
    model.config._name_or_path = "tiny-llama-rm"
    return model


# --------------------------------------------------------------------------------------------------------------------
# Reward functions (TRL logs them as rewards/<function name>/mean and /std)
# --------------------------------------------------------------------------------------------------------------------


def _texts(completions: Sequence[Any]) -> list[str]:
    """Completion texts from either standard (str) or conversational (list of messages) completions."""
    return [c if isinstance(c, str) else " ".join(m.get("content", "") for m in c) for c in completions]


def reward_letter_a(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Counts the letter ``a``: sparse for a random model, so groups often have zero reward spread."""
    return [float(text.lower().count("a")) for text in _texts(completions)]


def reward_length(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Rewards longer completions (characters / 10): dense, so groups nearly always have some spread."""
    return [len(text) / 10.0 for text in _texts(completions)]


REWARD_FUNCS: tuple[Callable[..., list[float]], ...] = (reward_letter_a, reward_length)


# --------------------------------------------------------------------------------------------------------------------
# Data sets (a dozen in-memory rows each)
# --------------------------------------------------------------------------------------------------------------------

_WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "maple", "ocean", "amber", "delta", "sugar")
# what the pretrained tiny model answers with (see pretrain): varied lengths, so a length reward has spread to act on
_ANSWERS = ("sky", "sea", "sun", "moon", "ocean", "river", "stone", "cloud", "planet", "forest", "mountain",
            "lighthouse")


def make_dataset(kind: str, rows: int = 12) -> Dataset:
    """The tiny in-memory data set in the format ``kind``'s TRL trainer expects."""
    words = [_WORDS[i % len(_WORDS)] for i in range(rows)]
    prompts = [f"Say a word like {w}:" for w in words]
    base = kind.removesuffix("_kl")
    if base in ("grpo", "rloo", "online_dpo"):
        return Dataset.from_dict({"prompt": prompts})
    if base == "dpo":
        return Dataset.from_dict(
            {"prompt": prompts, "chosen": [f" {w} again" for w in words], "rejected": [" no" for _ in words]}
        )
    if base == "kto":
        return Dataset.from_dict(
            {
                "prompt": prompts,
                "completion": [f" {w}" if i % 2 == 0 else " zzz" for i, w in enumerate(words)],
                "label": [i % 2 == 0 for i in range(rows)],
            }
        )
    if base == "sft":
        return Dataset.from_dict({"text": [f"{p} {w}, {w}, {w}." for p, w in zip(prompts, words, strict=True)]})
    raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")


# --------------------------------------------------------------------------------------------------------------------
# Trainers
# --------------------------------------------------------------------------------------------------------------------


def _lora_config() -> Any:
    """LoRA r=4 on the attention projections: the smallest adapter that still exercises the PEFT code paths."""
    from peft import LoraConfig

    return LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )


def pretrain(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, *, steps: int = 120, seed: int = 0,
             lr: float = 1e-2, batch_size: int = 32) -> PreTrainedModel:
    """Teach a fresh tiny model the task's shape: answer ``Say a word like X:`` with one word and an EOS.

    A randomly initialised model never emits EOS (every completion is truncated), attends uniformly and loops under
    greedy decoding -- all real alarms.  A couple of seconds of plain next-token training on ``prompt word</s>`` (the
    word drawn at random from words of 3 to 10 letters, so the policy keeps some entropy and some length spread to
    explore with) gives the "SFT model" an RL run starts from in practice.  The loss is on the answer tokens only.
    """
    import random

    rng = random.Random(seed)
    texts, answer_from = [], []
    for i in range(16 * len(_WORDS)):
        prompt = f"Say a word like {_WORDS[i % len(_WORDS)]}:"
        texts.append(f"{prompt} {rng.choice(_ANSWERS)}{tokenizer.eos_token}")
        answer_from.append(len(tokenizer(prompt)["input_ids"]))
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    was_training = model.training
    model.train()
    for _ in range(steps):
        idx = rng.sample(range(len(texts)), batch_size)
        enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True)
        labels = enc["input_ids"].clone()
        labels[enc["attention_mask"] == 0] = -100
        width = labels.shape[1]
        for row, i in enumerate(idx):  # left padding: the answer starts answer_from[i] tokens after the padding
            pad = int((enc["attention_mask"][row] == 0).sum())
            labels[row, : min(width, pad + answer_from[i])] = -100
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.train(was_training)
    return model


def bias_toward_eos(trainer: Any, bias: float = 6.0) -> None:
    """Give the tiny model a strong EOS bias so it starts with short answers (and has room to grow)."""
    model = trainer.model
    old = model.lm_head
    new = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        new.weight.copy_(old.weight)
        new.bias.zero_()
        new.bias[trainer.processing_class.eos_token_id] = bias
    model.lm_head = new


def _saved_init_model(tokenizer: PreTrainedTokenizerFast, output_dir: Path, *, seed: int,
                      pretrain_steps: int = 0) -> PreTrainedModel:
    """The tiny policy, also saved to disk and pointed at by its ``_name_or_path``.

    GRPO/RLOO (beta > 0), DPO and KTO build their reference model by reloading ``config._name_or_path``; pointing it at
    a local copy of the initial weights gives them the right reference without the Hub.  Each rank writes its own copy
    so concurrent ``torchrun`` processes never race on the same files.  ``pretrain_steps`` > 0 first runs
    :func:`pretrain`, so the policy and its reference both start from the "SFT model".
    """
    model = build_model(tokenizer, seed=seed)
    if pretrain_steps > 0:
        pretrain(model, tokenizer, steps=pretrain_steps, seed=seed)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    init_dir = output_dir / ("tiny-init" if world == 1 else f"tiny-init-rank{os.environ.get('RANK', '0')}")
    model.save_pretrained(init_dir)
    tokenizer.save_pretrained(init_dir)
    model.config._name_or_path = str(init_dir)
    return model


def make_trainer(
    kind: str,
    *,
    output_dir: str | Path,
    callbacks: Sequence[TrainerCallback] | None = None,
    report_to: str | Sequence[str] = "none",
    max_steps: int = 3,
    seed: int = 0,
    peft: bool = False,
    run_name: str | None = None,
    reward_model: bool = False,
    reward_funcs: Sequence[Any] | None = None,
    pretrain_steps: int = 0,
    eval_steps: int = 0,
    **overrides: Any,
) -> Trainer:
    """A real TRL trainer of ``kind`` on a tiny model and data set, ready for ``.train()``.

    ``overrides`` go into the trainer's config (``learning_rate``, ``beta``, ``save_strategy``, ``logging_steps``...).
    ``peft=True`` wraps the policy in a LoRA adapter via the trainer's ``peft_config``.  ``reward_model=True`` adds
    the tiny :func:`build_reward_model` to the reward functions of ``grpo``/``grpo_kl``/``rloo``/``online_dpo``
    (GRPO/RLOO log it as ``rewards/tiny-llama-rm/mean``).  Each rank also saves the initial weights under
    ``output_dir/tiny-init*`` (see :func:`_saved_init_model`); ``pretrain_steps`` > 0 starts from a briefly
    :func:`pretrain`-ed model instead of random weights.  ``eval_steps`` > 0 evaluates on a small held-out set every
    that many steps (transformers logs ``eval_loss``; W&B stores it as ``eval/loss``).  With ``disable_tqdm`` (the
    default) the datasets and transformers progress bars are switched off too -- process-wide -- so demo and test
    output stays readable.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
    if reward_model and kind not in ("grpo", "grpo_kl", "rloo", "online_dpo"):
        raise ValueError(f"reward_model=True needs an online kind (grpo, grpo_kl, rloo, online_dpo), not {kind!r}")
    # Our default sets the new name, which would make transformers silently ignore the deprecated alias.
    for old, new in (
        ("gradient_checkpointing", "activation_checkpointing"),
        ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
    ):
        if old in overrides:
            overrides[new] = overrides.pop(old)
    if overrides.get("disable_tqdm", True):
        disable_datasets_progress_bars()
        hf_logging.disable_progress_bar()
    tokenizer = build_tokenizer()
    model = _saved_init_model(tokenizer, Path(output_dir), seed=seed, pretrain_steps=pretrain_steps)
    common: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": max_steps,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": report_to if isinstance(report_to, str) else list(report_to),
        "run_name": run_name,
        "seed": seed,
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "activation_checkpointing": False,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        # Every parameter gets a gradient, so DDP's unused-parameter search (on by default here) is wasted work.
        "ddp_find_unused_parameters": False,
    }
    trainer_kwargs: dict[str, Any] = {
        "model": model,
        "processing_class": tokenizer,
        "train_dataset": make_dataset(kind),
        "callbacks": list(callbacks) if callbacks else None,
    }
    if eval_steps > 0:
        trainer_kwargs["eval_dataset"] = make_dataset(kind, rows=4)
        common.update(eval_strategy="steps", eval_steps=eval_steps, per_device_eval_batch_size=4)
    if peft:
        trainer_kwargs["peft_config"] = _lora_config()
    reward_funcs = list(reward_funcs) if reward_funcs is not None else list(REWARD_FUNCS)
    reward_tokenizers: list[Any] = [None] * len(reward_funcs)
    if reward_model:
        # A model reward needs its own tokenizer: TRL would otherwise look it up on the Hub by the model's name.
        reward_funcs.append(build_reward_model(tokenizer, seed=seed))
        reward_tokenizers.append(tokenizer)
    rewards: dict[str, Any] = {"reward_funcs": reward_funcs, "reward_processing_classes": reward_tokenizers}

    if kind in ("grpo", "grpo_kl"):
        from trl import GRPOConfig, GRPOTrainer

        specific: dict[str, Any] = {"num_generations": 4, "max_completion_length": 8,
                                    "beta": 0.1 if kind == "grpo_kl" else 0.0}
        args = GRPOConfig(**{**common, **specific, **overrides})
        return GRPOTrainer(args=args, **rewards, **trainer_kwargs)
    if kind == "rloo":
        from trl import RLOOConfig, RLOOTrainer

        specific = {"num_generations": 4, "max_completion_length": 8}
        return RLOOTrainer(args=RLOOConfig(**{**common, **specific, **overrides}), **rewards, **trainer_kwargs)
    if kind == "dpo":
        from trl import DPOConfig, DPOTrainer

        return DPOTrainer(args=DPOConfig(**{**common, "max_length": 64, **overrides}), **trainer_kwargs)
    if kind == "kto":
        from trl import KTOConfig, KTOTrainer

        return KTOTrainer(args=KTOConfig(**{**common, "max_length": 64, **overrides}), **trainer_kwargs)
    if kind == "online_dpo":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer

        online_args = OnlineDPOConfig(**{**common, "max_new_tokens": 8, "max_length": 64, **overrides})
        return OnlineDPOTrainer(args=online_args, **rewards, **trainer_kwargs)
    # sft
    from trl import SFTConfig, SFTTrainer

    return SFTTrainer(args=SFTConfig(**{**common, "max_length": 64, **overrides}), **trainer_kwargs)
