"""The stall watchdog: says so when no training step has completed for too long.

A hung collective, a vLLM server that stopped answering, a reward function or dataloader that
blocks: the training loop then never reaches ``on_log`` again, so no rule can fire. A daemon
thread on the main process learns the step cadence (median time between completed steps,
leaving out the slow first steps: model loading, compilation) and fires once when no step
has completed for ``max(factor x median, floor)``, naming the last step, the time since and
what the training thread is doing; it resolves when steps resume. While the training thread is
writing a checkpoint or evaluating (its stack says so), the bound is at least ``startup``: a
long save is not a stall, a save that hangs for half an hour still is.

Per step the training thread only stores a timestamp (``step_done``); everything else runs
on the liveness thread (see liveness.py), which reads the clock and, only past the bound, a
stack. It never touches CUDA or collectives.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

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


SLOW_PHASES = ("checkpointing", "evaluation")  # labels of trainer_internals: progress that reports only at its end


class StallWatchdog:
    """Watches the step cadence; :meth:`check` is called now and then from the liveness thread.

    Args:
        on_stall: called (on the checking thread) once when a stall starts.
        on_resume: called once when steps complete again after a stall.
        describe: returns what the training thread is doing (called only past the bound).
        factor, floor, startup, warmup: see ``LivenessSettings``.
        step: the global step training starts from (a resume), until the first step completes.
        clock: monotonic seconds (a test may pass its own).
    """

    def __init__(self, on_stall: Callable[[Stall], None], on_resume: Callable[[Stall], None],
                 describe: Callable[[], str], *, factor: float = 10.0, floor: float = 600.0,
                 startup: float = 1800.0, warmup: int = 3, step: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_stall = on_stall
        self.on_resume = on_resume
        self.describe = describe
        self.factor = factor
        self.floor = floor
        self.startup = startup
        self.clock = clock
        self.cadence = StepCadence(warmup)
        self.phase = "starting training (before the first step)"
        self.last_step = step
        self.last_progress = clock()
        self.stall: Stall | None = None
        self.stalls = 0
        self._stall_since = 0.0
        self._resumed: tuple[int, float] | None = None

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
        if activity.startswith(SLOW_PHASES) and bound < self.startup:
            if idle <= self.startup:
                return  # a long checkpoint save or evaluation: on_save / an eval batch will count as progress
            bound = self.startup
        self._stall_since = self.last_progress
        self._resumed = None  # before self.stall is set: a step from here on counts as the resumption
        self.stall = Stall(self.last_step, idle, bound, self.cadence.median(), self.phase, activity)
        if self.cadence.steps != steps_before and self._resumed is None:  # a step landed while we looked
            self._resumed = (self.last_step, self.last_progress)
        self.stalls += 1
        self.on_stall(self.stall)
