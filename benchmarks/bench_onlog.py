"""Benchmark: RLClusterCallback's own cost per ``on_log``, replaying a real GRPO log (no training).

``bench_callback.py`` measures the callback inside real training, where a loaded machine's step time
swamps it; this replays the rows of a real TRL GRPO log (``../shared/real-logs``) through ``on_log``
with a W&B offline run active and the shipped alert rules, so the figure is the callback's alone (core,
alert engine, throttled W&B write). Compare two checkouts by running it alternately with each on
``PYTHONPATH``. Not a test: it prints one JSON line.

    python benchmarks/bench_onlog.py --rows 1000
    python benchmarks/bench_onlog.py --rows 1000 --wandb-interval 0   # every row written, as in slow training
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from real_logs import real_log

os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off")
LOG = real_log("grpo_trl_kartik_v2_seed2025.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--log", default=str(LOG), help="a TRL log whose train rows are replayed (cycled)")
    ap.add_argument("--wandb-interval", type=float, default=None,
                    help="RLClusterCallback(wandb_min_interval=...): 0 writes every row to W&B, as training whose "
                         "steps are slower than the default 0.25 s does (default: the callback's own)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rlcluster-onlog-")
    os.environ["WANDB_DIR"] = tmp

    import wandb
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from wandb_rlcluster import RLClusterCallback

    data = json.loads(Path(args.log).read_text())
    rows = [r for r in (data["log_history"] if isinstance(data, dict) else data) if "loss" in r]
    wandb.init(project="rlcluster-bench-onlog")
    targs = TrainingArguments(output_dir=tmp, report_to="none")
    state, control = TrainerState(), TrainerControl()
    state.max_steps, state.is_world_process_zero = args.rows, True
    extra = {} if args.wandb_interval is None else {"wandb_min_interval": args.wandb_interval}
    cb = RLClusterCallback(grad_every=0, attention_every=0, lora_every=0, sample_every=0, **extra)
    cb.on_train_begin(targs, state, control)
    for i in range(args.rows):
        row = {k: v for k, v in rows[i % len(rows)].items() if k != "step"}
        state.global_step = i + 1
        cb.on_log(targs, state, control, logs=row)
    cb.on_train_end(targs, state, control)  # a clean end: the liveness guardian must not report a crash
    wandb.finish()
    print(json.dumps({"us_per_on_log": cb.on_log_seconds / cb.on_log_calls * 1e6, "calls": cb.on_log_calls,
                      "errors": cb.errors, "wandb_rows": cb.sink.rows_logged}))


if __name__ == "__main__":
    main()
