"""The dashboard reads every row `rlcluster analyze` reads: the same row count, first and last step, and findings,
on every real log of every reader format (trainer_state JSON, bare lists, wrappers, printed logs, JSONL, verl
console logs, gzip)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wandb_rlcluster.alerts import load_config
from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.dashboard import build_dashboard

from real_logs import absent, real_logs_root

LOG_SUFFIXES = (".json", ".jsonl", ".log", ".gz")


def _real_log_params() -> list:
    root = real_logs_root()
    reason = absent(root)
    if reason:
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="absent")]
    logs = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(LOG_SUFFIXES)
                  and p.name != "MANIFEST.json")
    return [pytest.param(p, id=str(p.relative_to(root))) for p in logs]


@pytest.mark.parametrize("path", _real_log_params())
def test_dashboard_reads_the_rows_analyze_reads(path: Path) -> None:
    config = load_config()
    analysed = analyze_path(str(path), alerts=config)
    _, drawn = build_dashboard(str(path), alerts=config)
    a, d = analysed.cluster.summary(), drawn.cluster.summary()
    assert a["rows"] > 0
    assert (d["rows"], drawn.first_step, drawn.last_step) == (a["rows"], analysed.first_step, analysed.last_step)
    assert d["trainer"] == a["trainer"]
    key = [(f["gauge"], f["rule"], f["step"]) for f in a["findings"]]
    assert [(f["gauge"], f["rule"], f["step"]) for f in d["findings"]] == key
