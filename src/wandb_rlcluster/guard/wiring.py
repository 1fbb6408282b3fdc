"""Liveness: the stall watchdog, the crash notice and the guardian, wired to the callback's events.

``RLClusterCallback`` owns one :class:`LivenessMonitor` and forwards a few events to it; all
three speak through the same ``Notifier`` as the alert rules (journal first, then W&B, then
the direct channels), as alerts named ``stall``, ``crash`` and ``signal``. Only the main process
watches (alerts are sent from there); a rank that dies leaves the main process waiting in a
collective, which is a stall the watchdog names.

One monitor is active per process. Its liveness thread checks the step cadence and whether
``Trainer.train`` is still on the training thread's stack: a ``train()`` that raised into a
caller who caught it (a notebook cell, a retry loop) never calls ``on_train_end``, so that is
how its end is noticed; it is reported once (with the exception when it can still be seen) and
everything is stopped, as a clean end would.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..alerts.engine import AlertEvent
from ..alerts.watchdog import LivenessSettings
from ..trainer import internals as trainer_internals
from . import crash as crash_hooks
from .crash import Crash, CrashReporter, checkpoint_sentence, describe_exception
from .guardian import Guardian
from .stall import Stall, StallWatchdog

logger = logging.getLogger("wandb_rlcluster")

TITLE_MAX = 250  # W&B cuts alert titles at 255 characters
LEFT_GRACE = 1.0  # seconds Trainer.train stays off the stack before its end without on_train_end is reported
TRAIN_CHECK_EVERY = 1.0  # seconds between two looks at whether Trainer.train is still on the stack

_active: LivenessMonitor | None = None


def _after_fork_in_child() -> None:
    if _active is not None:
        _active.active = False  # a forked child (a DataLoader worker, a pool) watches nothing


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _title(head: str, middle: str, tail: str) -> str:
    """``head + middle + tail`` within TITLE_MAX, shortening the middle (an exception message), never the run."""
    room = TITLE_MAX - len(head) - len(tail)
    if len(middle) > room:
        middle = middle[: max(0, room - 1)] + "…"
    return (head + middle + tail)[:TITLE_MAX]


def hooks_can_arm_now(report_to: str | Sequence[str] | None) -> bool:
    """The crash hooks arm in ``on_train_begin`` unless W&B's own exit hooks are still to come (WandbCallback
    runs after this callback): ours must wrap W&B's excepthook and run our atexit before W&B finishes the run."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        return True
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    return not any(t in ("wandb", "all") for t in targets)


