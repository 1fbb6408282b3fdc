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
