"""Runs rlwatch on logged rows through its own entry points; executed by rlwatch's own venv's Python, not ours.

Usage: ``python peer_rlwatch.py OUT.json LOG1.jsonl:verl LOG2.jsonl:trl ...``. Each JSONL file holds the rows our
reader read from one real log (one dict a line). A verl log's rows go through rlwatch's verl tracking backend
(``RLWatchVerLTracker.log(data, step)``, what verl's ``Tracking`` calls); every other log's rows through its
TRL ``TrainerCallback.on_log`` (what a HF/TRL Trainer calls), with ``state.global_step`` set to the row's step.
Writes ``{log: [{detector, severity, step}]}`` for the alerts rlwatch sent (after its own cooldown and cap).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace


def run_one(path: str, route: str, log_dir: str) -> list[dict[str, object]]:
    from rlwatch.config import RLWatchConfig, StorageConfig
    from rlwatch.core import RLWatch, _build_trl_callback
    from rlwatch.integrations.verl_tracking import RLWatchVerLTracker

    config = RLWatchConfig(run_id=Path(path).stem, framework="manual", storage=StorageConfig(log_dir=log_dir))
    monitor = RLWatch(config)
    monitor.start()
    sent: list[dict[str, object]] = []
    original = monitor.log_step

    def recording_log_step(step: int, **metrics: object) -> list[object]:
        alerts = original(step, **metrics)
        sent.extend({"detector": a.detector, "severity": a.severity, "step": a.step} for a in alerts)
        return alerts

    monitor.log_step = recording_log_step  # type: ignore[method-assign]
    verl = RLWatchVerLTracker(monitor) if route == "verl" else None
    callback = None if verl else _build_trl_callback(monitor)()
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            row = json.loads(line)
            step = row.get("step", i)
            step = int(step) if isinstance(step, (int, float)) and step == step else i
            data = {k: v for k, v in row.items() if k != "step"}
            if verl is not None:
                verl.log(data, step)
            else:
                callback.on_log(None, SimpleNamespace(global_step=step), None, logs=data)
    monitor.stop()
    return sent


def main(argv: list[str]) -> int:
    logging.disable(logging.CRITICAL)  # rlwatch prints each alert; the caller reads the JSON
    out, specs = argv[0], argv[1:]
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="rlwatch-bench-") as log_dir:
        for spec in specs:
            path, _, route = spec.rpartition(":")
            try:
                results[path] = run_one(path, route, log_dir)
            except Exception as exc:  # noqa: BLE001 - a peer failing on one log is a result, not a crash of the benchmark
                results[path] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    Path(out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
