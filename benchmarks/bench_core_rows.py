"""Benchmark: the instrument core's CPU time per row (``InstrumentCluster.update``, the live path), best of 3.

CPU time (``time.process_time``) rather than wall time: on a loaded machine it is the steadier figure. Compare two
checkouts by alternating them on ``PYTHONPATH``. Not a test: it prints one JSON line.

    PYTHONPATH=src python benchmarks/bench_core_rows.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "detection"))  # the labelled-log generator

from wandb_rlcluster.core import InstrumentCluster

from synthetic import generate_run


def main() -> None:
    run = generate_run("grpo_kl", None, n_steps=3000, seed=0)
    best = []
    for _ in range(3):
        c = InstrumentCluster(trainer="grpo", max_steps=3000)
        t0 = time.process_time()
        for r in run.rows:
            c.update(r)
        best.append((time.process_time() - t0) / len(run.rows) * 1e6)
    print(json.dumps({"cpu_us_per_row_min": round(min(best), 1)}))


if __name__ == "__main__":
    main()