class LivenessMonitor:
    """Arms the watchdog, crash hooks and guardian for one ``train()`` call, and disarms them at its end."""

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
        self.start_step = 0
        self.started_at = 0.0  # wall clock: which checkpoints are this training's
        self.active = False
        self.ended: str | None = None  # "clean" | "crash" | "abandoned", once this train() is over
        self._armed = False
        self._clock = time.monotonic
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self._left_since: float | None = None
        self._left_exc: BaseException | None = None
        self._errors = 0

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, output_dir: str, notifier: Any, fields: Mapping[str, Any], *, step: int = 0,
              max_steps: int = 0, report_to: str | Sequence[str] | None = None) -> None:
        """``on_train_begin`` on the main process: start the watchdog, the guardian and (mostly) the crash hooks."""
        global _active
        previous = _active
        if previous is not None and previous.active:
            if previous.train_frame is not None and trainer_internals.train_frame_alive(previous.train_frame):
                logger.info("rlcluster: a train() inside another train() that is already watched: this one is not")
                return
            previous.abandon()  # an earlier train() that never reached on_train_end (its exception was caught)
        _active = self
        crash_hooks._tidy_leftovers()
        self.notifier, self.fields, self.output_dir = notifier, fields, output_dir
        self.last_step = self.start_step = step
        self.max_steps = max_steps
        self.started_at = time.time()
        self.thread = threading.get_ident()
        self._pid = os.getpid()
        self.train_frame = trainer_internals.locate_train_frame()
        if self.train_frame is None:
            logger.warning("rlcluster: Trainer.train is not on the stack (a transformers change?): stall alerts will "
                           "name only the innermost frames, not the trainer phase, and a train() whose exception "
                           "the caller catches is noticed only at exit")
        s = self.settings
        self.active = True
        self.ended = None
        self._armed = False
        self._left_since, self._left_exc = None, None
        self._stop = threading.Event()
        if s.stall_alert:
            self.watchdog = StallWatchdog(self._on_stall, self._on_resume, self._describe, factor=s.stall_factor,
                                          floor=s.stall_floor, startup=s.stall_startup, warmup=s.stall_warmup,
                                          step=step)
        if s.guardian:
            self.guardian = Guardian({
                "journal": str(Path(output_dir) / "alerts.jsonl"), "output_dir": output_dir,
                "run_name": fields.get("run_name"), "timeout": s.crash_timeout, "since": self.started_at,
                "start_step": step,
                "channels": {name: {"type": c.type, "options": c.options, "min_severity": c.min_severity}
                             for name, c in (getattr(getattr(notifier, "config", None), "channels", None)
                                             or {}).items()}})
            if not self.guardian.start():
                self.guardian = None
        if self.watchdog is not None or self.train_frame is not None:
            self._loop_thread = threading.Thread(target=self._loop, args=(self._stop,), name="rlcluster-liveness",
                                                 daemon=True)
            self._loop_thread.start()
        if hooks_can_arm_now(report_to):
            self.arm()

    def arm(self) -> None:
        """Install the crash hooks: in ``on_train_begin`` after W&B's run exists (ours then wrap W&B's excepthook,
        and our atexit runs before W&B finishes the run), else at the first ``on_step_begin``."""
        self._armed = True
        if self.settings.crash_alert and self.crash is None and self.active:
            self.crash = CrashReporter(self._on_crash, finish=self._finish_wandb, notice=self._on_signal_notice,
                                       timeout=self.settings.crash_timeout, thread=self.thread)
            self.crash.install()

    def end(self) -> None:
        """``on_train_end``: a clean end; stop everything, leave nothing running."""
        if not self.active:
            return
        self.active = False
        self.ended = "clean"
        self._release("clean")

    def abandon(self, exc: BaseException | None = None) -> None:
        """``train()`` is over without ``on_train_end`` (the caller caught its exception): one ``crash`` alert,
        then everything stops. Any thread."""
        if not self.active:
            return
        self.active = False
        self.ended = "abandoned"
        reporter = self.crash
        if reporter is not None and reporter.reported is None:
            if exc is None and self.train_frame is not None:
                exc = trainer_internals.exception_through_train(self.train_frame)
            reporter.report(describe_exception(exc, "ended") if exc is not None else
                            Crash("ended", "train() is no longer running"))
        self._release("reported" if reporter is not None and reporter.reported is not None else "abandoned")

    def _release(self, outcome: str) -> None:
        self._stop.set()
        t, self._loop_thread = self._loop_thread, None
        if t is not None and t is not threading.current_thread():
            t.join(2.0)
        reporter, self.crash = self.crash, None
        if reporter is not None:
            if outcome == "clean":
                reporter.mark_clean()
            else:
                reporter.uninstall()
        self.watchdog = None
        guardian, self.guardian = self.guardian, None
        if guardian is not None:
            guardian.finish(outcome)
        self.train_frame = None

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

    # -- the liveness thread -------------------------------------------------------------------------------
    def _loop(self, stop: threading.Event) -> None:
        """Checks the step cadence every ``stall_check_every`` and, at least once a second, that train() runs."""
        every = self.settings.stall_check_every
        tick = min(every, TRAIN_CHECK_EVERY)
        next_stall_check = self._clock() + every
        while not stop.wait(tick):
            if os.getpid() != self._pid or not self.active:
                return
            try:
                if self.watchdog is not None and self._clock() >= next_stall_check:
                    next_stall_check = self._clock() + every
                    self.watchdog.check()
                if self.train_frame is not None:
                    self._check_training()
            except Exception as e:  # noqa: BLE001 - the watchdog must never die or raise into training
                self._errors += 1
                if self._errors == 1:
                    logger.warning("rlcluster: liveness check failed (%s: %s); it keeps watching", type(e).__name__, e)

    def _check_training(self) -> None:
        """Notice a train() that has ended without on_train_end (its exception caught by the caller)."""
        train = self.train_frame
        if train is None or trainer_internals.train_frame_alive(train) is not False:
            self._left_since, self._left_exc = None, None
            return
        if self.crash is not None and self.crash.reported is not None:
            return  # the excepthook (or a signal) reported it: the process is ending
        exc = trainer_internals.exception_through_train(train)
        if exc is not None:
            self._left_exc = exc  # the caller may leave its except block before the grace is over
        now = self._clock()
        if self._left_since is None:
            self._left_since = now
            return
        if now - self._left_since < LEFT_GRACE:
            return  # an uncaught exception on its way to the excepthook (a with-block's exit may take a moment)
        exc, self._left_exc = self._left_exc, None
        self.abandon(exc)

    # -- alerts ----------------------------------------------------------------------------------------------
    def _describe(self) -> str:
        return trainer_internals.describe_thread(self.thread, self.train_frame).sentence()

    def _checkpoint(self) -> str:
        return checkpoint_sentence(self.output_dir, since=self.started_at, start_step=self.start_step)

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
        self._stop.set()  # a dying process is not a stall
        run = f" ({self.fields.get('run_name') or 'this run'})"
        step = self.last_step
        where = f" (raised at {crash.where})" if crash.where else ""
        if crash.how == "exception" and crash.summary.startswith("KeyboardInterrupt"):
            title = _title(f"Training interrupted after step {step}: ", crash.summary, " (Ctrl-C?)" + run)
            what = f"KeyboardInterrupt escaped train(){where}: Ctrl-C, or SIGINT from a scheduler."
        elif crash.how == "exception":
            title = _title(f"Training crashed after step {step}: ", crash.summary, run)
            what = f"An exception escaped train(): {crash.summary}{where}."
        elif crash.how == "signal":
            if os.environ.get("TORCHELASTIC_RUN_ID"):
                cause = "the torchrun agent ends the ranks: another rank failed? preemption?"
            else:
                cause = "preemption? scancel? a job time limit?"
            title = _title(f"Training stopped by {crash.summary} after step {step} ", f"({cause})", run)
            what = (f"The process received {crash.summary} while training ({cause}); it ends now, as it would have "
                    "without rlcluster, after the W&B run is finished as failed.")
        elif crash.how == "ended":
            title = _title(f"Training ended without finishing after step {step}: ", crash.summary, run)
            if crash.summary == "train() is no longer running":
                what = ("train() is no longer running, but on_train_end never came (an exception caught by the "
                        "caller?).")
            else:
                what = (f"train() raised {crash.summary}{where} and on_train_end never came: training did not "
                        "finish (the caller caught the exception: a notebook cell, a retry loop).")
            what += " rlcluster stopped watching this training (watchdog, guardian)."
        else:
            title = f"Training process exited at step {step} without finishing{run}"
            what = ("The process exited while train() was still running, without on_train_end: sys.exit() inside "
                    "training, or an exception caught outside train().")
        text = f"{what} Last completed step: {step}. {self._checkpoint()}"
        self._send(self._event("firing", "crash", "process", "stop", None, crash.how, title, text))
        if self.notifier is not None:
            self.notifier.close(max(0.1, deadline - self._clock()))  # the channel queues drain before we die
        guardian = self.guardian
        if guardian is not None:
            guardian.reported()

    def _on_signal_notice(self, name: str, stuck: bool) -> None:
        """The program's own handler took SIGTERM/SIGINT (reader thread): say so, keep watching."""
        run = f" ({self.fields.get('run_name') or 'this run'})"
        step = self.last_step
        title = f"Training process received {name} after step {step}; the program's own handler took it{run}"
        stuck_note = ""
        if stuck:
            stuck_note = (f" The training thread is stuck in C ({self._describe()}): that handler runs when it "
                          "returns.")
        text = (f"The process received {name} (a preemption notice, scancel, a job time limit, Ctrl-C), and a {name} "
                "handler the program installed before rlcluster took it: what happens now is its decision. "
                f"rlcluster keeps watching: a crash, an exit or a stall is still reported.{stuck_note} "
                f"Last completed step: {step}. {self._checkpoint()}")
        self._send(self._event("firing", "signal", "process", "warn", None, "signal", title, text))

    def _finish_wandb(self, crash: Crash) -> None:
        _finish_wandb_run(crash.summary)


