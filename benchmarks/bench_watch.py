"""Benchmark: what ``watch(run)`` adds per ``run.log``, against what RLClusterCallback adds per ``on_log``.

The same rows of a real TRL GRPO log (``../shared/real-logs``) go, in one process and alternated round by round
(fresh W&B offline runs, so a warm cache favours no side):

* ``plain``: ``run.log(row)`` with nothing attached (the loop's own cost),
* ``watch``: ``run.log(row)`` on a run ``watch()``-ed with the shipped alert rules; what it adds is
  ``watch - plain`` per row (our gauges, rules and the rlcluster/* keys riding in the same W&B call),
* ``callback``: what a Trainer with ``report_to="wandb"`` does per row: WandbCallback's ``run.log(row)``, then
  ``RLClusterCallback.on_log`` (core, rules, its throttled W&B write); it adds ``callback - plain`` per row,

and a real verl log's rows through ``watch`` (the verl profile) for the same difference. Times are this process's
CPU time (``time.process_time``) per row: W&B's own work happens in its wandb-core process, and on a shared, busy
machine wall time swings by 2-3x between identical rounds. Not a test: it prints JSON lines, then a summary line.

    python benchmarks/bench_watch.py --rows 400 --rounds 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from real_logs import real_log

os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off")
HERE = Path(__file__).resolve().parent
TRL_LOG = real_log("grpo_trl_kartik_v2_seed2025.json")
VERL_LOG = real_log("verl", "eric-haibin-lin__gsm8k_Qwen2.5-0.5B-ppo-resp512.log.gz")


def trl_rows(n: int) -> list[dict[str, object]]:
    data = json.loads(TRL_LOG.read_text())
    rows = [r for r in (data["log_history"] if isinstance(data, dict) else data) if "loss" in r]
    return [{k: v for k, v in rows[i % len(rows)].items() if k != "step"} for i in range(n)]


def verl_rows(n: int) -> list[tuple[int, dict[str, object]]]:
    from wandb_rlcluster.readers.verl import parse_verl_log

    rows, _ = parse_verl_log(gzip.decompress(VERL_LOG.read_bytes()).decode())
    rows = [r for r in rows if len(r) > 3]
    out = []
    for i in range(n):
        r = dict(rows[i % len(rows)])
        r.pop("step")
        out.append((i + 1, r))
    return out


def time_loop(rows: list[dict[str, object]], watched: bool, framework: str | None = None) -> float:
    import wandb

    from wandb_rlcluster import watch

    run = wandb.init(project="rlcluster-bench-watch")
    w = watch(run, framework=framework) if watched else None
    t0 = time.process_time()
    for i, row in enumerate(rows):
        run.log(row, step=i + 1)
    dt = time.process_time() - t0
    if w is not None:
        OWN.append(w.seconds / w.rows * 1e6)  # watch's own wall time per row, without W&B's call
        w.close()
    run.finish()
    return dt / len(rows) * 1e6


OWN: list[float] = []


def time_callback(rows: list[dict[str, object]], tmp: str) -> float:
    """Per row, what a Trainer with report_to="wandb" does: WandbCallback's ``run.log(row)``, then our ``on_log``."""
    import wandb
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from wandb_rlcluster import RLClusterCallback

    run = wandb.init(project="rlcluster-bench-watch")
    targs = TrainingArguments(output_dir=tmp, report_to="none")
    state, control = TrainerState(), TrainerControl()
    state.max_steps, state.is_world_process_zero = len(rows), True
    cb = RLClusterCallback(grad_every=0, attention_every=0, lora_every=0, sample_every=0)
    cb.on_train_begin(targs, state, control)
    rows = [dict(r) for r in rows]
    t0 = time.process_time()
    for i, row in enumerate(rows):
        state.global_step = i + 1
        run.log(row, step=i + 1)
        cb.on_log(targs, state, control, logs=row)
    dt = time.process_time() - t0
    cb.on_train_end(targs, state, control)
    wandb.finish()
    return dt / len(rows) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rlcluster-watch-bench-")
    os.environ["WANDB_DIR"] = tmp
    trl = trl_rows(args.rows)
    verl = verl_rows(args.rows)
    verl_dicts = [r for _, r in verl]
    res: dict[str, list[float]] = {k: [] for k in ("plain", "watch", "callback", "verl_plain", "verl_watch")}
    order = ["plain", "watch", "callback", "verl_plain", "verl_watch"]
    for rnd in range(args.rounds):
        for name in order[rnd % len(order):] + order[:rnd % len(order)]:  # rotate: no side always goes first
            if name == "plain":
                v = time_loop(trl, watched=False)
            elif name == "watch":
                v = time_loop(trl, watched=True, framework="trl")
            elif name == "callback":
                v = time_callback(trl, tmp)
            elif name == "verl_plain":
                v = time_loop(verl_dicts, watched=False)
            else:
                v = time_loop(verl_dicts, watched=True, framework="verl")
            res[name].append(v)
            print(json.dumps({"round": rnd + 1, "mode": name, "us_per_row": round(v, 1)}), flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    added = med["watch"] - med["plain"]
    added_cb = med["callback"] - med["plain"]
    added_verl = med["verl_watch"] - med["verl_plain"]
    print(json.dumps({
        "rows": args.rows, "rounds": args.rounds, "median_us": {k: round(v, 1) for k, v in med.items()},
        "watch_adds_us_per_run_log_trl": round(added, 1), "watch_adds_us_per_run_log_verl": round(added_verl, 1),
        "callback_adds_us_per_on_log": round(added_cb, 1),
        "watch_own_us_per_row_median": round(statistics.median(OWN), 1) if OWN else None,
        "ratio_watch_over_callback": round(added / added_cb, 3) if added_cb > 0 else None,
        "python": sys.version.split()[0], "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
