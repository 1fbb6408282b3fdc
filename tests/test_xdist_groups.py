"""The xdist groups in tests/conftest.py name tests that exist: a renamed test or module must not silently fall out
of its group (each worker would then build the shared run again, as when pytest 9.2 broke xdist's own groups)."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import SHARED_RUN_MODULES, SHARED_RUN_TESTS, shared_run_group

HERE = Path(__file__).parent


def _test_names(file: Path) -> set[str]:
    return {n.name for n in ast.parse(file.read_text()).body if isinstance(n, ast.FunctionDef)}


def test_every_grouped_module_and_test_exists() -> None:
    assert all((HERE / f"{m}.py").is_file() for m in SHARED_RUN_MODULES), SHARED_RUN_MODULES
    for key in SHARED_RUN_TESTS:
        file, name = key.split("::")
        assert name in _test_names(HERE / file), key


def test_groups_come_from_the_node_id() -> None:
    assert shared_run_group("tests/test_gold_trl.py::test_the_run_is_what_the_test_says") == "test_gold_trl"
    after = "tests/test_panel_keys.py::test_every_plotted_key_exists_in_a_real_run[sft]"
    assert shared_run_group(after) == shared_run_group(
        "tests/test_callback_trl.py::test_callback_metrics_reach_wandb[sft-after]") == "metrics-run-sft-after"
    assert shared_run_group("tests/test_callback_trl.py::test_callback_metrics_reach_wandb[grpo-after]") == \
        "test_rollouts_trl"
    assert shared_run_group("tests/test_sharded.py::test_forward_probes_run_under_every_engine[fsdp2]") == \
        shared_run_group("tests/test_sharded.py::test_sharding_is_really_on[ddp]")
    assert shared_run_group("tests/test_stats.py::test_rolling_window_matches_batch") is None
