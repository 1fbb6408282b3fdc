"""A training loop that is not a Trainer: it replays a real verl console log through real wandb (offline).

Each ``step:N`` row is logged the way verl's tracking backend logs it (``wandb.log(data=metrics, step=N)``),
optionally under OpenRLHF's names instead (``--keys openrlhf``: ``train/<key>`` on ``train/global_step``,
OpenRLHF's ``define_metric`` calls; a replay of its key set with a verl run's numbers, labelled as such).
With ``--watch`` the loop is watched by ``wandb_rlcluster.watch`` and stops when ``should_stop`` turns True
(``--keep-going`` logs every row anyway). Writes ``result.json`` into ``--out``.

Run in its own process: wandb's setup singleton keeps the first ``wandb.init``'s directory.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

# OpenRLHF's names for the quantities a verl row carries (openrlhf/trainer/ppo_trainer.py, ray/ppo_actor.py)
OPENRLHF_NAMES = {
    "critic/score/mean": "train/reward", "critic/rewards/mean": "train/return", "critic/kl": "train/kl",
    "actor/kl_loss": "train/kl", "actor/ppo_kl": "train/ppo_kl", "actor/pg_clipfrac": "train/ppo_clip_ratio",
    "actor/entropy_loss": "train/entropy_loss", "actor/entropy": "train/entropy_loss",
    "actor/pg_loss": "train/policy_loss", "actor/grad_norm": "train/actor_grad_norm",
    "critic/vf_loss": "train/critic_loss", "response_length/mean": "train/response_length",
    "actor/lr": "train/actor_lr",
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--keys", choices=("verl", "openrlhf"), default="verl")
    ap.add_argument("--watch", action="store_true")
    ap.add_argument("--alerts", default=None)
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--min-interval", type=float, default=0.25,
                    help="watch()'s W&B write interval (0: every row's rlcluster/* values are written)")
    ap.add_argument("--module-log", action="store_true", help="log with wandb.log instead of run.log")
    ap.add_argument("--plugin", action="store_true", help="import wandb_rlcluster.verl_plugin before wandb.init")
    args = ap.parse_args()
    out = Path(args.out)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    if not os.environ.get("PYTHONPATH"):  # the package under test: the caller's PYTHONPATH (test-compiled), else src
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from wandb_rlcluster.readers.verl import parse_verl_log

    raw = Path(args.log).read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", errors="replace")
    rows, _ = parse_verl_log(text)
    if args.plugin:  # what VERL_USE_EXTERNAL_MODULES=wandb_rlcluster.verl_plugin does when verl is imported
        import importlib

        importlib.import_module("wandb_rlcluster.verl_plugin")
    run = wandb.init(project="replay", dir=str(out), config={"replayed": os.path.basename(args.log)})
    if args.keys == "openrlhf":
        run.define_metric("train/global_step")
        run.define_metric("train/*", step_metric="train/global_step", step_sync=True)
    watcher = None
    stops: list[str] = []
    if args.plugin:
        from wandb_rlcluster.live.watch import watchers

        watcher = watchers()[0]
    if args.watch:
        from wandb_rlcluster import watch

        watcher = watch(run, alerts=args.alerts, on_stop=lambda f: stops.append(f"{f.gauge}/{f.rule}@{f.step}"),
                        min_interval=args.min_interval)
    logged: list[dict[str, object]] = []
    stop_step = None
    t0 = time.perf_counter()
    for row in rows:
        step = int(row.pop("step"))  # type: ignore[call-overload]
        if len(row) < 2:
            continue  # a bare step line
        if args.keys == "openrlhf":
            data: dict[str, object] = {OPENRLHF_NAMES[k]: v for k, v in row.items() if k in OPENRLHF_NAMES}
            data["train/global_step"] = step
            sent = dict(data)
            (wandb.log if args.module_log else run.log)(data)
        else:
            data = dict(row)
            sent = dict(data)
            (wandb.log if args.module_log else run.log)(data, step=step)
        assert data == sent, "watch changed the caller's dict"
        logged.append({"step": step, **sent})
        if watcher is not None and watcher.should_stop and stop_step is None:
            stop_step = step
            if not args.keep_going:
                break
    loop_seconds = time.perf_counter() - t0
    if watcher is not None:
        watcher.close()
    run_dir = Path(run.settings.sync_dir)
    run.finish()
    result = {"run_dir": str(run_dir), "rows": len(logged), "stop_step": stop_step, "on_stop": stops,
              "logged": logged, "loop_seconds": loop_seconds,
              "watch_rows": watcher.rows if watcher else 0, "watch_seconds": watcher.seconds if watcher else 0.0,
              "verdict": watcher.verdict() if watcher else None}
    (out / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
