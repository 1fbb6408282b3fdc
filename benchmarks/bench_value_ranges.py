"""Cost of the value-range check (core/sanity.py, issue #28): ``analyze_rows`` on one 5,000-row GRPO stream with
the check on and off, alternated in one process, medians of 3 each.

    PYTHONPATH=src python benchmarks/bench_value_ranges.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from wandb_rlcluster.core import analyze_rows
from wandb_rlcluster.core import gauge as gauge_module

ROWS = 5000


def rows() -> list[dict[str, float]]:
    z = np.random.default_rng(0).normal(size=(ROWS, 8))
    return [{"step": i, "loss": 0.01 * z[i - 1, 0], "grad_norm": abs(0.3 + 0.03 * z[i - 1, 1]), "learning_rate": 1e-6,
             "reward": 0.3 + 0.3 * i / ROWS + 0.05 * z[i - 1, 2], "reward_std": abs(0.3 + 0.02 * z[i - 1, 3]),
             "frac_reward_zero_std": min(1.0, max(0.0, 0.1 + 0.03 * z[i - 1, 4])),
             "completions/mean_length": 200 * (1 + 0.03 * z[i - 1, 5]), "completions/min_length": 80.0,
             "completions/max_length": 320.0, "completions/clipped_ratio": 0.02,
             "entropy": 1.2 * (1 + 0.02 * z[i - 1, 6]), "kl": 0.05 + 0.005 * z[i - 1, 7], "clip_ratio/region_mean": 0.1}
            for i in range(1, ROWS + 1)]


def main() -> None:
    stream = rows()
    ranges_for = gauge_module.ranges_for

    def run(on: bool) -> float:
        gauge_module.ranges_for = ranges_for if on else (lambda gid: ())
        t = time.perf_counter()
        analyze_rows(stream, trainer="grpo")
        return time.perf_counter() - t

    times: dict[bool, list[float]] = {True: [], False: []}
    for k in range(6):
        first = bool(k % 2)
        for flag in (first, not first):
            times[flag].append(run(flag))
    gauge_module.ranges_for = ranges_for
    on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
    print(f"{ROWS} rows: check on {on_s * 1e6 / ROWS:.1f} us/row, off {off_s * 1e6 / ROWS:.1f} us/row, "
          f"on/off {on_s / off_s:.3f}")


if __name__ == "__main__":
    main()
