"""The per-framework real-log benchmark (benchmarks/real_logs_bench.py): its counting, its behaviour without the
real logs, and the peer adapters on a real log when the peers' venvs exist (``make bench-real`` installs them; the
tests never install anything)."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_logs_bench import (
    Judged,
    RealLog,
    Verdict,
    collect,
    ensure_peer,
    render,
    run_rldoctor,
    run_rlwatch,
    tally,
    write_rows,
)

from wandb_rlcluster.analyze import load_any

from .conftest import shared_log


def _judged(fw: str, expected: str, rows: int, **verdicts: Verdict) -> Judged:
    log = RealLog(f"{fw}-{expected}-{rows}", Path("x"), fw, expected, "test")
    return Judged(log, rows, {"ours": Verdict("ok"), "rldoctor": Verdict("ok"), "rlwatch": Verdict("ok")} | verdicts)


def test_tally_counts_warned_stopped_alarms_and_caught_per_framework() -> None:
    judged = [
        _judged("verl", "healthy", 400, ours=Verdict("warn", ["entropy/entropy-collapse", "reward/reward-plateau"])),
        _judged("verl", "healthy", 100, rldoctor=Verdict("stop", ["kl_drift:critical"])),
        _judged("verl", "troubled", 50, ours=Verdict("stop", ["kl/kl-stop"]), rlwatch=Verdict("error", note="boom")),
        _judged("SFT", "healthy", 500),
    ]
    t = tally(judged)
    verl = t["verl"]
    assert (verl["ours"].healthy, verl["ours"].healthy_rows, verl["ours"].warned, verl["ours"].alarms) == (2, 500, 1, 2)
    assert (verl["ours"].troubled, verl["ours"].caught, verl["ours"].stopped) == (1, 1, 0)
    assert (verl["rldoctor"].warned, verl["rldoctor"].stopped, verl["rldoctor"].caught) == (1, 1, 0)
    assert verl["rlwatch"].errors == 1 and verl["rlwatch"].troubled == 0  # an error is not a miss
    assert t["all"]["ours"].healthy == 3 and t["all"]["ours"].healthy_rows == 1000 and t["SFT"]["ours"].warned == 0
    text = render(judged, ["manifest.json: x not present"], {"rlwatch": ""}, [Path("/nowhere")])
    assert "| **verl** (2 healthy, 500 rows; 1 troubled) | ours | 1 of 2 (50 %) | 0 | 4.00 | 1 of 1 |" in text
    assert "x not present" in text


def test_without_the_real_logs_nothing_is_judged_and_each_absence_says_why(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    monkeypatch.setenv("RLCLUSTER_REAL_LOGS", str(tmp_path / "absent"))
    logs, left_out = collect([tmp_path / "absent" / "new"])
    assert logs == []
    assert left_out and "real log not present" in left_out[0]
    assert all("not present under" in line for line in left_out[1:])


def _peer(tool: str) -> Path:
    python, why = ensure_peer(tool, install=False)
    if python is None:
        pytest.skip(f"{why} (make bench-real installs it)")
    return python


@pytest.fixture(scope="module")
def small_log_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A small real TRL PPO log (100 rows: KL 5-12 per sequence, scores pinned) as the JSONL rows both peers get."""
    rows = [r for r in load_any(str(shared_log("ppo_trl_kartik_v1_seed2026.json"))).rows if isinstance(r, dict)]
    path = tmp_path_factory.mktemp("peer") / "rows.jsonl"
    write_rows(rows, path)
    return path, len(rows)


def test_rldoctor_adapter_reads_a_real_log(small_log_rows: tuple[Path, int]) -> None:
    v = run_rldoctor(_peer("rldoctor"), small_log_rows[0])
    assert v.verdict in ("ok", "warn", "stop"), v.note
    assert (v.verdict == "ok") == (not v.alarms)
    assert all(a.endswith((":warning", ":critical")) for a in v.alarms)


def test_rlwatch_adapter_feeds_a_real_log_through_its_callback(small_log_rows: tuple[Path, int],
                                                                tmp_path: Path) -> None:
    path, n = small_log_rows
    got = run_rlwatch(_peer("rlwatch"), [(path, "trl")], tmp_path)
    v = got[str(path)]
    assert v.verdict in ("ok", "warn", "stop"), v.note
    assert (v.verdict == "ok") == (not v.alarms)
    assert all(1 <= int(a.rsplit("@", 1)[1]) <= n for a in v.alarms)  # alerts at steps of this log
