"""The break watcher alone on recorded fault runs: its first warn (gauge ``breaks``, any series) after onset.

The fault benchmark (``benchmarks/faults/bench.py --causes breaks``) credits the watcher among each abrupt-break cause's
expected gauges; this reads the watcher's findings alone on the same recorded runs, to see its own share::

    PYTHONPATH=src python benchmarks/breaks/score_faults.py bench-out/faults-breaks/runs
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
for _p in (HERE / "faults", HERE / "detection"):
    sys.path.insert(0, str(_p))

from score import load_runs, ours  # noqa: E402


def main(folder: str) -> None:
    recalled = before = damaged = faulty = twins = twins_warned = 0
    delays: list[int] = []
    for run in load_runs(Path(folder)):
        m = run.meta
        alarms = [a for a in ours(run) if a[0] == "breaks" and a[2] in ("warn", "stop")]
        if m.cause is None or m.onset is None:
            twins += 1
            twins_warned += bool(alarms)
            print(f"twin {m.name}: {[(a[1], a[3]) for a in alarms]}")
            continue
        faulty += 1
        after = sorted(a[3] for a in alarms if a[3] >= m.onset)
        first = after[0] if after else None
        recalled += first is not None
        if m.damage is not None:
            damaged += 1
            before += first is not None and first < m.damage
        if first is not None:
            delays.append(first - m.onset)
        rules = sorted({a[1] for a in alarms if a[3] >= m.onset})
        print(f"{m.name}: onset {m.onset}, damage {m.damage}, first break warning {first} {rules}")
    med = statistics.median(delays) if delays else None
    print(f"recall {recalled}/{faulty}, warned before damage {before}/{damaged}, median delay {med} rows, "
          f"twins warned {twins_warned}/{twins}")


if __name__ == "__main__":
    main(sys.argv[1])
