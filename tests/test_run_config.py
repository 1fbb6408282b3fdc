"""The trainer family a tracked run's config names is read from the fields of TRL's own config classes: each TRL
config, as transformers logs it (``to_dict()``), names its own family, so a renamed field in TRL fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from wandb_rlcluster.core.keys import canonical_family
from wandb_rlcluster.readers.run_config import config_meta, family_of_config, planned_steps

trl = pytest.importorskip("trl")


@pytest.mark.parametrize("cls, family", [("GRPOConfig", "grpo"), ("RLOOConfig", "rloo"), ("DPOConfig", "dpo"),
                                         ("KTOConfig", "kto"), ("SFTConfig", "sft"), ("RewardConfig", "reward")])
def test_each_trl_config_names_its_family(cls: str, family: str, tmp_path: Path) -> None:
    config = getattr(trl, cls)(output_dir=str(tmp_path), max_steps=37, use_cpu=True, report_to="none").to_dict()
    assert family_of_config(config) == canonical_family(family)
    assert config_meta(config) == {"trainer": canonical_family(family), "max_steps": 37}


def test_a_plain_config_names_nothing_and_odd_steps_are_no_plan() -> None:
    from transformers import TrainingArguments

    plain = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none").to_dict()
    assert family_of_config(plain) is None and config_meta(plain) == {}  # max_steps -1: epochs, no plan
    assert [planned_steps({"max_steps": v}) for v in ("12", 12.0, True, "-1", None, 0)] == [12, 12, 0, 0, 0, 0]
