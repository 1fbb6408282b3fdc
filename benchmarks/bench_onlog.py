"""Benchmark: RLClusterCallback's own cost per ``on_log``, replaying a real GRPO log (no training).

``bench_callback.py`` measures the callback inside real training, where a loaded machine's step time
swamps it; this replays the rows of a real TRL GRPO log (``../shared/real-logs``) through ``on_log``
with a W&B offline run active and the shipped alert rules, so the figure is the callback's alone (core,
alert engine, throttled W&B write). Compare two checkouts by running it alternately with each on
``PYTHONPATH``. Not a test: it prints one JSON line.

    python benchmarks/bench_onlog.py --rows 1000
    python benchmarks/bench_onlog.py --rows 1000 --wandb-interval 0   # every row written, as in slow training
    python benchmarks/bench_onlog.py --rows 2000 --parts   # CPU per row: core, alert engine, rest, one W&B write
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from real_logs import real_log

os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off")
LOG = real_log("grpo_trl_kartik_v2_seed2025.json")


def replay(rows: list[dict[str, object]], n: int, tmp: str, **cb_kwargs: object) -> tuple[object, float]:
    """(the callback, CPU µs per on_log): ``n`` rows through ``on_log`` in a fresh W&B offline run."""
    import wandb
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from wandb_rlcluster import RLClusterCallback

    wandb.init(project="rlcluster-bench-onlog")
    targs = TrainingArguments(output_dir=tmp, report_to="none")
    state, control = TrainerState(), TrainerControl()
    state.max_steps, state.is_world_process_zero = n, True
    cb = RLClusterCallback(grad_every=0, attention_every=0, lora_every=0, sample_every=0, **cb_kwargs)
    cb.on_train_begin(targs, state, control)
    cpu0 = time.process_time()
    for i in range(n):
        row = {k: v for k, v in rows[i % len(rows)].items() if k != "step"}
        state.global_step = i + 1
        cb.on_log(targs, state, control, logs=row)
    cpu = (time.process_time() - cpu0) / n * 1e6
    cb.on_train_end(targs, state, control)  # a clean end: the liveness guardian must not report a crash
    wandb.finish()
    return cb, cpu


def parts(rows: list[dict[str, object]], n: int, tmp: str) -> dict[str, float]:
    """CPU µs per row of each piece of on_log's per-step path, measured apart (process time: the figure holds on
    a loaded machine, where wall time does not): the core, the alert engine, one W&B row write, and the rest."""
    from wandb_rlcluster.alerts import AlertEngine, load_config
    from wandb_rlcluster.core import InstrumentCluster

    quiet = {"stall_alert": False, "crash_alert": False, "guardian": False}
    _, no_wandb = replay(rows, n, tmp, log_to_wandb=False, **quiet)
    every, every_row = replay(rows, n, tmp, wandb_min_interval=0.0, **quiet)
    numbered = [{**rows[i % len(rows)], "step": i + 1} for i in range(n)]
    cluster = InstrumentCluster()
    cpu0 = time.process_time()
    for r in numbered:
        cluster.update(r)
    core = (time.process_time() - cpu0) / n * 1e6
    cluster, engine = InstrumentCluster(), AlertEngine(load_config(None), clock=None)
    cpu0 = time.process_time()
    for r in numbered:
        fired = cluster.update(r)
        engine.evaluate(int(r["step"]), r, cluster, fired, cluster.last_updated)
    with_engine = (time.process_time() - cpu0) / n * 1e6
    written = every.sink.rows_logged  # type: ignore[attr-defined]
    return {"on_log_without_wandb_us": no_wandb, "core_us": core, "alert_engine_us": with_engine - core,
            "rest_us": no_wandb - with_engine, "wandb_row_write_us": (every_row - no_wandb) * n / max(1, written),
            "rows": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--log", default=str(LOG), help="a TRL log whose train rows are replayed (cycled)")
    ap.add_argument("--wandb-interval", type=float, default=None,
                    help="RLClusterCallback(wandb_min_interval=...): 0 writes every row to W&B, as training whose "
                         "steps are slower than the default 0.25 s does (default: the callback's own)")
    ap.add_argument("--parts", action="store_true",
                    help="instead: CPU µs per row of the core, the alert engine, the rest of on_log, and one W&B write")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rlcluster-onlog-")
    os.environ["WANDB_DIR"] = tmp

    data = json.loads(Path(args.log).read_text())
    rows = [r for r in (data["log_history"] if isinstance(data, dict) else data) if "loss" in r]
    if args.parts:
        print(json.dumps({k: round(v, 1) for k, v in parts(rows, args.rows, tmp).items()}))
        return
    extra = {} if args.wandb_interval is None else {"wandb_min_interval": args.wandb_interval}
    cb, _ = replay(rows, args.rows, tmp, **extra)
    print(json.dumps({"us_per_on_log": cb.on_log_seconds / cb.on_log_calls * 1e6,  # type: ignore[attr-defined]
                      "calls": cb.on_log_calls, "errors": cb.errors,  # type: ignore[attr-defined]
                      "wandb_rows": cb.sink.rows_logged}))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
