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
    "test_callback_trl", "test_gold_trl", "test_hardening_runs", "test_rollouts_trl", "test_sft_epoch_staircase",
    "test_wandb_thinning", "test_watch", "test_sidecar", "test_verl_layout", "test_wandb_offline",
    "test_detection_slice", "test_gauge_outputs",
})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SHARED_RUN_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
