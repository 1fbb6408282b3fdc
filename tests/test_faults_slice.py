"""A slice of the fault-injection benchmark (benchmarks/faults) as a CI gate: real TRL training, a fault switched
on at a known step, its healthy twin beside it, read by the product's core as the callback would.

What holds on any CPU (whatever trajectory its kernels give): the twin is a twin (identical rows up to the switch),
the fault does real harm (its damage step shows), the product warns from a gauge the cause moves at or after the
switch and before the damage, and it stays quiet on the twin. The rest of the benchmark (every cause, five seeds,
the anchors and the peers) is ``make bench-faults``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "faults"
if str(FAULTS) not in sys.path:
    sys.path.insert(0, str(FAULTS))

from causes import CAUSES, onset_for  # noqa: E402
from record import record  # noqa: E402
from score import Run, ours, outcome  # noqa: E402

SLICE = ("grad_explosion",)
SEED = 0


@pytest.mark.trains
@pytest.mark.parametrize("cause", SLICE)
def test_warned_after_onset_before_damage_and_twin_quiet(cause: str, tmp_path: Path) -> None:
    base = CAUSES[cause].base
    twin_meta, twin_rows = record(base, SEED, None, tmp_path)
    meta, rows = record(base, SEED, cause, tmp_path, twin_rows)
    onset = onset_for(SEED, base)
    assert meta.onset == onset
    def trained(rs: list[dict]) -> list[dict]:  # every logged value but the wall clock
        return [{k: v for k, v in r.items() if "time" not in k} for r in rs if r.get("step", 0) < onset and "loss" in r]

    assert trained(rows) and trained(rows) == trained(twin_rows), \
        "the faulty run and its twin must be identical before the switch"
    assert meta.damage is not None and meta.damage >= onset, f"{cause} did no visible harm: {meta}"

    faulty = outcome(ours(Run(meta, rows, tmp_path / f"{meta.name}.jsonl")), onset, meta.expected)
    assert not faulty.early, "warned before the fault was switched on"
    assert faulty.hit is not None, f"no warning from {meta.expected} after onset {onset}"
    assert onset <= faulty.hit < meta.damage, (faulty, meta.damage)

    twin = outcome(ours(Run(twin_meta, twin_rows, tmp_path / f"{twin_meta.name}.jsonl")), None, ())
    assert not twin.any_alarm, "warned on the healthy twin"
