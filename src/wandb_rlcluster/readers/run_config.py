"""What a tracked run's configuration says about it: the trainer family and the planned steps.

A tracker keeps the trainer's arguments beside the metrics (W&B's run config, MLflow's parameters): transformers logs
``TrainingArguments.to_dict()`` there, and a TRL config adds the fields of its trainer. Only fields one trainer's
config has and no other's name the family (GRPO's ``scale_rewards``, KTO's ``desirable_weight`` ...); a config with
none of them names none, and the family is read from the metric keys as for any log.
"""

from __future__ import annotations

from collections.abc import Mapping

#: (family, fields only that trainer's config has), first match wins (TRL 1.x configs).
FAMILY_FIELDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("kto", frozenset({"desirable_weight", "undesirable_weight"})),
    ("grpo", frozenset({"scale_rewards", "importance_sampling_level", "sapo_temperature_neg", "delta"})),
    ("grpo", frozenset({"normalize_advantages", "reward_clip_range"})),  # RLOO: read as GRPO's numbers
    ("dpo", frozenset({"f_divergence_type", "ld_alpha", "discopop_tau", "rpo_alpha"})),
    ("reward", frozenset({"center_rewards_coefficient"})),
    ("sft", frozenset({"dataset_text_field", "completion_only_loss", "assistant_only_loss"})),
)


def family_of_config(config: Mapping[str, object]) -> str | None:
    """The trainer family the config's fields name, or None."""
    keys = set(config)
    for family, fields in FAMILY_FIELDS:
        if keys & fields:
            return family
    return None


def planned_steps(config: Mapping[str, object]) -> int:
    """``max_steps`` when the run planned a number of steps (transformers' -1, or none: 0)."""
    raw = config.get("max_steps")
    if isinstance(raw, str):
        raw = raw.strip()
        raw = int(raw) if raw.isdigit() else 0
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0


def config_meta(config: Mapping[str, object]) -> dict[str, object]:
    """The ``LoadedLog.meta`` entries a config gives: ``trainer`` and ``max_steps`` where it names them."""
    meta: dict[str, object] = {}
    family = family_of_config(config)
    if family:
        meta["trainer"] = family
    planned = planned_steps(config)
    if planned:
        meta["max_steps"] = planned
    return meta
