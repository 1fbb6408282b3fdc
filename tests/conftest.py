"""Shared fixtures: where the real logs live (beside the checkout, never in it); the benchmarks' modules on the path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# One intra-op thread per test process (and, through the environment, per subprocess it starts: the demo, torchrun's
# ranks, the W&B writers). The tiny models' ops are far too small to split: on 2 cores two threads ran a tiny GRPO step
# about 5x slower than one (OpenMP hand-off on every op), and under xdist each worker's threads fought the other's.
# Set before anything imports torch (its OpenMP runtime reads it once); an OMP_NUM_THREADS already set is kept.
# The first process to load this file (xdist's controller, whose environment the workers inherit) notes what it was
# given, so that a test can hand a subprocess torch's default thread count again (threads_as_given).
_GIVEN = "RLCLUSTER_TESTS_OMP_NUM_THREADS_GIVEN"
os.environ.setdefault(_GIVEN, os.environ.get("OMP_NUM_THREADS", ""))
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # pragma: no cover - no pytest plugin here imports torch, but one could
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def threads_as_given() -> dict[str, str]:
    """The environment for a subprocess with OMP_NUM_THREADS as the test run was given it (unset: torch's default,
    one thread per core), not the one thread set above."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", _GIVEN)}
    if os.environ.get(_GIVEN):
        env["OMP_NUM_THREADS"] = os.environ[_GIVEN]
    return env


REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
DETECTION = BENCHMARKS / "detection"
# The labelled-log generator (``synthetic``), the seed-rule anchor, the harness and the real-log locator live beside
# the benchmarks, not in the installed package: they are test and benchmark data, not product.
for _p in (BENCHMARKS, DETECTION):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from real_logs import absent, real_log, real_logs_root  # noqa: E402 - needs the path above


def shared_log(*parts: str) -> Path:
    """A real log under ../shared/real-logs ($RLCLUSTER_REAL_LOGS); skips the calling test when it is absent."""
    path = real_log(*parts)
    reason = absent(path)
    if reason:
        pytest.skip(reason)
    return path


def skipped_param(reason: str) -> list:
    """The params of a test parametrized over real logs that are absent: one that skips with ``reason``, so the test
    says why instead of pytest's 'got empty parameter set'."""
    return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="absent")]


def shared_log_params(subdir: str, pattern: str) -> list:
    """pytest params, one per real log matching ``pattern`` in ``subdir`` (id: its name), or one that skips with the
    reason where the folder is absent."""
    folder = real_log(subdir)
    reason = absent(folder)
    if reason:
        return skipped_param(reason)
    return [pytest.param(p, id=p.name) for p in sorted(folder.glob(pattern))]


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The folder of real TRL logs (its top level); skips where it is absent or holds none."""
    root = real_logs_root()
    if not root.is_dir() or not any(root.glob("*.json")):
        pytest.skip(f"real logs not present at {root} (set RLCLUSTER_REAL_LOGS to the shared real-logs folder)")
    return root


@pytest.fixture(scope="session")
def verl_ppo_log() -> Path:
    """A real verl PPO console log (Qwen2.5-0.5B, GSM8K, 435 steps) whose KL to the reference crosses 0.15 in its
    second third: the run the watch/sidecar tests replay through real wandb."""
    return shared_log("verl", "eric-haibin-lin__gsm8k_Qwen2.5-0.5B-ppo-resp512.log.gz")


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
