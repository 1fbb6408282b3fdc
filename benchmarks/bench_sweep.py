"""Benchmark: `rlcluster analyze DIR` on a sweep of generated GRPO runs (issue #39: 200 runs x 2,000 rows in <= 30 s
on 2 cores, with the ranked table and the fleet page).

Not a test: it prints figures for docs/analyze.md. The runs are labelled synthetic GRPO histories
(benchmarks/detection/synthetic), half healthy, half with one pathology each, written as JSON Lines. The sweep is
timed end to end as a user runs it: a fresh `python -m wandb_rlcluster analyze DIR --jobs N --html ...` process.
Beside the wall clock it reports the CPU time of that process and its workers (getrusage of the children): on a
machine shared with other work, CPU time / jobs estimates the wall clock the same sweep takes on idle cores.

    PYTHONPATH=src python benchmarks/bench_sweep.py --runs 200 --rows 2000 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "detection"))  # the labelled-log generator

from synthetic import generate_run
from synthetic.catalog import combinations


def write_sweep(folder: Path, runs: int, rows: int) -> dict[str, str | None]:
    """``runs`` JSONL histories under ``folder`` (every other one healthy); returns file name -> pathology."""
    faulty = [(f, p) for f, p in combinations(include_healthy=False) if f in ("grpo", "grpo_kl")]
    labels: dict[str, str | None] = {}
    for i in range(runs):
        family, pathology = ("grpo_kl" if i % 4 == 0 else "grpo", None) if i % 2 == 0 else faulty[i // 2 % len(faulty)]
        run = generate_run(family, pathology, n_steps=rows, seed=i)
        name = f"run{i:03d}-{family}-{pathology or 'healthy'}.jsonl"
        sub = folder / f"group{i % 8}"
        sub.mkdir(exist_ok=True)
        with (sub / name).open("w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in run.rows)
        labels[name] = pathology
    return labels


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="write the sweep, table and fleet page here and keep them")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        runs_dir = folder / "runs"
        runs_dir.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        labels = write_sweep(runs_dir, args.runs, args.rows)
        size = sum(p.stat().st_size for p in runs_dir.rglob("*.jsonl")) / 1e6
        print(f"sweep: {len(labels)} runs x {args.rows} rows ({size:.0f} MB of JSON Lines), generated in "
              f"{time.perf_counter() - t0:.1f} s")
        print(f"machine: {os.cpu_count()} cpus, Python {sys.version.split()[0]}, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min) before the sweep")
        html = folder / "fleet.html"
        cmd = [sys.executable, "-m", "wandb_rlcluster", "analyze", str(runs_dir), "--jobs", str(args.jobs),
               "--format", "json", "--html", str(html)]
        for i in range(args.repeat):
            cpu0 = children_cpu()
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            cpu = children_cpu() - cpu0
            if p.returncode not in (0, 1):
                sys.exit(f"analyze failed ({p.returncode}): {p.stderr[-2000:]}")
            table = json.loads(p.stdout)
            print(f"  sweep {i + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU (analyze and its {args.jobs} workers); "
                  f"CPU / jobs = {cpu / args.jobs:.1f} s, the wall clock on {args.jobs} idle cores; load average "
                  f"now {os.getloadavg()[0]:.1f}; target <= 30 s")
        if args.keep:
            (folder / "table.json").write_text(p.stdout)
        runs = table["runs"]
        n = table["counts"]
        print(f"verdicts: {n}; fleet page {html.stat().st_size / 1e3:.0f} kB")
        flagged_faulty = sum(r["verdict"] in ("warn", "stop") for r in runs if labels[Path(r["path"]).name])
        flagged_healthy = sum(r["verdict"] in ("warn", "stop") for r in runs if not labels[Path(r["path"]).name])
        n_faulty = sum(p is not None for p in labels.values())
        print(f"faulty runs warned or stopped: {flagged_faulty}/{n_faulty}; healthy runs warned or stopped: "
              f"{flagged_healthy}/{len(labels) - n_faulty}")
        top = runs[: max(1, n["stop"] + n["warn"])]
        share = sum(labels[Path(r["path"]).name] is not None for r in top) / len(top)
        print(f"of the {len(top)} runs ranked warn or worse, {share:.0%} carry a pathology")


if __name__ == "__main__":
    main()
