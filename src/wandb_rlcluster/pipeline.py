"""The one row pipeline: raw rows -> gauges -> alert states -> journal / channels, and the values for W&B.

Every live entry point sits on it: the TRL callback (``callback.py``), ``watch(run)`` (``live/watch.py``), the
``rlcluster watch`` sidecar (``sidecar.py``) and the verl plugin (``watch`` on every run verl starts). They differ
only in where rows come from and where the ``rlcluster/*`` values go, so the same rows are decided alike.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .alerts import AlertConfig, AlertEngine, AlertEvent, load_config
from .alerts.config import validate_config
from .alerts.engine import stop_finding
from .alerts.notify import Notifier
from .core import InstrumentCluster
from .core.cluster import RunSettings, resolve_warn_sooner
from .core.findings import Finding
from .core.keymap import KeyMap, merge_keys
from .core.text import clean_text

logger = logging.getLogger("wandb_rlcluster")

STATUS_CODE = {"ok": 0, "warn": 1, "stop": 2}

Evidence = Callable[[list[AlertEvent]], None]
"""Adds example completions to the events of a row before they are journaled and sent (the callback's rollouts)."""


def load_alerts(alerts: str | os.PathLike[str] | AlertConfig | Mapping[str, Any] | bool | None) -> AlertConfig | None:
    """The alert rules: None the shipped file, a path, an AlertConfig, the dict a checkpoint stored, False none.
    A bad file raises ConfigError (file, line and fix) here, before the first row."""
    if alerts is False:
        return None
    if isinstance(alerts, AlertConfig):  # the same checks as a file: a bad rule or channel fails here
        config = validate_config(alerts)
    elif isinstance(alerts, Mapping):  # rules stored in a checkpoint by the callback's state()
        config = AlertConfig.from_dict(dict(alerts))
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

    def urgent(self) -> bool:
        """Something got worse on this row: a stop, an alert firing, a warn/stop finding (written to W&B at once)."""
        return (self.stop or any(e.kind == "firing" for e in self.events)
                or any(f.severity != "info" for f in self.findings))


class Pipeline:
    """The cluster, the alert engine and the notifier (journal and channels) over a stream of raw rows.

    Args:
        framework: ``trl``, ``verl``, ``openrlhf``, or None to detect it from the first row's keys.
        alerts: as :func:`load_alerts` (None: the shipped ``alerts.yaml``; False: no rules, core stop findings stop).
        journal: where alerts are journaled (``alerts.jsonl``); None keeps no journal.
        notify: build the notifier now (False: :meth:`open_notifier` builds it later, e.g. on the main process only).
        stop_on: ``"stop"``: a stop-severity alert stops; ``"warn"``: warnings too; None: never.
        use_wandb: send firing alerts as ``wandb.alert`` on the active run.
        detect_rows: rows the cluster reads before it settles the trainer family (``InstrumentCluster``).
        continues: what the error warnings say goes on regardless (``the run``, ``training``).
        rules_on_empty_rows: evaluate the rules also on a row that holds no metric (the callback's every ``on_log``);
            False evaluates them only on rows the gauges read.
        keys: which logged key is what, for a custom loop (``{"reward": "reward/g", "gold": "reward/f"}``), over
            the alert file's ``keys:`` (``core/keymap.py``).
    """

    def __init__(self, *, framework: str | None = None, alerts: Any = None, trainer: str | None = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None, journal: str | os.PathLike[str] | None = None,
                 notify: bool = True, stop_on: str | None = "stop", use_wandb: bool = True,
                 warn_sooner: int | None = None, max_steps: int = 0, channel_wait: float = 2.0,
                 clock: Callable[[], float] | None = None, run_name: str | None = None, detect_rows: int = 1,
                 continues: str = "the run continues", rules_on_empty_rows: bool = False,
                 keys: Mapping[str, Any] | None = None) -> None:
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
        self.keys = KeyMap(merge_keys(getattr(self.alert_config, "keys", None), keys))  # a bad one fails here
        self.max_steps = max_steps
        self.detect_rows = detect_rows
        self.framework = framework
        self.continues = continues
        self.rules_on_empty_rows = rules_on_empty_rows
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
        self.notifier: Notifier | None = None
        if notify:
            self.open_notifier(journal, use_wandb=use_wandb, close_wait=channel_wait)
        self.stop_finding: Finding | None = None
        self.stopped_at: int | None = None
        self.alert_events: list[AlertEvent] = []
        self.errors = 0
        self.closed = False

    def _build(self, framework: str) -> None:
        self.framework = framework
        self.settings = RunSettings.resolve(trainer=self.trainer, params=self.params, detect_rows=self.detect_rows,
                                            warn_sooner=self.warn_sooner, framework=framework,
                                            max_steps=self.max_steps, keys=self.keys)
        self.cluster = InstrumentCluster(settings=self.settings)

    def name_run(self, run: Any, run_name: str | None = None) -> None:
        """The run's name, URL and project in every alert's text (``run``: the W&B run, or None)."""
        if self.engine is None:
            return
        if run is not None:
            self.engine.fields.update(run_name=getattr(run, "name", None) or run_name or "this run",
                                      run_url=getattr(run, "url", None) or "",
                                      project=getattr(run, "project", None) or "")
        elif run_name:
            self.engine.fields["run_name"] = run_name

    def open_notifier(self, journal: str | os.PathLike[str] | None, *, use_wandb: bool = True,
                      close_wait: float = 2.0) -> Notifier | None:
        """The journal and the channels of the alert file (none without rules)."""
        if self.alert_config is not None:
            self.notifier = Notifier(self.alert_config, journal, use_wandb=use_wandb, close_wait=close_wait)
            if self.engine is not None:  # the same dict: name_run's later updates reach the channels' messages
                self.notifier.run_fields = self.engine.fields
        return self.notifier

    def feed(self, raw: Mapping[str, Any], step: int | None = None, evidence: Evidence | None = None) -> Decision:
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
                step = int(step)  # a loop's step may be numpy's integer; the core (compiled, too) counts in ints
                row["step"] = step
            fired = cluster.update(row)
            decision = Decision(step=cluster.last_step, findings=fired)
            if self.engine is not None:
                if cluster.last_row is not None or self.rules_on_empty_rows:
                    at = cluster.last_step if step is None else step  # a row without metrics: still its step
                    decision.events = self._evaluate(at, row, fired, evidence)
                    if self.stop_finding is None:
                        self.stop_finding = stop_finding(self.stop_on, decision.events, fired)
                        decision.stop = self.stop_finding is not None
            else:
                if self.stop_finding is None:
                    self.stop_finding = stop_finding(self.stop_on, None, fired)
                    decision.stop = self.stop_finding is not None
                log_findings(fired)
            if decision.stop:
                self.stopped_at = decision.step
            return decision
        except Exception as e:  # noqa: BLE001 - never break the user's loop
            self.error("row", e)
            return Decision(step=step or 0)

    def _evaluate(self, step: int, row: Mapping[str, Any], fired: list[Finding], evidence: Evidence | None,
                  findings_only: bool = False) -> list[AlertEvent]:
        """The rules over this row's findings and gauges; firing alerts kept, journaled and sent."""
        assert self.engine is not None and self.cluster is not None
        if findings_only:
            events = self.engine.evaluate(step, row, self.cluster, fired, findings_only=True)
        else:
            events = self.engine.evaluate(step, row, self.cluster, fired, self.cluster.last_updated)
        if evidence is not None and events:
            try:  # the alert goes out without its examples rather than not at all
                evidence(events)
            except Exception as e:  # noqa: BLE001
                self.error("rollout evidence", e)
        self.alert_events.extend(e for e in events if e.kind == "firing")
        if self.notifier is not None and events:
            self.notifier.handle(events)
        return events

    def end(self, evidence: Evidence | None = None) -> list[AlertEvent]:
        """End of the run: the end-of-run findings (checks, warnings still building) through the rules, or to the
        log without rules. The channels stay open (:meth:`close`)."""
        events: list[AlertEvent] = []
        try:
            if self.cluster is not None:
                final = self.cluster.finalize()
                if self.engine is not None:
                    if final:
                        events = self._evaluate(self.cluster.last_step, {}, final, evidence, findings_only=True)
                else:
                    log_findings(final)
        except Exception as e:  # noqa: BLE001
            self.error("end of run", e)
        return events

    def close(self, wait: float | None = None) -> None:
        """The channels given their bounded wait (``channel_wait`` when None)."""
        if self.notifier is not None:
            try:
                if wait is None:
                    self.notifier.close()
                else:
                    self.notifier.close(wait)
            except Exception as e:  # noqa: BLE001
                self.error("alert channels", e)

    def finish(self) -> list[AlertEvent]:
        """:meth:`end` then :meth:`close`, once."""
        if self.closed:
            return []
        self.closed = True
        events = self.end()
        self.close()
        return events

    def verdict(self) -> str:
        """The worst alert that fired (with rules), else the worst finding."""
        if self.engine is None:
            return self.cluster.verdict() if self.cluster is not None else "ok"
        rank = max((STATUS_CODE[e.severity] for e in self.alert_events if e.severity in STATUS_CODE), default=0)
        return ("ok", "warn", "stop")[rank]

    def metrics(self, prefix: str = "rlcluster", updated: set[str] | None = None, *, every_status: bool = True,
                status: Callable[[int], float] = float) -> dict[str, float]:
        """``<prefix>/<gauge>/<name>`` for what the last row updated, the status of those gauges (of every gauge that
        has seen a row with ``every_status``), the count of findings and the alert states (0 inactive, 1 pending,
        2 firing: an alert's state is itself a series)."""
        out: dict[str, float] = {}
        cluster = self.cluster
        if cluster is None:
            return out
        updated = cluster.last_updated if updated is None else updated
        for gid, g in cluster.gauges.items():
            if gid in updated:  # only what this row updated: no stale repeats
                for k, v in g.derived.items():
                    if isinstance(v, float) and math.isfinite(v):
                        out[f"{prefix}/{gid}/{k}"] = v
            elif not (every_status and g.rows_seen):
                continue
            if g.applies():
                out[f"{prefix}/{gid}/status"] = status(STATUS_CODE.get(g.status, 0))
        out[f"{prefix}/findings"] = float(len(cluster.findings))
        if self.engine is not None:
            for name, st in self.engine.states().items():
                out[f"{prefix}/alerts/{name}"] = float(st)
        return out

    def error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        if self.errors <= 5:
            logger.warning("rlcluster: %s failed (%s: %s); %s", where, type(exc).__name__, clean_text(exc, 300),
                           self.continues)


class WriteGate:
    """When the ``rlcluster/*`` values of a row go to W&B (a log call costs ~0.2-0.6 ms): every ``min_interval``
    seconds, and at once on a row where something got worse (a gauge's status rose, or what the caller calls urgent).
    What gets better goes out with the next row the interval lets through; the gauges saw every row either way."""

    def __init__(self, min_interval: float) -> None:
        self.min_interval = float(min_interval)
        self.last_write = -1e18
        self.statuses: dict[str, str] = {}
        self.changed = False  # the statuses differ from the previous row's

    def due(self, statuses: dict[str, str], urgent: bool) -> bool:
        now = time.perf_counter()
        last, self.statuses = self.statuses, statuses
        self.changed = statuses != last
        worse = self.changed and any(STATUS_CODE.get(st, 0) > STATUS_CODE.get(last.get(gid, "ok"), 0)
                                     for gid, st in statuses.items())
        if not (urgent or worse or now - self.last_write >= self.min_interval):
            return False
        self.last_write = now
        return True


def log_findings(findings: list[Finding]) -> None:
    """Without alert rules, findings go to the Python log (info at INFO, warn/stop at WARNING)."""
    for f in findings:
        if f.severity == "info":
            logger.info("rlcluster step %d INFO %s/%s: %s", f.step, f.gauge, f.rule, f.message)
        else:
            logger.warning("rlcluster step %d %s %s/%s: %s", f.step, f.severity.upper(), f.gauge, f.rule, f.message)


def default_journal(run: Any) -> Path:
    """``alerts.jsonl`` beside the run's W&B files (``wandb/run-*/``), else in the working directory."""
    d = getattr(getattr(run, "settings", None), "sync_dir", None) or getattr(run, "dir", None)
    if d:
        p = Path(d)
        return (p.parent if p.name == "files" else p) / "alerts.jsonl"
    return Path.cwd() / "alerts.jsonl"
