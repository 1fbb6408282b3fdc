"""Benchmark: what `on_log` and the core cost inside a real (tiny) TRL GRPO run, against the same rows replayed.

Not a test: it prints figures for docs/performance.md. Three runs of the tiny GRPO training (100 steps, logging every
step, W&B offline) with ``RLClusterCallback``; per run, the median after step 20 of:
- ``on_log``: the whole callback call;
- ``feed``: the row pipeline (core + alert rules);
- ``rules``: the alert engine alone, so ``feed - rules`` is about the core in the run.

The same rows are then replayed through a fresh cluster in this process:
- ``hot``: back to back;
- ``swept``: with a 64 MB array swept between rows, as a training step sweeps the caches.

Run it once per build, alternately, to compare the pure and the compiled core (``make compiled``):

    PYTHONPATH=build/compiled python benchmarks/bench_onlog_inrun.py
    PYTHONPATH=src python benchmarks/bench_onlog_inrun.py
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off")


def _timed(fn: Callable[..., Any], into: list[float], rows: list[dict[str, Any]] | None = None) -> Callable[..., Any]:
    def wrapped(*a: Any, **k: Any) -> Any:
        if rows is not None:
            rows.append(dict(a[0]))
        t = time.perf_counter()
        out = fn(*a, **k)
        into.append(time.perf_counter() - t)
        return out
    return wrapped


def _median_us(xs: list[float]) -> float:
    return statistics.median(xs[20:]) * 1e6 if len(xs) > 20 else float("nan")


def main() -> None:
    import wandb

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.core import InstrumentCluster
    from wandb_rlcluster.core.build import core_build
    from wandb_rlcluster.tiny import make_trainer

    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="rlcluster-inrun-")
    os.environ["WANDB_DIR"] = tmp
    make_trainer("grpo_kl", output_dir=f"{tmp}/warm", max_steps=2).train()  # imports, allocator
    res: dict[str, list[float]] = {"on_log": [], "feed": [], "rules": []}
    rows: list[dict[str, Any]] = []
    for i in range(3):
        cb = RLClusterCallback()
        calls: list[float] = []
        feeds: list[float] = []
        rules: list[float] = []
        rows = []
        cb.on_log = _timed(cb.on_log, calls)  # type: ignore[method-assign]
        begin = cb.on_train_begin

        def on_train_begin(*a: Any, cb: Any = cb, begin: Any = begin, feeds: Any = feeds, rules: Any = rules,
                           rows: Any = rows, **k: Any) -> None:
            begin(*a, **k)  # the pipeline exists from here
            cb.pipeline.feed = _timed(cb.pipeline.feed, feeds, rows)
            cb.pipeline.engine.evaluate = _timed(cb.pipeline.engine.evaluate, rules)

        cb.on_train_begin = on_train_begin  # type: ignore[method-assign]
        make_trainer("grpo_kl", output_dir=f"{tmp}/r{i}", callbacks=[cb], report_to="wandb", max_steps=100,
                     seed=0).train()
        wandb.finish()
        for key, xs in (("on_log", calls), ("feed", feeds), ("rules", rules)):
            res[key].append(_median_us(xs))

    big = bytearray(64 << 20)
    for mode in ("hot", "swept"):
        res[mode] = []
        for _ in range(3):
            cluster = InstrumentCluster(trainer="grpo", max_steps=100, detect_rows=1)
            ts: list[float] = []
            for r in rows:
                if mode == "swept":
                    big[::4096] = bytes(len(big) // 4096)
                    sum(big[::64])
                t = time.perf_counter()
                cluster.update(r)
                ts.append(time.perf_counter() - t)
            res[mode].append(_median_us(ts))
    print(f"core: {core_build()}; medians after step 20, µs per row, one per run:")
    for key, xs in res.items():
        print(f"  {key:7s} {' '.join(f'{x:6.0f}' for x in xs)}")


if __name__ == "__main__":
    main()
