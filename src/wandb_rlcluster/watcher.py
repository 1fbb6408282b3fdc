"""``watch(run)``: the instrument cluster on any training loop that logs to W&B (verl, OpenRLHF, your own).

``watch`` attaches to a W&B run and sees every dict the loop logs (``run.log`` and ``wandb.log`` alike: both
go through the run's ``_log``, which wandb 0.19-0.2x has and which ``watch`` wraps on that one run object; wandb
has no public hook for it). Each row goes through the gauges and the alert rules as in the callback; the
derived ``rlcluster/*`` values ride in the SAME ``log`` call as the loop's own dict (a new dict: the caller's is
never modified), so the loop's keys, values and steps are exactly what they were. Alerts go to ``alerts.jsonl``
beside the run's files and to the channels of ``alerts.yaml``.

Stopping is the loop's business: ``w.should_stop`` turns True on the row a stop alert fires, and ``on_stop``
(if given) is called once with the stopping finding. For verl, ``docs/frameworks.md`` shows the one line.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from .alerts import AlertConfig
from .core.findings import Finding, Level
from .monitor import RowMonitor, default_journal

logger = logging.getLogger("wandb_rlcluster")


class Watcher:
    """The handle ``watch()`` returns. ``should_stop``, ``stop_finding``, ``verdict()``, ``close()``."""

    def __init__(self, run: Any, monitor: RowMonitor, *, prefix: str, on_stop: Callable[[Finding], Any] | None,
                 log_to_run: bool, min_interval: float) -> None:
        self.run = run
        self.monitor = monitor
        self.prefix = prefix
        self.on_stop = on_stop
        self.log_to_run = log_to_run
        self.min_interval = float(min_interval)
        self.should_stop = False
        self.rows = 0
        self.seconds = 0.0  # seconds in the gauges, the rules and building our keys (not W&B's own call)
        self._pending: dict[str, Any] = {}  # rows logged with commit=False, completed by the next committing call
        self._pending_step: int | None = None
        self._last_write = -1e18
        self._last_status: dict[str, str] = {}
        self._orig = run._log
        self._closed = False
        run._log = self._log  # this run object only; detach() puts it back

    # -- the wrapped log --------------------------------------------------------------------------------------
    def _log(self, data: dict[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        extra: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            extra = self._observe(data, step, commit)
        except Exception as e:  # noqa: BLE001 - never break the loop or change what it logs
            self.monitor.error("watch", e)
        self.seconds += time.perf_counter() - t0
        self._orig({**data, **extra} if extra else data, step=step, commit=commit)

    def _observe(self, data: Mapping[str, Any], step: int | None, commit: bool | None) -> dict[str, float]:
        if not isinstance(data, Mapping):
            return {}
        if step is None:
            step = getattr(self.run, "_local_step", None)  # the W&B step this dict lands on
        if self._pending and step is not None and self._pending_step is not None and step != self._pending_step:
            self._row(self._pending, self._pending_step, write=False)  # a partial row the loop never committed
            self._pending = {}
        if commit is False:
            self._pending.update(data)
            self._pending_step = step
            return {}
        row = {**self._pending, **data} if self._pending else data
        self._pending, self._pending_step = {}, None
        return self._row(row, step, write=True)

    def _row(self, row: Mapping[str, Any], step: int | None, write: bool) -> dict[str, float]:
        decision = self.monitor.feed(row, step)
        self.rows += 1
        if decision.stop and not self.should_stop:
            self.should_stop = True
            f = self.monitor.stop_finding
            logger.warning("rlcluster: stop at step %d (%s/%s); the loop decides (watch().should_stop)", decision.step,
                           f.gauge if f else "?", f.rule if f else "?")
            if self.on_stop is not None and f is not None:
                try:
                    self.on_stop(f)
                except Exception as e:  # noqa: BLE001
                    self.monitor.error("on_stop", e)
        if not (write and self.log_to_run) or self.monitor.cluster is None:
            return {}
        now = time.perf_counter()
        statuses = {gid: g.status for gid, g in self.monitor.cluster.gauges.items()}
        worse = any(Level.of(st) > Level.of(self._last_status.get(gid, "ok")) for gid, st in statuses.items())
        due = (now - self._last_write >= self.min_interval or decision.stop or worse
               or any(e.kind == "firing" for e in decision.events)
               or any(f.severity != "info" for f in decision.findings))
        self._last_status = statuses
        if not due:
            return {}
        self._last_write = now
        return self.monitor.metrics(self.prefix)

    # -- ending -----------------------------------------------------------------------------------------------
    @property
    def stop_finding(self) -> Finding | None:
        return self.monitor.stop_finding

    @property
    def stopped_at(self) -> int | None:
        return self.monitor.stopped_at

    def verdict(self) -> str:
        return self.monitor.verdict()

    def detach(self) -> None:
        """Stop seeing the run's rows (what was logged stays as it was)."""
        if getattr(self.run, "_log", None) == self._log:
            try:
                del self.run._log  # back to the class's method
            except AttributeError:
                self.run._log = self._orig

    def close(self) -> None:
        """End of the loop: a pending row, end-of-run findings and alerts, the summary; detaches. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._pending:
                self._row(self._pending, self._pending_step, write=False)
                self._pending = {}
            self.monitor.finish()
            if self.log_to_run and self.monitor.cluster is not None:
                summary: dict[str, Any] = {f"{self.prefix}/verdict": self.monitor.verdict(),
                                           f"{self.prefix}/findings": len(self.monitor.cluster.findings),
                                           f"{self.prefix}/framework": self.monitor.cluster.framework}
                if self.monitor.stopped_at is not None and self.monitor.stop_finding is not None:
                    f = self.monitor.stop_finding
                    summary[f"{self.prefix}/stopped_at_step"] = self.monitor.stopped_at
                    summary[f"{self.prefix}/stopped_by"] = f"{f.gauge}/{f.rule}"
                for k, v in summary.items():
                    self.run.summary[k] = v
        except Exception as e:  # noqa: BLE001
            self.monitor.error("close", e)
        self.detach()


def watch(run: Any = None, framework: str | None = None, alerts: str | os.PathLike[str] | AlertConfig | bool | None
          = None, *, trainer: str | None = None, params: Mapping[str, Mapping[str, Any]] | None = None,
          stop_on: str | None = "stop", on_stop: Callable[[Finding], Any] | None = None,
          journal: str | os.PathLike[str] | None = None, prefix: str = "rlcluster", log_to_run: bool = True,
          min_interval: float = 0.25, warn_sooner: int | None = None, max_steps: int = 0,
          gold_rewards: list[str] | None = None) -> Watcher:
    """Watch a W&B run: every dict the loop logs goes through the gauges and the alert rules.

    Args:
        run: the ``wandb.Run`` (None: ``wandb.run``, the active one; there must be one).
        framework: ``verl``, ``openrlhf``, ``trl``; None detects it from the first logged dict's keys.
        alerts: the alert rules, as ``RLClusterCallback(alerts=...)`` (None: the shipped file; a path; False: none).
            Checked here: a bad file raises ConfigError naming file, line and fix, before the first row.
        stop_on: ``"stop"`` (default), ``"warn"``, or None (``should_stop`` never turns True).
        on_stop: called once, with the stopping finding, on the row ``should_stop`` turns True.
        journal: ``alerts.jsonl`` path (default: beside the run's files).
        log_to_run: write ``<prefix>/*`` into the same log calls (every ``min_interval`` seconds, and at once on
            any row where something got worse).
        max_steps: the planned number of steps, when known (some rules judge the run's progress).
        gold_rewards: held-out reward functions (``rewards/<name>/mean``); verl's and OpenRLHF's task score is
            already the gold of their profile.
    """
    if run is None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        if run is None:
            raise RuntimeError("rlcluster.watch(): no active W&B run; call wandb.init() first or pass run=")
    already = getattr(getattr(run, "_log", None), "__self__", None)
    if isinstance(already, Watcher):  # watching twice would see every row twice
        logger.warning("rlcluster.watch(): this run is already watched; returning its watcher")
        return already
    if not callable(getattr(run, "_log", None)):
        raise TypeError(f"rlcluster.watch(): {type(run).__name__} has no _log method to watch (wandb >= 0.19 needed)")
    if params is None and gold_rewards:
        params = {"reward": {"gold": list(gold_rewards)}}
    monitor = RowMonitor(framework=framework, alerts=alerts, trainer=trainer, params=params,
                         journal=journal if journal is not None else default_journal(run), stop_on=stop_on,
                         warn_sooner=warn_sooner, max_steps=max_steps,
                         run_name=getattr(run, "name", None) or None)
    return Watcher(run, monitor, prefix=prefix, on_stop=on_stop, log_to_run=log_to_run, min_interval=min_interval)


_INIT_HOOK: dict[str, Any] = {}


def watch_on_init(**watch_kwargs: Any) -> None:
    """Watch every W&B run this process starts from now on: ``wandb.init`` is wrapped so that the run it returns is
    ``watch(run, **watch_kwargs)``-ed (once per run). For frameworks that call ``wandb.init`` themselves, deep
    inside (verl's tracking backend in its Ray TaskRunner). Calling it again replaces the arguments; the watchers
    are on ``watchers()``. A failure to watch leaves the run as wandb made it."""
    import wandb

    _INIT_HOOK["kwargs"] = dict(watch_kwargs)
    _INIT_HOOK.setdefault("watchers", [])
    if getattr(wandb.init, "_rlcluster_hook", False):
        return
    original = wandb.init

    def init(*args: Any, **kwargs: Any) -> Any:
        run = original(*args, **kwargs)
        try:
            if run is not None and not any(w.run is run for w in _INIT_HOOK["watchers"]):
                _INIT_HOOK["watchers"].append(watch(run, **_INIT_HOOK["kwargs"]))
        except Exception as e:  # noqa: BLE001 - a bad alert file is said here, and the run goes on unwatched
            logger.warning("rlcluster: could not watch the new W&B run (%s: %s); it runs unwatched",
                           type(e).__name__, e)
        return run

    init._rlcluster_hook = True  # type: ignore[attr-defined]
    init._rlcluster_original = original  # type: ignore[attr-defined]
    wandb.init = init


def watchers() -> list[Watcher]:
    """The watchers ``watch_on_init`` made, oldest first."""
    return list(_INIT_HOOK.get("watchers", []))


__all__ = ["Watcher", "watch", "watch_on_init", "watchers"]
