"""Benchmark: RLClusterCallback's overhead on a real (tiny) TRL GRPO run.

The same GRPO training (tiny local Llama, CPU, W&B offline, logging every step)
runs with and without the callback, alternated in one process, several times;
the figure is the median wall-time ratio, plus the callback's own cost per
``on_log`` call. Not a test: it prints figures for the README.

    python benchmarks/bench_callback.py --steps 100 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_DISABLE_GIT", "true")
os.environ.setdefault("WANDB_CONSOLE", "off")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kind", default="grpo_kl")
    args = ap.parse_args()

    import wandb
    from tqdm.auto import tqdm

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.tiny import make_trainer

    tmp = tempfile.mkdtemp(prefix="rlcluster-bench-")
    os.environ["WANDB_DIR"] = tmp
    times: dict[bool, list[float]] = {False: [], True: []}
    per_log_us: list[float] = []
    callbacks_seen: list[RLClusterCallback] = []
    plan = [False, True] * args.repeat
    make_trainer(args.kind, output_dir=f"{tmp}/warm", max_steps=2).train()  # warm-up: imports, allocator
    for i, with_cb in enumerate(tqdm(plan, desc="alternating runs", unit="run")):
        cbs = [RLClusterCallback()] if with_cb else []
        trainer = make_trainer(args.kind, output_dir=f"{tmp}/run{i}", callbacks=cbs, report_to="wandb",
                               max_steps=args.steps, seed=0, run_name=f"bench-{i}-{with_cb}")
        t0 = time.perf_counter()
        trainer.train()
        times[with_cb].append(time.perf_counter() - t0)
        wandb.finish()
        if with_cb:
            cb = cbs[0]
            callbacks_seen.append(cb)
            per_log_us.append(cb.on_log_seconds / max(1, cb.on_log_calls) * 1e6)
    base, ours = statistics.median(times[False]), statistics.median(times[True])
    ratios = [b / a for a, b in zip(times[False], times[True], strict=True)]
    print(f"{args.kind}, {args.steps} steps, logging every step, {args.repeat} alternated pairs (tiny Llama on CPU)")
    print(f"  without callback: median {base:.2f} s  ({base / args.steps * 1e3:.1f} ms/step)")
    print(f"  with callback:    median {ours:.2f} s  ({ours / args.steps * 1e3:.1f} ms/step)")
    print(f"  ratio with/without: median of pairs {statistics.median(ratios):.3f}  "
          f"(ratio of medians {ours / base:.3f})")
    print(f"  callback on_log cost (core + W&B log call): median {statistics.median(per_log_us):.0f} µs per call")
    print(f"  callback errors: {sum(cb.errors for cb in callbacks_seen)}")


if __name__ == "__main__":
    main()
