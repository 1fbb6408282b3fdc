"""``rlcluster analyze wandb:ENTITY/PROJECT/RUN_ID`` against a loopback W&B server, timed against the same rows in a
local JSON Lines file.

The target (issue 48): a 10k-row run read from the server in at most twice the time of the same rows from a JSON Lines
file, plus the server's own response time. The server (``wandb_loopback.py``) answers what ``wandb.Api()`` and its
wandb-core history scan really send: the history's Parquet export and the live tail by pages (10% of the rows live,
2000-step pages). Each side is timed end to end through ``analyze_path`` (read and analyse), best of ``--repeat``; the
W&B side includes starting wandb's service process, as a user's command does.

    python benchmarks/bench_wandb_path.py [--rows 10000] [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from wandb_rlcluster.analyze import analyze_path

from wandb_loopback import API_KEY, ENTITY, LoopbackRun, WandbLoopback


def rows(n: int, seed: int = 0) -> list[dict[str, object]]:
    """A GRPO history as W&B holds it (``train/`` keys, ``train/global_step``, ``_step``)."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for i in range(n):
        late = i > n // 2
        out.append({"train/loss": 0.1 + rng.gauss(0, 0.01), "train/reward": 0.4 + i / n + rng.gauss(0, 0.03),
                    "train/reward_std": 0.2 + rng.gauss(0, 0.01),
                    "train/kl": 0.01 + (0.2 * (i - n / 2) / n if late else 0) + abs(rng.gauss(0, 0.002)),
                    "train/entropy": 1.2 + rng.gauss(0, 0.01), "train/grad_norm": 1 + abs(rng.gauss(0, 0.1)),
                    "train/learning_rate": 1e-6, "train/completions/mean_length": 60 + rng.gauss(0, 2),
                    "train/epoch": i / n, "train/global_step": i + 1, "_step": i})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args()
    history = rows(a.rows)
    config = {"max_steps": a.rows, "scale_rewards": "group"}
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "run.jsonl"
        local.write_text("".join(json.dumps(r) + "\n" for r in history))
        os.environ["WANDB_CACHE_DIR"] = str(Path(tmp) / "cache")
        file_s, wandb_s, served = [], [], []
        with WandbLoopback([LoopbackRun("bench", "run10k", history, config=config)]) as server:
            os.environ.update(WANDB_BASE_URL=server.url, WANDB_API_KEY=API_KEY)
            for _ in range(a.repeat):
                t = time.perf_counter()
                from_file = analyze_path(str(local))
                file_s.append(time.perf_counter() - t)
                before = server.served_s
                t = time.perf_counter()
                from_server = analyze_path(f"wandb:{ENTITY}/bench/run10k")
                wandb_s.append(time.perf_counter() - t)
                served.append(server.served_s - before)
            ops = list(server.operations)
    assert from_server.cluster.rows == from_file.cluster.rows == a.rows
    best = min(range(a.repeat), key=lambda i: wandb_s[i])
    budget = 2 * min(file_s) + served[best]
    result = {"rows": a.rows, "jsonl_s": round(min(file_s), 3), "wandb_s": round(wandb_s[best], 3),
              "server_s": round(served[best], 3), "budget_s": round(budget, 3),
              "within": wandb_s[best] <= budget, "requests_per_read": {op: ops.count(op) // a.repeat
                                                                       for op in dict.fromkeys(ops)},
              "same_findings": [(f.gauge, f.rule, f.step) for f in from_server.cluster.findings]
              == [(f.gauge, f.rule, f.step) for f in from_file.cluster.findings]}
    print(json.dumps(result, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
