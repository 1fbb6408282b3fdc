"""A real tiny TRL GRPO run logging to the trackers named (``report_to``), and every row it logged as JSON Lines.

The JSON Lines twin is written from ``on_log`` (the dicts the Trainer hands every reporter, with the step), so a test
can hold a tracker's copy of the run against the rows themselves. Run in its own process: trackio reads its
folder (``TRACKIO_DIR``) once, at import.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import TrainerCallback

from wandb_rlcluster.tiny import make_trainer


class Twin(TrainerCallback):
    """Writes each logged dict as a JSON line, with the step the reporters log it at."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        if state.is_world_process_zero and logs:
            row = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
            with self.path.open("a") as fh:
                fh.write(json.dumps({**row, "step": state.global_step}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--report-to", nargs="+", required=True)
    ap.add_argument("--max-steps", type=int, default=12)
    ap.add_argument("--kind", default="grpo_kl")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    extra = {"project": "rlcluster-test"} if "trackio" in a.report_to else {}
    trainer = make_trainer(a.kind, output_dir=out / "trainer", report_to=a.report_to, max_steps=a.max_steps,
                           run_name="tiny-grpo", callbacks=[Twin(out / "twin.jsonl")], **extra)
    trainer.train()
    (out / "done.json").write_text(json.dumps({"max_steps": a.max_steps}))


if __name__ == "__main__":
    main()
