"""A run's settings resolved once (``core/settings.py``): the cluster built from them is the cluster its keyword
arguments build, and a bad option fails while they are resolved, before any row."""

from __future__ import annotations

import pytest

from wandb_rlcluster.core.cluster import GOLD_AWARE, InstrumentCluster, RunSettings
from wandb_rlcluster.core.keymap import KeyMap


def _view(c: InstrumentCluster) -> tuple:
    return (c.family, c.params, c.max_steps, c.warn_sooner, c.framework, c.detect_rows, c.keymap.as_dict())


@pytest.mark.parametrize("kwargs", [
    {},
    {"trainer": "GRPOTrainer", "max_steps": 200.0, "warn_sooner": 2},
    {"framework": "verl", "keys": {"gold": "val/acc"}},
    {"trainer": "dpo", "params": {"reward": {"margin_collapse": 0.4}}, "detect_rows": 0},
    {"keys": {"reward": "reward/g", "gold": "reward/f"}, "params": {"reward": {"gold": ["judge"]}}},
])
def test_the_cluster_built_from_settings_is_the_one_its_arguments_build(kwargs: dict) -> None:
    settings = RunSettings.resolve(**kwargs)
    assert _view(InstrumentCluster(settings=settings)) == _view(InstrumentCluster(**kwargs))
    built = InstrumentCluster(settings=settings)
    assert built.settings is settings
    if kwargs.get("keys", {}).get("gold") or kwargs.get("params", {}).get("reward", {}).get("gold"):
        gold = settings.params["reward"]["gold"]
        assert gold and all(settings.params[g]["gold"] == gold for g in GOLD_AWARE)


def test_settings_resolve_the_framework_family_and_the_planned_steps() -> None:
    s = RunSettings.resolve(framework="verl", max_steps=float("nan"), keys=KeyMap({"gold": "val/acc"}))
    assert s.framework == "verl" and s.profile is not None and s.family == s.profile.family
    assert s.max_steps == 0 and s.detect_rows >= 1
    assert RunSettings.resolve().framework == "trl" and RunSettings.resolve().family is None
    assert RunSettings.resolve().with_family("GRPOTrainer").family == "grpo"


@pytest.mark.parametrize("kwargs, says", [
    ({"warn_sooner": 7}, "warn_sooner"),
    ({"params": {"rewrd": {}}}, "unknown gauge id"),
    ({"params": {"reward": {"shift_k": "x"}}}, "shift_k"),
    ({"keys": {"not-a-quantity": "x"}}, "not-a-quantity"),
])
def test_a_bad_option_fails_while_the_settings_are_resolved(kwargs: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        RunSettings.resolve(**kwargs)
    with pytest.raises(ValueError, match=says):
        InstrumentCluster(**kwargs)
