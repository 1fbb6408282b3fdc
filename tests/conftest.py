"""Shared fixtures: where the real logs live (beside the checkout, never in it); the benchmarks' modules on the path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
