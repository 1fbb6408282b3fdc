"""The fault-injection benchmark on real TRL training (``make bench-faults``).

Two stages, so every detector is scored on the same runs without training again:

1. record: for every seed of ``SEEDS``, each healthy twin (``causes.BASES``) and each faulty run (``causes.CAUSES``),
   trained for real on the tiny local model, its rows saved under ``bench-out/faults/runs/`` (``record.py``); runs
   already there are kept (delete the folder to train again);
2. score: every detector reads every recorded run (``score.py``), and ``RESULTS.md`` plus one SVG per cause are
   written beside this file.

Usage: ``python benchmarks/faults/bench.py [--seeds 0-4] [--causes a,b] [--score-only] [--no-peers]``.

``--causes`` defaults to the original thirteen causes; ``--causes breaks`` names the abrupt-break causes
(``causes.BREAKS``), kept apart with their own seeds and folders: tuning seeds 0-2 (``bench-out/faults-breaks``,
results committed in ``breaks/RESULTS.md``) and fresh seeds 100-104 (``bench-out/faults-breaks-fresh``,
``breaks-fresh/RESULTS.md``), recorded and scored once, at the end, by the lead::

    python benchmarks/faults/bench.py --seeds 100-104 --causes breaks

Those folders are the defaults whenever a break cause is selected (``--out``/``--results`` override them), so a
break run never mixes into, or overwrites, the seeds 0-9 results of the other causes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (HERE, REPO / "benchmarks" / "detection"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from causes import BASES, BREAKS, CAUSES, TUNING_SEEDS  # noqa: E402
from record import record, run_name  # noqa: E402

OUT = REPO / "bench-out" / "faults"
SEEDS = range(0, 10)
"""The fixed seed list: the recorded runs are a function of these (and the CPU's kernels)."""
DEFAULT_CAUSES = tuple(c for c in CAUSES if c not in BREAKS)


def seed_range(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",") if x]


def plan(seeds: list[int], causes: list[str]) -> list[tuple[str, int, str | None]]:
    """(base, seed, cause) in the order they train: seed by seed, each base's twin before its faulty runs."""
    out: list[tuple[str, int, str | None]] = []
    for seed in seeds:
        for base in BASES:
            mine = [c for c in causes if CAUSES[c].base == base]
            if mine:
                out.append((base, seed, None))
                out.extend((base, seed, c) for c in mine)
    return out


def record_all(seeds: list[int], causes: list[str], out: Path, progress: bool = True) -> None:
    """Train what is not recorded yet, one run at a time, under a progress bar."""
    import torch
    from tqdm.auto import tqdm

    # a tiny model gains nothing from intra-op threads, and on a shared CPU their spin-waits cost 10x and more
    torch.set_num_threads(1)

    from record import load_rows

    runs_dir = out / "runs"
    todo = plan(seeds, causes)
    bar = tqdm(total=len(todo), desc="bench-faults: record", unit="run", disable=not progress)
    twin_rows: dict[tuple[str, int], list] = {}
    for base, seed, cause in todo:
        name = run_name(cause or f"twin_{base}", seed)
        bar.set_postfix_str(name)
        path = runs_dir / f"{name}.jsonl"
        if path.exists() and (runs_dir / f"{name}.json").exists():
            if cause is None:
                twin_rows[(base, seed)] = load_rows(path)
        else:
            meta, rows = record(base, seed, cause, runs_dir, twin_rows.get((base, seed)))
            if cause is None:
                twin_rows[(base, seed)] = rows
            tqdm.write(f"{name}: {meta.n_rows} rows, onset {meta.onset}, damage {meta.damage}, "
                       f"{meta.train_s:.0f} s{', ' + meta.error if meta.error else ''}")
        bar.update(1)
    bar.close()


def default_folders(seeds: list[int], causes: list[str], out: Path | None, results: Path | None
                    ) -> tuple[Path, Path]:
    """Where runs and results go when not named: the break causes in their own folders, fresh seeds apart from the
    tuning seeds, so a held-out scoring reads only its own runs and overwrites no committed result."""
    if not any(c in BREAKS for c in causes):
        return out or OUT, results or HERE / "RESULTS.md"
    tag = "" if set(seeds) <= set(TUNING_SEEDS) else "-fresh"
    return out or REPO / "bench-out" / f"faults-breaks{tag}", results or HERE / f"breaks{tag}" / "RESULTS.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default=f"{SEEDS.start}-{SEEDS.stop - 1}")
    ap.add_argument("--causes", default=",".join(DEFAULT_CAUSES),
                    help="comma-separated cause names; 'breaks' stands for the abrupt-break causes")
    ap.add_argument("--out", type=Path, default=None, help=f"runs folder (default: {OUT}; for break causes "
                    "bench-out/faults-breaks, or faults-breaks-fresh for seeds outside the tuning seeds)")
    ap.add_argument("--score-only", action="store_true", help="score what is recorded; train nothing")
    ap.add_argument("--no-peers", action="store_true", help="leave rldoctor and rlwatch out")
    ap.add_argument("--results", type=Path, default=None, help="results file (default: RESULTS.md here; for break "
                    "causes breaks/RESULTS.md, or breaks-fresh/RESULTS.md for seeds outside the tuning seeds)")
    args = ap.parse_args(argv)
    seeds = seed_range(args.seeds)
    causes = [c for name in args.causes.split(",") if name for c in (BREAKS if name == "breaks" else (name,))]
    unknown = [c for c in causes if c not in CAUSES]
    if unknown:
        ap.error(f"unknown cause(s) {', '.join(unknown)}; known: {', '.join(CAUSES)} (or 'breaks')")
    args.out, args.results = default_folders(seeds, causes, args.out, args.results)
    t0 = time.perf_counter()
    if not args.score_only:
        record_all(seeds, causes, args.out)
    from record import refresh_damage
    from score import score_and_write

    refresh_damage(args.out / "runs")

    cmd = "python benchmarks/faults/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    # the pictures go beside the results they belong to: a held-out run's results elsewhere must not redraw the
    # committed pictures of the seeds 0-9 results
    args.results.parent.mkdir(parents=True, exist_ok=True)
    score_and_write(args.out / "runs", args.results, args.results.parent, peers=not args.no_peers,
                    command=cmd.strip(), started=t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
