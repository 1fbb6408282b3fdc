"""Shared fixtures: where the real logs live (beside the checkout, as in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "real-logs"


@pytest.fixture(scope="session")
def real_logs() -> Path:
    if not REAL_LOGS.is_dir() or not any(REAL_LOGS.glob("*.json")):
        pytest.skip(f"real logs not present at {REAL_LOGS}")
    return REAL_LOGS
