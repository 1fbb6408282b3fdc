"""Logging to W&B that can never break training.

Every call is guarded: an outage, a finished run or a bad value becomes one
warning (then a counter), never an exception in the training loop. Metrics
go out in their own ``wandb.log`` call keyed by ``train/global_step`` — never
an explicit ``step=`` (W&B silently drops steps lower than the run's current
one), and never by editing ``logs`` (transformers' WandbCallback may already
have sent them).
"""

from __future__ import annotations

import logging
import math
import sys
from collections import Counter
from typing import Any

logger = logging.getLogger("wandb_rlcluster")


class WandbSink:
    """Writes rlcluster metrics to the active W&B run, if there is one."""

    def __init__(self, prefix: str = "rlcluster") -> None:
        self.prefix = prefix
        self.errors: Counter[str] = Counter()
        self._defined_for: object = None
        self.rows_logged = 0

    @staticmethod
    def _run() -> Any:
        wandb = sys.modules.get("wandb")  # never import wandb ourselves: no run without the user's setup
        return getattr(wandb, "run", None) if wandb is not None else None

    @property
    def active(self) -> bool:
        return self._run() is not None

    def _define(self, run: Any) -> None:
        if self._defined_for is run:
            return
        self._defined_for = run
        try:
            run.define_metric("train/global_step")
            run.define_metric(f"{self.prefix}/*", step_metric="train/global_step", step_sync=True)
        except Exception as e:  # noqa: BLE001 - W&B must never break training
            self.error("define_metric", e)

    def log(self, metrics: dict[str, float], global_step: int) -> bool:
        run = self._run()
        if run is None or not metrics:
            return False
        self._define(run)
        clean = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        clean["train/global_step"] = global_step
        try:
            run.log(clean)
        except Exception as e:  # noqa: BLE001
            self.error("log", e)
            return False
        self.rows_logged += 1
        return True

    def log_table(self, key: str, columns: list[str], data: list[list[Any]], global_step: int) -> bool:
        run = self._run()
        wandb = sys.modules.get("wandb")
        if run is None or wandb is None:
            return False
        try:
            run.log({key: wandb.Table(columns=columns, data=data), "train/global_step": global_step})
        except Exception as e:  # noqa: BLE001
            self.error("log_table", e)
            return False
        return True

    def summary(self, values: dict[str, Any]) -> None:
        run = self._run()
        if run is None:
            return
        try:
            for k, v in values.items():
                run.summary[k] = v
        except Exception as e:  # noqa: BLE001
            self.error("summary", e)

    def error(self, what: str, exc: BaseException) -> None:
        self.errors[what] += 1
        if self.errors[what] == 1:
            logger.warning("rlcluster: W&B %s failed (%s: %s); training continues, metrics are still computed "
                           "and findings still reported locally. Further %s errors are counted silently.",
                           what, type(exc).__name__, exc, what)


class TrainerRows:
    """The callback's ``rlcluster/*`` rows in W&B, keyed by ``train/global_step``, thinned by a WriteGate.

    What gets worse is written at once, so is the last row, and a row with values that exist only now (probe output,
    rollout statistics: set on ``layer_norms``, ``rollout_row``, ``samples`` before ``publish``): thinning merges
    rows of running gauges, it never drops a value. An all-clear held back goes out with the next write, which then
    carries every gauge's status."""

    def __init__(self, sink: WandbSink, pipeline: Any, min_interval: float) -> None:
        from ..pipeline import WriteGate

        self.sink = sink
        self.pipeline = pipeline
        self.prefix = sink.prefix
        self.gate = WriteGate(min_interval)
        self.unsent = False  # an all-clear or an info finding not yet in W&B
        self.layer_norms: dict[str, float] = {}
        self.rollout_row: dict[str, float] = {}
        self.samples: list[list[Any]] = []  # the samples table's rows

    def publish(self, step: int, max_steps: int, decision: Any, stop: bool, only_now: bool) -> None:
        urgent = stop or only_now or decision.urgent() or step >= max_steps > 0
        if not self.gate.due(self.pipeline.cluster.statuses(), urgent):
            self.unsent = self.unsent or self.gate.changed or bool(decision.events) or bool(decision.findings)
            return  # the gauges still saw this row; only the W&B write is thinned out
        self.write(step, self.pipeline.cluster.last_updated, decision.events)

    def write(self, step: int, updated: set[str], events: Any = ()) -> None:
        """One row: the derived values of the gauges this row updated, their statuses (every gauge's, when an
        all-clear was held back since the last write), the alert states, probe output, rollout evidence."""
        every_status, self.unsent = self.unsent, False
        p = self.prefix
        metrics = self.pipeline.metrics(p, updated, every_status=every_status, status=int)
        metrics.update({f"{p}/gradients/{k}": v for k, v in self.layer_norms.items()})
        self.layer_norms = {}
        metrics.update({f"{p}/{k}": v for k, v in self.rollout_row.items()})  # raw, for offline analysis of the run
        self.sink.log(metrics, step)
        if self.samples:
            self.sink.log_table(f"{p}/samples/table", ["step", "prompt", "completion", "repetition_rate"],
                                self.samples, step)
            self.samples = []
        shown = [e for e in events if e.evidence]
        if shown:
            from ..core.rollouts import evidence_table

            columns, data = evidence_table(shown)
            self.sink.log_table(f"{p}/rollouts/evidence", columns, data, step)