def _finish_wandb_run(signal_name: str) -> None:
    """A signal's default action ends the process without atexit: W&B would lose what it has not written yet
    (the alert included; an offline run loses its whole history). Finish the run as failed first, like a shell
    reports a killed job (128 + signal number); the crash reporter bounds how long this may take, and the
    training thread is parked meanwhile (nothing logs to a finished run)."""
    import signal

    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return
    signum = getattr(signal, signal_name, None)
    run.finish(exit_code=128 + int(signum) if signum is not None else 1)


def resolve_settings(config_watchdog: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> LivenessSettings:
    from ..alerts.watchdog import resolve

    return resolve(config_watchdog, overrides)


__all__ = ["LivenessMonitor", "LivenessSettings", "hooks_can_arm_now", "resolve_settings"]


class LivenessHooks:
    """The Trainer events that tell the stall watchdog where the training thread is (a few attribute writes per
    step), for RLClusterCallback; ``liveness`` is its LivenessMonitor or None. Events that other parts of the
    callback also handle go on to them (``super()``) after the watchdog's note."""

    liveness: LivenessMonitor | None

    def _where(self, text: str, phase: bool = False) -> None:
        if self.liveness is not None and self.liveness.active:
            (self.liveness.phase if phase else self.liveness.progress)(text)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.step_begin()

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._where("in a training step (between gradient-accumulation micro-batches)")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._where("finishing a training step (after the optimizer step)", phase=True)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._where("in evaluation")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._where("between steps (a checkpoint was just saved)")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._where("in the optimizer step", phase=True)
        super().on_pre_optimizer_step(args, state, control, **kwargs)  # type: ignore[misc]

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.step_end(state.global_step)
        super().on_step_end(args, state, control, **kwargs)  # type: ignore[misc]
