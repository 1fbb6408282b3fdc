"""Three real tiny TRL trainings in one process: what rlcluster says and leaves behind across train() calls.

1. GRPO whose reward function scores in a fork multiprocessing Pool (its ``__exit__`` SIGTERMs the workers, as
   code-execution rewards do): all steps, no alert, nothing left after the clean end.
2. GRPO (same callback) whose reward function raises at step 2; the caller catches it, as a notebook does (IPython
   keeps it in ``sys.last_value``): one crash alert, "ended without finishing", then nothing left running.
3. A retry with a new callback whose first batch fails before any step (on_epoch_begin), not caught: one crash alert
   with that exception (none from the first callback), and the guardian stays silent (the interpreter exited).

Prints one JSON line per phase: ``{"phase": ..., "global_step": ..., "leftovers": {...}}``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
alerts = sys.argv[2]
out.mkdir(parents=True, exist_ok=True)
os.environ.update(WANDB_MODE="offline", WANDB_DIR=str(out), WANDB_SILENT="true", WANDB_DISABLE_GIT="true",
                  WANDB_CONSOLE="off", WANDB_PROJECT="rlcluster-tests")

from run_trainer import snapshot  # noqa: E402 - after the W&B environment
from transformers import TrainerCallback  # noqa: E402

from wandb_rlcluster import RLClusterCallback  # noqa: E402
from wandb_rlcluster.tiny import REWARD_FUNCS, make_trainer  # noqa: E402

PROBES_OFF = {"grad_every": 0, "attention_every": 0, "lora_every": 0, "sample_every": 0}
journal = out / "trainer" / "alerts.jsonl"


def _score(text: str) -> float:
    return float(len(text) % 3)


def pool_reward(completions, **kw):
    texts = [c if isinstance(c, str) else str(c) for c in completions]
    with mp.get_context("fork").Pool(2) as pool:  # __exit__ -> terminate(): SIGTERM to the workers
        return pool.map(_score, texts)


def failing_reward(completions, trainer_state=None, **kw):
    if trainer_state is not None and trainer_state.global_step == 2:
        raise RuntimeError("reward server down (token=abc123secret)")
    return [0.0] * len(completions)


class FirstBatchFails(TrainerCallback):
    def on_epoch_begin(self, args, state, control, **kw):
        raise FileNotFoundError("shard s3://bucket/train-00001.parquet not found")


def crash_alerts() -> int:
    if not journal.exists():
        return 0
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    return sum(1 for r in rows if r.get("type") == "alert" and r.get("rule") == "crash")


def say(phase: str, trainer) -> None:
    print(json.dumps({"phase": phase, "global_step": trainer.state.global_step, "leftovers": snapshot()}), flush=True)


cb = RLClusterCallback(alerts=alerts, **PROBES_OFF)
t = make_trainer("grpo", output_dir=str(out / "trainer"), callbacks=[cb], report_to="wandb", max_steps=4,
                 reward_funcs=[*REWARD_FUNCS, pool_reward], run_name="lifecycle")
t.train()
say("pool", t)

t = make_trainer("grpo", output_dir=str(out / "trainer"), callbacks=[cb], report_to="wandb", max_steps=6,
                 reward_funcs=[*REWARD_FUNCS, failing_reward], run_name="lifecycle")
try:
    t.train()
except RuntimeError as e:
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__  # what IPython does
    del e
start = time.monotonic()
while crash_alerts() < 1 and time.monotonic() - start < 30:
    time.sleep(0.1)
time.sleep(0.5)  # the monitor stops its thread and the guardian right after the alert
say("caught", t)
sys.last_type = sys.last_value = sys.last_traceback = None

cb2 = RLClusterCallback(alerts=alerts, **PROBES_OFF)
t = make_trainer("sft", output_dir=str(out / "trainer"), callbacks=[cb2, FirstBatchFails()], report_to="wandb",
                 max_steps=3, run_name="lifecycle")
print(json.dumps({"phase": "retry"}), flush=True)
t.train()
