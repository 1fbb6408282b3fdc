"""The stall watchdog: says so when no training step has completed for too long.

A hung collective, a vLLM server that stopped answering, a reward function or dataloader that
blocks: the training loop then never reaches ``on_log`` again, so no rule can fire. A daemon
thread on the main process learns the step cadence (median time between completed steps,
leaving out the slow first steps: model loading, compilation) and fires once when no step
has completed for ``max(factor x median, floor)``, naming the last step, the time since and
what the training thread is doing; it resolves when steps resume.

Per step the training thread only stores a timestamp (``step_done``); everything else runs
on the watchdog thread, which reads the clock and, at most once per stall, a stack. It never
touches CUDA or collectives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("wandb_rlcluster")

MIN_INTERVALS = 3  # completed-step intervals (after warm-up) before the cadence is trusted


class StepCadence:
    """Median wall time between completed steps, leaving out the first ``warmup`` steps.

    ``step`` is called from the training thread (a deque append); ``median`` from the watchdog
    thread (a C-level copy of the deque under the GIL, so no lock is needed on the step path).
    """

    def __init__(self, warmup: int = 3, window: int = 64) -> None:
        self.warmup = warmup
        self.intervals: deque[float] = deque(maxlen=window)
        self.steps = 0
        self._last: float | None = None

    def step(self, now: float) -> None:
        self.steps += 1
        if self._last is not None and self.steps > self.warmup + 1:
            self.intervals.append(now - self._last)
        self._last = now

    def median(self) -> float | None:
        values = sorted(list(self.intervals))
        if len(values) < MIN_INTERVALS:
            return None
        n = len(values)
        return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


@dataclass(frozen=True)
class Stall:
    """One stall, as the alert tells it."""

    last_step: int
    idle_s: float  # seconds since the last completed step, when detected (or when resolved)
    bound_s: float
    median_s: float | None
    phase: str  # from the callback events: "in a training step", "between steps", ...
    activity: str  # from the stack: "the reward function `slow`, at rewards.py:12 in slow"


class StallWatchdog:
    """Watches the step cadence from a daemon thread.

    Args:
        on_stall: called (on the watchdog thread) once when a stall starts.
        on_resume: called once when steps complete again after a stall.
        describe: returns what the training thread is doing (called at most once per stall).
        factor, floor, startup, warmup, check_every: see ``LivenessSettings``.
        clock: monotonic seconds (a test may pass its own and call :meth:`check`).
    """

    def __init__(self, on_stall: Callable[[Stall], None], on_resume: Callable[[Stall], None],
                 describe: Callable[[], str], *, factor: float = 10.0, floor: float = 600.0,
                 startup: float = 1800.0, warmup: int = 3, check_every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_stall = on_stall
        self.on_resume = on_resume
        self.describe = describe
        self.factor = factor
        self.floor = floor
        self.startup = startup
        self.check_every = check_every
        self.clock = clock
        self.cadence = StepCadence(warmup)
        self.phase = "starting training (before the first step)"
        self.last_step = 0
        self.last_progress = clock()
        self.stall: Stall | None = None
        self.stalls = 0
        self._stall_since = 0.0
        self._resumed: tuple[int, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = 0

    # -- training thread (cheap) --------------------------------------------------------------------
    def step_done(self, step: int) -> None:
        now = self.clock()
        self.cadence.step(now)
        self.last_step = step
        self.last_progress = now
        if self.stall is not None and self._resumed is None:
            self._resumed = (step, now)  # the first step after a stall: what its resolution reports
        self.phase = "between steps (callbacks, logging, evaluation, checkpointing or the next batch)"

    def progress(self, phase: str) -> None:
        """Something other than a step moved (an evaluation batch, a checkpoint written): not a stall."""
        self.last_progress = self.clock()
        self.phase = phase

    # -- watchdog thread ------------------------------------------------------------------------------
    def bound(self) -> float:
        median = self.cadence.median()
        if median is None:
            return max(self.startup, self.floor)
        return max(self.factor * median, self.floor)

    def check(self, now: float | None = None) -> None:
        """One look at the clock: fire on a new stall, resolve a stall once a step completed."""
        now = self.clock() if now is None else now
        if self.stall is not None:
            resumed = self._resumed
            if resumed is not None:
                stall, self.stall = self.stall, None  # idle_s of a resolution: how long the stall lasted
                self._resumed = None
                self.on_resume(Stall(resumed[0], resumed[1] - self._stall_since, stall.bound_s, stall.median_s,
                                     stall.phase, stall.activity))
            return
        steps_before = self.cadence.steps
        idle = now - self.last_progress
        bound = self.bound()
        if idle <= bound:
            return
        try:
            activity = self.describe()
        except Exception as e:  # noqa: BLE001 - a description is a bonus, the alert is not
            activity = f"unknown ({type(e).__name__})"
        self._stall_since = self.last_progress
        self._resumed = None  # before self.stall is set: a step from here on counts as the resumption
        self.stall = Stall(self.last_step, idle, bound, self.cadence.median(), self.phase, activity)
        if self.cadence.steps != steps_before and self._resumed is None:  # a step landed while we looked
            self._resumed = (self.last_step, self.last_progress)
        self.stalls += 1
        self.on_stall(self.stall)

    def start(self) -> None:
        if self._thread is not None:
            return
        self.last_progress = self.clock()
        self._thread = threading.Thread(target=self._run, name="rlcluster-stall-watchdog", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.check_every):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - the watchdog must never die or raise into training
                self._errors += 1
                if self._errors == 1:
                    logger.warning("rlcluster: stall watchdog check failed (%s: %s); it keeps watching",
                                   type(e).__name__, e)
