"""The rows a test writes through a tracker's own library and, the same rows, as JSON Lines: the twin whose
analysis a tracker's copy of the run must equal."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from wandb_rlcluster.analyze import Analysis


def f32(x: float) -> float:
    """The value as TensorBoard keeps it (a 32-bit float, read back by its shortest decimal), so the JSON Lines twin
    holds the very same numbers."""
    import numpy as np

    return float(str(np.float32(x)))


def grpo_rows(seed: int, n: int = 160, drift: bool = True) -> list[dict[str, Any]]:
    """A GRPO-shaped history (TRL's keys with W&B's ``train/`` prefix): KL and length run away after the middle
    when ``drift``, with an eval row every 40 steps and the trainer's end-of-training row."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for s in range(1, n + 1):
        late = drift and s > n // 2
        rows.append({"step": s,
                     "train/loss": f32(0.1 + rng.gauss(0, 0.01)),
                     "train/reward": f32(0.4 + 0.002 * s + rng.gauss(0, 0.03)),
                     "train/reward_std": f32(0.2 + rng.gauss(0, 0.01)),
                     "train/kl": f32(0.01 + (0.003 * (s - n // 2) if late else 0) + abs(rng.gauss(0, 0.002))),
                     "train/entropy": f32(1.2 - (0.005 * (s - n // 2) if late else 0) + rng.gauss(0, 0.01)),
                     "train/completions/mean_length": f32(60 + (1.5 * (s - n // 2) if late else 0) + rng.gauss(0, 2)),
                     "train/rewards/verifier/mean": f32(0.4 + rng.gauss(0, 0.03)),
                     "train/my_score": f32(0.3 + 0.001 * s + rng.gauss(0, 0.02)),
                     "train/epoch": f32(s / n)})
        if s % 40 == 0:
            rows.append({"step": s, "eval/loss": f32(0.2 + rng.gauss(0, 0.01)), "train/epoch": f32(s / n)})
    rows.append({"step": n, "train/train_runtime": f32(123.5), "train/train_loss": f32(0.1), "train/total_flos": 0.0,
                 "train/epoch": 1.0})
    return rows


def write_tensorboard(folder: Path, rows: list[dict[str, Any]]) -> None:
    """Each row through a real SummaryWriter, one ``add_scalar`` per key, as transformers' TensorBoardCallback."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for row in rows:
        for key, value in row.items():
            if key != "step":
                writer.add_scalar(key, value, row["step"])
    writer.close()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def same(a: Analysis, b: Analysis) -> dict[str, Any]:
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d.pop("source")
        d.pop("format")
    assert da == db
    return da
