"""Is the run's reward still improving? The context several gauges read a normal-looking signal by.

A signal that is normal while a policy learns (entropy falling, answers getting shorter, the length spread
narrowing) and a sign of collapse when the reward is flat takes its severity from this context: the length, entropy
and reward-signal gauges each keep their own ``RewardProgress``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .gauge import Gauge, finite
from .stats import HalfRunTrend, RollingCorrelation, RollingWindow, RunningRegression


class RewardProgress:
    """Is the run's reward still improving (and its gold reward, when one is logged)?

    The context that tells a learning run's normal signals from a failing run's: entropy falling,
    answers getting shorter, the length spread narrowing are what a policy does while it sharpens on
    a reward that keeps rising, and what it does when it collapses onto a template while the reward
    stays flat. Each gauge that needs the context keeps its own copy, so gauges stay independent and the
    batch path (gauge by gauge) sees what the live path sees. A row's reward is only queued; the statistics
    take the queue when a rule asks (most rows ask nothing), in the same order, so the answers are the same.
    """

    __slots__ = ("reg", "recent", "now", "half", "gold_keys", "gold_reg", "n", "_queue")

    def __init__(self, gold: Iterable[str] = (), recent: int = 30, now: int = 45) -> None:
        self.reg = RunningRegression()
        self.recent = RollingWindow(recent)
        self.now = RollingCorrelation(now)  # (row, reward): is it still rising?
        self.half = HalfRunTrend()  # ... the same, before 45 rows are in: over the second half of the run so far
        self.gold_keys = tuple(f"rewards/{g}/mean" for g in gold)
        self.gold_reg = RunningRegression()
        self.n = 0
        self._queue: list[tuple[float, float | None]] = []  # (reward, gold mean or None), not yet in the statistics

    @classmethod
    def shortened(cls, gauge: Gauge) -> RewardProgress:
        """The same context for ``gauge`` in a short run: its windows shortened as the gauge's own (``Gauge.rows``)."""
        return cls(gauge.p["gold"], recent=gauge.rows(30), now=gauge.rows(45))

    def push(self, v: Mapping[str, float]) -> None:
        r = v.get("reward")
        if r is None:
            r = v.get("objective/scores")
        if r is None or not finite(r):
            return
        gold = None
        if self.gold_keys:
            gs = [v[k] for k in self.gold_keys if k in v and finite(v[k])]
            if gs:
                gold = sum(gs) / len(gs)
        self._queue.append((r, gold))
        if len(self._queue) >= 256:  # bounded memory however long no rule asks
            self._take()

    def _take(self) -> None:
        """Fold the queued rows into the statistics (nothing to do when the queue is empty)."""
        for r, gold in self._queue:
            self.n += 1
            self.reg.push(float(self.n), r)
            self.recent.push(r)
            self.now.push(float(self.n), r)
            self.half.push(r)
            if gold is not None:
                self.gold_reg.push(float(self.n), gold)
        self._queue.clear()

    def known(self) -> bool:
        """Enough reward rows to say anything (a log without a reward has no context). Every queued row is one
        more once taken, so the queue is left for a rule that reads the statistics (asked on every row)."""
        return self.n + len(self._queue) >= 10

    def improving(self, min_t: float = 1.0, now: bool = False, short: bool = True) -> bool:
        """Rising over the run (trend t >= ``min_t``: rewards are noisy), not back below its own average, and the
        gold reward, when one is logged, not falling (t > -1: a noisy held-out check rarely shows a clear rise,
        and a flat one's trend is as often a little negative as a little positive).

        ``now``: also still clearly rising over the last 45 rows (t >= 1.5; in a shorter log, over its second
        half once that holds 15 rows, unless ``short`` is False); a reward that climbed early and then stalled
        stays "up over the run" long after it stopped improving.
        """
        self._take()
        if self.n < 10 or self.reg.t_stat() < min_t:
            return False
        if now and (self.now.t_stat() if self.now.full else self.half.t_stat() if short and self.half.rows() >= 15
                    else math.inf) < 1.5:
            return False
        if self.recent.mean() < self.reg.sy / self.reg.n:
            return False
        return not self.gold_keys or self.gold_reg.n < 10 or self.gold_reg.t_stat() > -1.0

    def state_dict(self) -> dict[str, Any]:
        self._take()
        return {"reg": self.reg.state_dict(), "recent": self.recent.state_dict(), "now": self.now.state_dict(),
                "half": self.half.state_dict(), "gold_reg": self.gold_reg.state_dict(), "n": self.n}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.reg.load_state_dict(state["reg"])
        self.recent.load_state_dict(state["recent"])
        self.now.load_state_dict(state["now"])
        if "half" in state:  # checkpoints from before it was kept
            self.half.load_state_dict(state["half"])
        self.gold_reg.load_state_dict(state["gold_reg"])
        self.n = int(state["n"])
        self._queue.clear()
