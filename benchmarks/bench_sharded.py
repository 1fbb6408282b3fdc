"""The callback's cost under DDP, FSDP2, DeepSpeed ZeRO-2 and ZeRO-3: 2 CPU processes (gloo), gradient statistics
every 10 steps, runs with and without RLClusterCallback alternated in one session.

    PYTHONPATH=src python benchmarks/bench_sharded.py --engines ddp,fsdp2,zero2,zero3 --steps 60 --reps 2

Each run is ``tests/scripts/run_sharded.py`` under torchrun (a tiny Llama through TRL's SFTTrainer, W&B offline;
the forward probes off, so the number is the gradient statistics' and the per-row gauges' cost). The time compared
is the steady state: from the end of step ``--warmup`` to the end of the last step (rank 0's clock), so process start,
DeepSpeed/FSDP setup and W&B's start stay out. Reported per engine: the median time per step with and without the
callback, their ratio, and what the callback's own gradient measurement took per measured step (its timer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "run_sharded.py"


def run_once(engine: str, with_callback: bool, steps: int, every: int, warmup: int, port: int,
             hidden: int, layers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": tmp, "DS_ACCELERATOR": "cpu",
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
               str(SCRIPT), "--engine", engine, "--out", tmp, "--max-steps", str(steps), "--every", str(every),
               "--no-reference", "--hidden", str(hidden), "--layers", str(layers)]
        if not with_callback:
            cmd.append("--no-callback")
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise SystemExit(f"{engine} run failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        res = json.loads((Path(tmp) / "result-rank0.json").read_text())
    t = res["step_times"]
    per_step = (t[-1] - t[warmup - 1]) / (len(t) - warmup)
    return {"per_step": per_step, "grad_calls": res["grad_calls"], "grad_seconds": res["grad_seconds"],
            "on_log_seconds": res.get("on_log_seconds", 0.0), "steps": len(t), "errors": res["errors"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="ddp,fsdp2,zero2,zero3")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10, help="grad_every")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=2, help="pairs of runs (with / without) per engine")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--json", default=None, help="also write the raw numbers here")
    a = ap.parse_args()
    engines = a.engines.split(",")
    raw: dict[str, dict[str, list[dict]]] = {e: {"with": [], "without": []} for e in engines}
    port = 29600 + os.getpid() % 300
    for rep in range(a.reps):
        for engine in engines:
            order = (True, False) if rep % 2 == 0 else (False, True)  # alternated: neither side always goes first
            for with_cb in order:
                port += 1
                r = run_once(engine, with_cb, a.steps, a.every, a.warmup, port, a.hidden, a.layers)
                raw[engine]["with" if with_cb else "without"].append(r)
                print(f"rep {rep} {engine:6s} {'with' if with_cb else 'without':7s} {1000 * r['per_step']:8.1f} "
                      f"ms/step", file=sys.stderr, flush=True)
    print("| engine | ms/step without | ms/step with | ratio (wall) | gradient measurement (ms, per measured step) | "
          "callback's own time / step time |\n|---|---|---|---|---|---|")
    for engine in engines:
        w = statistics.median(r["per_step"] for r in raw[engine]["with"])
        wo = statistics.median(r["per_step"] for r in raw[engine]["without"])
        calls = sum(r["grad_calls"] for r in raw[engine]["with"])
        grad_ms = 1000 * sum(r["grad_seconds"] for r in raw[engine]["with"]) / max(1, calls)
        own = statistics.median((r["grad_seconds"] + r["on_log_seconds"]) / (r["steps"] * r["per_step"])
                                for r in raw[engine]["with"])
        print(f"| {engine} | {1000 * wo:.1f} | {1000 * w:.1f} | {w / wo:.3f} | {grad_ms:.2f} | {100 * own:.1f} % |")
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
