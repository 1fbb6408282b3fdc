"""Benchmark: `rlcluster analyze` on a 100k-row GRPO history, and the core's per-row cost.

Not a test: it prints figures for docs/performance.md. Run with `make bench` (or
`python benchmarks/bench_analyze.py --rows 100000 --repeat 3`). Issue #28's bound is printed as a ratio:
`rlcluster analyze` end to end (a fresh process) over `json.load` of the same file (in this process), both
medians, target <= 3x. To compare two checkouts, run it with each on PYTHONPATH, alternately.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "detection"))  # the labelled-log generator

from wandb_rlcluster.core import GAUGE_IDS, InstrumentCluster

from synthetic import generate_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stream-rows", type=int, default=0, metavar="N",
                    help="instead: the peak memory (max RSS) of `rlcluster analyze` on an N-row history (the 100k-row "
                         "run repeated, steps running on), as trainer_state.json and as JSON Lines; issue #39 asks "
                         "<= 500 MB at 1,000,000 rows")
    args = ap.parse_args()
    if args.stream_rows:
        stream_memory(args.stream_rows)
        return

    run = generate_run("grpo_kl", "kl_runaway", n_steps=args.rows, seed=0, onset=0.8)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trainer_state.json"
        path.write_text(json.dumps({"global_step": args.rows, "max_steps": args.rows, "log_history": run.rows}))
        size_mb = path.stat().st_size / 1e6
        print(f"input: {len(run.rows)} rows, {len(run.rows[0])} keys/row, {size_mb:.0f} MB trainer_state.json")
        cpu = platform.processor() or platform.machine()
        print(f"machine: {cpu}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f}")

        # End to end, as a user runs it: a fresh process, read + analyse + render.
        times = []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", str(path), "--format", "json"],
                               capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            if p.returncode != 0:
                sys.exit(f"analyze failed: {p.stderr}")
            verdict = json.loads(p.stdout)["verdict"]
            print(f"  run {i + 1}: {times[-1]:.2f} s (verdict {verdict})")
        print(f"rlcluster analyze end to end: median {statistics.median(times):.2f} s over {args.repeat} runs "
              f"({statistics.median(times) / len(run.rows) * 1e6:.0f} µs per row; target < 5 s)")
        # issue #28's bound: analyze within 3x the time json.load takes on the same file (in this process)
        loads = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            with path.open() as fh:
                json.load(fh)
            loads.append(time.perf_counter() - t0)
        ratio = statistics.median(times) / statistics.median(loads)
        print(f"json.load of the same file: median {statistics.median(loads):.2f} s "
              f"({statistics.median(loads) / len(run.rows) * 1e6:.1f} µs per row); analyze / json.load = "
              f"{ratio:.1f}x (target <= 3x)")

    # The core alone, rows already in memory, all fourteen gauges.
    live, batch = [], []
    for _ in range(args.repeat):
        cluster = InstrumentCluster(trainer="grpo")
        t0 = time.perf_counter()
        for r in run.rows:  # the live callback's path: one row per on_log
            cluster.update(r)
        live.append((time.perf_counter() - t0) / len(run.rows) * 1e6)
        cluster = InstrumentCluster(trainer="grpo")
        t0 = time.perf_counter()
        rows = [row for row in map(cluster.normalizer.normalize, run.rows) if row is not None]
        cluster.update_batch(rows)  # the analyzer's path: gauge by gauge over a batch
        batch.append((time.perf_counter() - t0) / len(run.rows) * 1e6)
    print(f"core cost per row ({len(GAUGE_IDS)} gauges): live update() median {statistics.median(live):.1f} µs, "
          f"batch update_batch() median {statistics.median(batch):.1f} µs (load average now "
          f"{os.getloadavg()[0]:.1f})")

# The child reports its own peak: VmHWM (this process image's high-water mark). getrusage's ru_maxrss would not do:
# Linux keeps it across exec, so a child forked from this benchmark (which holds the 100k rows) inherits its peak.
_CHILD = ("import re, resource, runpy, sys; sys.argv = ['rlcluster'] + sys.argv[1:]\n"
          "try:\n    runpy.run_module('wandb_rlcluster', run_name='__main__')\n"
          "finally:\n"
          "    try:\n        kb = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
          "    except (OSError, AttributeError):\n        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
          "    print('MAXRSS_KB', kb, file=sys.stderr)")


def stream_memory(n_rows: int) -> None:
    """Max RSS and wall time of `rlcluster analyze` (a fresh process) on an n-row history, in both streamed formats."""
    base = generate_run("grpo_kl", "kl_runaway", n_steps=100_000, seed=0, onset=0.8).rows
    base = [r for r in base if "train_runtime" not in r]
    with tempfile.TemporaryDirectory() as tmp:
        state, lines = Path(tmp) / "trainer_state.json", Path(tmp) / "history.jsonl"
        with state.open("w") as ft, lines.open("w") as fj:
            ft.write(f'{{\n  "global_step": {n_rows},\n  "log_history": [\n')
            for i in range(n_rows):
                row = dict(base[i % len(base)], step=i + 1)
                text = json.dumps(row)
                fj.write(text + "\n")
                ft.write(("" if i == 0 else ",\n") + "    " + text)
            ft.write(f'\n  ],\n  "logging_steps": 1,\n  "max_steps": {n_rows}\n}}\n')
        print(f"input: {n_rows} rows; trainer_state.json {state.stat().st_size / 1e6:.0f} MB, JSON Lines "
              f"{lines.stat().st_size / 1e6:.0f} MB; machine: {os.cpu_count()} cpus, Python "
              f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}")
        for path in (state, lines):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", _CHILD, "analyze", str(path), "--format", "json"],
                               capture_output=True, text=True)
            wall = time.perf_counter() - t0
            rss = next((int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("MAXRSS_KB")), -1)
            rows = json.loads(p.stdout)["rows"] if p.returncode in (0, 1, 2) and p.stdout.strip() else "?"
            print(f"  {path.name}: max RSS {rss / 1024:.0f} MB (target <= 500 MB), {wall:.0f} s wall, "
                  f"{rows} rows analysed, exit {p.returncode}")


if __name__ == "__main__":
    main()
