"""One logged row at a time through the gauges and the alert rules, for loops that are not a transformers Trainer.

The callback does this inside ``on_log``; ``watch()`` (in-process, any loop that logs to W&B) and
``rlcluster watch`` (a sidecar following a run's ``.wandb`` file) do it here, with the same cluster, the same
alert engine and the same journal and channels, so the three decide alike on the same rows.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .alerts import AlertConfig, AlertEngine, AlertEvent, load_config
from .alerts.config import validate_config
from .alerts.engine import stop_finding
from .alerts.notify import Notifier
from .core import InstrumentCluster
from .core.cluster import resolve_warn_sooner
from .core.findings import STATUSES, Finding, Level
from .core.text import clean_text

logger = logging.getLogger("wandb_rlcluster")



def load_alerts(alerts: str | os.PathLike[str] | AlertConfig | bool | None) -> AlertConfig | None:
    """The alert rules as the callback takes them: None the shipped file, a path, an AlertConfig, False none.
    A bad file raises ConfigError (file, line and fix) here, before the first row."""
    if alerts is False:
        return None
    if isinstance(alerts, AlertConfig):
        config = validate_config(alerts)
    else:
        config = load_config(None if alerts in (None, True) else os.fspath(alerts))  # type: ignore[arg-type]
    for w in config.warnings:
        logger.warning("rlcluster: %s", w)
    return config


@dataclass
class Decision:
    """What one row did: the findings it fired, the alert events it produced, and whether it stops the run."""

    step: int
    findings: list[Finding] = field(default_factory=list)
    events: list[AlertEvent] = field(default_factory=list)
    stop: bool = False


class RowMonitor:
    """The cluster, the alert engine and the notifier (journal and channels) over a stream of raw rows.

    Args:
        framework: ``trl``, ``verl``, ``openrlhf``, or None to detect it from the first row's keys.
        alerts: as the callback's (None: the shipped ``alerts.yaml``; False: no rules, core stop findings stop).
        journal: where alerts are journaled (``alerts.jsonl``); None keeps no journal.
        stop_on: ``"stop"``: a stop-severity alert stops; ``"warn"``: warnings too; None: never.
        use_wandb: send firing alerts as ``wandb.alert`` on the active run.
    """

    def __init__(self, *, framework: str | None = None, alerts: Any = None, trainer: str | None = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None, journal: str | os.PathLike[str] | None = None,
                 stop_on: str | None = "stop", use_wandb: bool = True, warn_sooner: int | None = None,
                 max_steps: int = 0, channel_wait: float = 2.0, clock: Callable[[], float] | None = None,
                 run_name: str | None = None) -> None:
        if stop_on not in (None, "stop", "warn"):
            raise ValueError(f"stop_on must be 'stop', 'warn' or None, not {stop_on!r}")
        self.alert_config = load_alerts(alerts)
        gauge_params = {k: dict(v) for k, v in (self.alert_config.gauge_params if self.alert_config else {}).items()}
        for gid, ps in (params or {}).items():
            gauge_params.setdefault(gid, {}).update(ps)
        self.warn_sooner = resolve_warn_sooner(warn_sooner, self.alert_config)
        self.stop_on = stop_on
        self.trainer = trainer
        self.params = gauge_params or None
        self.max_steps = max_steps
        self.framework = framework
        self._auto = framework is None  # detected from the rows: may be corrected while nothing was recognised
        self.cluster: InstrumentCluster | None = None
        if framework is not None:
            self._build(framework)  # a bad name or parameter fails here, before the first row
        kwargs: dict[str, Any] = {"warn_sooner": self.warn_sooner}
        if clock is not None:
            kwargs["clock"] = clock
        self.engine = AlertEngine(self.alert_config, **kwargs) if self.alert_config else None
        if self.engine is not None and run_name:
            self.engine.fields["run_name"] = run_name
        self.notifier = (Notifier(self.alert_config, journal, use_wandb=use_wandb, close_wait=channel_wait)
                         if self.alert_config is not None else None)
        self.stop_finding: Finding | None = None
        self.stopped_at: int | None = None
        self.alert_events: list[AlertEvent] = []
        self.errors = 0
        self.closed = False

    def _build(self, framework: str) -> None:
        self.framework = framework
        self.cluster = InstrumentCluster(trainer=self.trainer, params=self.params, detect_rows=1,
                                         warn_sooner=self.warn_sooner, framework=framework, max_steps=self.max_steps)

    def feed(self, raw: Mapping[str, Any], step: int | None = None) -> Decision:
        """One logged row (any key spelling of the framework); never raises."""
        try:
            if self.cluster is None or (self._auto and not self.cluster.recognised()):
                from .core.frameworks import detect_framework

                # the first dicts a loop logs may be config or bookkeeping: until a row was recognised, a row that
                # names a framework decides it
                found = detect_framework(raw.keys())
                if self.cluster is None or (found != "trl" and found != self.framework):
                    self._build(found)
            cluster = self.cluster
            assert cluster is not None
            row = dict(raw)
            if step is not None:
                row["step"] = step
            fired = cluster.update(row)
            decision = Decision(step=cluster.last_step, findings=fired)
            if self.engine is not None and cluster.last_row is not None:
                events = self.engine.evaluate(cluster.last_step, row, cluster, fired, cluster.last_updated)
                decision.events = events
                self.alert_events.extend(e for e in events if e.kind == "firing")
                if self.stop_finding is None:
                    self.stop_finding = stop_finding(self.stop_on, events, fired)
                    decision.stop = self.stop_finding is not None
                if self.notifier is not None and events:
                    self.notifier.handle(events)
            elif self.engine is None:
                if self.stop_finding is None:
                    self.stop_finding = stop_finding(self.stop_on, None, fired)
                    decision.stop = self.stop_finding is not None
                for f in fired:
                    if f.severity != "info":
                        logger.warning("rlcluster step %d %s %s/%s: %s", f.step, f.severity.upper(), f.gauge, f.rule,
                                       f.message)
            if decision.stop:
                self.stopped_at = decision.step
            return decision
        except Exception as e:  # noqa: BLE001 - never break the user's loop
            self.error("row", e)
            return Decision(step=step or 0)

    def finish(self) -> list[AlertEvent]:
        """End of the run: end-of-run findings through the rules, the channels given their bounded wait."""
        if self.closed:
            return []
        self.closed = True
        events: list[AlertEvent] = []
        try:
            if self.cluster is not None:
                final = self.cluster.finalize()
                if self.engine is not None and final:
                    events = self.engine.evaluate(self.cluster.last_step, {}, self.cluster, final, findings_only=True)
                    self.alert_events.extend(e for e in events if e.kind == "firing")
                    if self.notifier is not None and events:
                        self.notifier.handle(events)
        except Exception as e:  # noqa: BLE001
            self.error("end of run", e)
        if self.notifier is not None:
            try:
                self.notifier.close()
            except Exception as e:  # noqa: BLE001
                self.error("alert channels", e)
        return events

    def verdict(self) -> str:
        """The worst alert that fired (with rules), else the worst finding."""
        if self.engine is None:
            return self.cluster.verdict() if self.cluster is not None else "ok"
        rank = max((Level.of(e.severity) for e in self.alert_events), default=0)
        return STATUSES[rank]

    def metrics(self, prefix: str = "rlcluster", updated: set[str] | None = None) -> dict[str, float]:
        """``<prefix>/<gauge>/<name>`` for what the last row updated, every gauge's status, the alert states."""
        out: dict[str, float] = {}
        cluster = self.cluster
        if cluster is None:
            return out
        updated = cluster.last_updated if updated is None else updated
        for gid, g in cluster.gauges.items():
            if gid in updated:
                for k, v in g.derived.items():
                    if isinstance(v, float) and math.isfinite(v):
                        out[f"{prefix}/{gid}/{k}"] = v
            if g.rows_seen and g.applies():
                out[f"{prefix}/{gid}/status"] = float(Level.of(g.status))
        out[f"{prefix}/findings"] = float(len(cluster.findings))
        if self.engine is not None:
            for name, st in self.engine.states().items():
                out[f"{prefix}/alerts/{name}"] = float(st)
        return out

    def error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        if self.errors <= 5:
            logger.warning("rlcluster: %s failed (%s: %s); the run continues", where, type(exc).__name__,
                           clean_text(exc, 300))


def default_journal(run: Any) -> Path:
    """``alerts.jsonl`` beside the run's W&B files (``wandb/run-*/``), else in the working directory."""
    d = getattr(getattr(run, "settings", None), "sync_dir", None) or getattr(run, "dir", None)
    if d:
        p = Path(d)
        return (p.parent if p.name == "files" else p) / "alerts.jsonl"
    return Path.cwd() / "alerts.jsonl"
