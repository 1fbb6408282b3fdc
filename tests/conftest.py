"""Shared fixtures: where the real logs live (beside the checkout, as in CI); the benchmark's generator on the path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "real-logs"
DETECTION = REPO / "benchmarks" / "detection"
# The labelled-log generator (``synthetic``), the seed-rule anchor and the benchmark harness live beside the
# detection benchmark, not in the installed package: they are test and benchmark data, not product.
if str(DETECTION) not in sys.path:
    sys.path.insert(0, str(DETECTION))


@pytest.fixture(scope="session")
def real_logs() -> Path:
    if not REAL_LOGS.is_dir() or not any(REAL_LOGS.glob("*.json")):
        pytest.skip(f"real logs not present at {REAL_LOGS}")
    return REAL_LOGS



# Modules whose tests share one expensive module- or session-scoped result (a training run, a W&B run written by a
# subprocess, a detection corpus): under pytest-xdist each worker would build its own copy, so each module is one
# xdist group and runs on one worker (make test passes --dist loadgroup).
SHARED_RUN_MODULES = frozenset({
    "test_gold_trl", "test_hardening_runs", "test_rollouts_trl", "test_sft_epoch_staircase", "test_wandb_thinning",
    "test_watch", "test_sidecar", "test_verl_layout", "test_wandb_offline", "test_detection_slice",
    "test_gauge_outputs",
})
# test_callback_trl's session-shared runs (metrics_run, ppo_rows_run), read by tests in several modules: one group per
# run rather than per module, so the many different runs still spread over the workers.
SHARED_RUN_TESTS = {
    "test_callback_trl.py::test_callback_metrics_reach_wandb": lambda p: f"metrics-run-{p['kind']}-{p['order']}",
    "test_panel_keys.py::test_every_plotted_key_exists_in_a_real_run": lambda p: f"metrics-run-{p['kind']}-after",
    "test_panel_keys.py::test_sft_eval_loss_is_stored_as_eval_slash_loss": lambda p: "metrics-run-sft-after",
    "test_callback_trl.py::test_ppo_shaped_rows_through_real_trainer_log": lambda p: "ppo-rows-run",
    "test_panel_keys.py::test_every_plotted_ppo_key_exists_in_the_replayed_ppo_run": lambda p: "ppo-rows-run",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SHARED_RUN_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
            continue
        group = SHARED_RUN_TESTS.get(f"{item.path.name}::{getattr(item, 'originalname', item.name)}")
        if group is not None:
            params = item.callspec.params if hasattr(item, "callspec") else {}
            item.add_marker(pytest.mark.xdist_group(group(params)))
