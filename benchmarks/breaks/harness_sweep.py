"""The calibration harness's healthy streams through the whole cluster, counting the break watcher's warnings.

    PYTHONPATH=src:benchmarks python benchmarks/breaks/harness_sweep.py 0 6      # seeds 0-5, all 12 models
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from calibration import harness, noise


def main(lo: int, hi: int) -> None:
    jobs = harness.healthy_jobs(range(lo, hi), noise.MODELS)
    warned = 0
    for job in jobs:
        out = harness.run_job(job)
        hits = {k: v for k, v in out.first.items() if k in ("abrupt-break", "proxy-gold-split")}
        if hits:
            warned += 1
            print(job, hits)
    print(f"{warned} of {len(jobs)} healthy streams warned by the break watcher")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
