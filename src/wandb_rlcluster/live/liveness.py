"""Liveness: the stall watchdog, the crash notice and the guardian, wired to the callback's events.

``RLClusterCallback`` owns one :class:`LivenessMonitor` and forwards a few events to it; all
three speak through the same ``Notifier`` as the alert rules (journal first, then W&B, then
the direct channels), as alerts named ``stall`` and ``crash``. Only the main process watches
(alerts are sent from there); a rank that dies leaves the main process waiting in a
collective, which is a stall the watchdog names.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..alerts.engine import AlertEvent
from ..alerts.liveness import LivenessSettings
from . import trainer_internals
from .crash import Crash, CrashReporter, checkpoint_sentence
from .guardian import Guardian
from .watchdog import Stall, StallWatchdog

logger = logging.getLogger("wandb_rlcluster")


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class LivenessMonitor:
    """Arms the watchdog, crash hooks and guardian for one ``train()`` call, and disarms them at its clean end."""

    def __init__(self, settings: LivenessSettings) -> None:
        self.settings = settings
        self.notifier: Any = None
        self.fields: Mapping[str, Any] = {}
        self.output_dir: str | None = None
        self.watchdog: StallWatchdog | None = None
        self.crash: CrashReporter | None = None
        self.guardian: Guardian | None = None
        self.train_frame: trainer_internals.TrainFrame | None = None
        self.thread = 0
        self.last_step = 0
        self.max_steps = 0
        self.active = False
        self._armed = False
        self._clock = time.monotonic

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, output_dir: str, notifier: Any, fields: Mapping[str, Any], *, step: int = 0,
              max_steps: int = 0) -> None:
        """``on_train_begin`` on the main process: start the watchdog and the guardian."""
        self.end()  # a second train() with the same callback starts from a clean slate
        self.notifier, self.fields, self.output_dir = notifier, fields, output_dir
        self.last_step, self.max_steps = step, max_steps
        self.thread = threading.get_ident()
        self.train_frame = trainer_internals.locate_train_frame()
        if self.train_frame is None:
            logger.warning("rlcluster: Trainer.train is not on the stack (a transformers change?): stall alerts will "
                           "name only the innermost frames, not the trainer phase")
        s = self.settings
        self.active = True
        self._armed = False
        if s.stall_alert:
            self.watchdog = StallWatchdog(self._on_stall, self._on_resume, self._describe, factor=s.stall_factor,
                                          floor=s.stall_floor, startup=s.stall_startup, warmup=s.stall_warmup,
                                          check_every=s.stall_check_every)
            self.watchdog.start()
        if s.guardian:
            self.guardian = Guardian({
                "journal": str(Path(output_dir) / "alerts.jsonl"), "output_dir": output_dir,
                "run_name": fields.get("run_name"), "timeout": s.crash_timeout,
                "channels": {name: {"type": c.type, "options": c.options, "min_severity": c.min_severity}
                             for name, c in (getattr(getattr(notifier, "config", None), "channels", None)
                                             or {}).items()}})
            if not self.guardian.start():
                self.guardian = None

    def arm(self) -> None:
        """First ``on_step_begin``: install the crash hooks now, after every ``on_train_begin`` (and wandb.init)
        ran, so ours wrap W&B's excepthook rather than the reverse, and our atexit runs before W&B finishes."""
        self._armed = True
        if self.settings.crash_alert and self.crash is None:
            self.crash = CrashReporter(self._on_crash, timeout=self.settings.crash_timeout, thread=self.thread)
            self.crash.install()

    def end(self) -> None:
        """``on_train_end``: a clean end; stop everything, leave nothing running."""
        if not self.active:
            return
        self.active = False
        if self.crash is not None:
            self.crash.mark_clean()
            self.crash = None
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        if self.guardian is not None:
            self.guardian.close()
            self.guardian = None

    # -- training-thread events (a few attribute writes each) ----------------------------------------------
    def step_begin(self) -> None:
        if not self._armed:
            self.arm()
        if self.watchdog is not None:
            self.watchdog.phase = "in a training step (generation, reward, forward/backward)"

    def phase(self, phase: str) -> None:
        if self.watchdog is not None:
            self.watchdog.phase = phase

    def progress(self, phase: str) -> None:
        if self.watchdog is not None:
            self.watchdog.progress(phase)

    def step_end(self, step: int) -> None:
        self.last_step = step
        if self.watchdog is not None:
            self.watchdog.step_done(step)
        if self.guardian is not None:
            self.guardian.step(step, self._clock())

    # -- alerts ----------------------------------------------------------------------------------------------
    def _describe(self) -> str:
        return trainer_internals.describe_thread(self.thread, self.train_frame).sentence()

    def _event(self, kind: str, rule: str, gauge: str, severity: str, value: float | None, metric: str, title: str,
               text: str, step: int | None = None) -> AlertEvent:
        step = self.last_step if step is None else step
        return AlertEvent(kind=kind, rule=rule, gauge=gauge, severity=severity, step=step, value=value,
                          metric=metric, title=title, text=text, notify=kind == "firing", cooldown=0.0,
                          time=time.time())

    def _send(self, event: AlertEvent) -> None:
        if self.notifier is not None:
            self.notifier.handle([event])

    def _on_stall(self, stall: Stall) -> None:
        run = self.fields.get("run_name") or "this run"
        cadence = f"median step {_duration(stall.median_s)}" if stall.median_s is not None else \
            "step cadence not known yet"
        of = f" of {self.max_steps}" if self.max_steps else ""
        title = f"Training stalled: no step for {_duration(stall.idle_s)} after step {stall.last_step} ({run})"
        text = (f"No training step has completed for {_duration(stall.idle_s)} (bound {_duration(stall.bound_s)}: "
                f"{cadence}). Last completed step: {stall.last_step}{of}. The process is {stall.phase}; the training "
                f"thread is in {stall.activity}. A hung collective (a dead rank), a generation server that stopped "
                "answering or a blocking reward function or dataloader look like this. Resolves when steps resume.")
        self._send(self._event("firing", "stall", "watchdog", self.settings.stall_severity, round(stall.idle_s, 3),
                               "seconds_since_last_step", title, text, stall.last_step))

    def _on_resume(self, stall: Stall) -> None:
        run = self.fields.get("run_name") or "this run"
        title = f"Training resumed at step {stall.last_step} after a {_duration(stall.idle_s)} stall ({run})"
        self._send(self._event("resolved", "stall", "watchdog", self.settings.stall_severity, round(stall.idle_s, 3),
                               "seconds_since_last_step", title, f"Resolved: {title}", stall.last_step))

    def _on_crash(self, crash: Crash) -> None:
        """Runs on the crash reporter's helper thread, bounded by crash_timeout."""
        deadline = self._clock() + self.settings.crash_timeout
        if self.watchdog is not None:
            self.watchdog.stop(timeout=0.5)  # a dying process is not a stall
        run = self.fields.get("run_name") or "this run"
        step = self.last_step
        if crash.how == "exception":
            title = f"Training crashed after step {step}: {crash.summary} ({run})"[:250]
            what = f"An exception escaped train(): {crash.summary}" + (f" (raised at {crash.where})" if crash.where
                                                                         else "") + "."
        elif crash.how == "signal":
            title = f"Training stopped by {crash.summary} after step {step} (preemption? scancel? Ctrl-C?) ({run})"
            what = (f"The process received {crash.summary} while training (a preemption, scancel, a job time limit, "
                    "Ctrl-C); it ends now, as it would have without rlcluster.")
        else:
            title = f"Training process exited at step {step} without finishing ({run})"
            what = ("The process exited while train() was still running, without on_train_end: sys.exit() inside "
                    "training, or an exception caught outside train().")
        text = f"{what} Last completed step: {step}. {checkpoint_sentence(self.output_dir)}"
        self._send(self._event("firing", "crash", "process", "stop", None, crash.how, title, text))
        if self.notifier is not None:
            self.notifier.close(max(0.1, deadline - self._clock()))  # the channel queues drain before we die
        if self.guardian is not None:
            self.guardian.reported()
        if crash.abrupt:
            _finish_wandb_run(crash.summary)


def _finish_wandb_run(signal_name: str) -> None:
    """A signal's default action ends the process without atexit: W&B would lose what it has not written yet
    (the alert included; an offline run loses its whole history). Finish the run as failed first, like a shell
    reports a killed job (128 + signal number); the crash reporter bounds how long this may take."""
    import signal
    import sys

    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return
    signum = getattr(signal, signal_name, None)
    try:
        run.finish(exit_code=128 + int(signum) if signum is not None else 1)
    except Exception as e:  # noqa: BLE001
        logger.warning("rlcluster: could not finish the W&B run before the process ends (%s: %s)", type(e).__name__, e)


def resolve_settings(config_watchdog: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> LivenessSettings:
    from ..alerts.liveness import resolve

    return resolve(config_watchdog, {k: v for k, v in overrides.items() if v is not None})


__all__ = ["LivenessMonitor", "LivenessSettings", "resolve_settings"]
