"""The reward gauge's per-function components: one carrying the whole rise, or pinned at its ceiling."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .gauge import Gauge, finite
from .part import GaugePart
from .rule import Example, Rule
from .stats import (
    Ewma,
    RollingWindow,
)
from .streams import grpo, ramp, reward_components


def _names(fns: list[str]) -> str:
    """Reward function names quoted and joined, for a message."""
    return ", ".join(f"'{o}'" for o in fns)


class _Component:
    """One reward function's running picture: where it started, its smoothed level, ceiling and spread."""

    __slots__ = ("start", "std_start", "mean", "std", "peak", "metric")

    def __init__(self, window: int, fn: str = "") -> None:
        self.start = RollingWindow(window)  # frozen once full
        self.std_start = RollingWindow(window)
        self.mean = Ewma(0.1)
        self.std = Ewma(0.2)
        self.peak = -math.inf
        self.metric = f"rewards/{fn}/mean"  # formatted once (not state: rebuilt from the function's name)

    def push(self, mean: float, std: float | None) -> None:
        e = self.mean.push(mean)
        if not self.start.full:
            self.start.push(mean)
        self.peak = max(self.peak, e)
        if std is not None and finite(std):
            self.std.push(std)
            if not self.std_start.full:
                self.std_start.push(std)

    def gain(self) -> float:
        """How far its smoothed level moved from its start, in units of its start's row-to-row spread."""
        m0 = self.start.mean()  # the start window is frozen once full: O(1) running sums
        return (self.mean.mean - m0) / max(self.start.std(), 0.02 * max(1.0, abs(m0)))

    def state_dict(self) -> dict[str, Any]:
        return {"start": self.start.state_dict(), "std_start": self.std_start.state_dict(),
                "mean": self.mean.state_dict(), "std": self.std.state_dict(), "peak": self.peak}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.start.load_state_dict(state["start"])
        self.std_start.load_state_dict(state["std_start"])
        self.mean.load_state_dict(state["mean"])
        self.std.load_state_dict(state["std"])
        self.peak = float(state["peak"])


class RewardComponentsPart(GaugePart):
    """Without gold: one reward function carrying the whole rise, or pinned at its ceiling, the others flat."""

    def __init__(self, gauge: Gauge) -> None:
        super().__init__(gauge)
        self.components: dict[str, _Component] = {}
        self._comp_keys: tuple[tuple[str, str, str], ...] = ()
        self._row_width = -1

    def scan(self, v: Mapping[str, float], gold_keys: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
        """The row's reward functions (name, mean key, std key), re-scanned only when the row's shape changes."""
        if len(v) != self._row_width:
            self._row_width = len(v)
            gold_names = set(gold_keys)
            self._comp_keys = tuple(
                (k[8:-5], k, k[:-5] + "/std") for k in v
                if k.startswith("rewards/") and k.endswith("/mean") and k not in gold_names and k.count("/") == 2
            )
        return self._comp_keys

    def state_into(self, out: dict[str, Any]) -> None:
        """The per-function components are a dict of objects: serialised by hand; the scan is redone on load."""
        out["components"] = {fn: c.state_dict() for fn, c in self.components.items()}
        out.pop("_comp_keys", None)
        out["_row_width"] = -1

    def load_components(self, comps: Mapping[str, Any]) -> None:
        self.components = {}
        for fn, cs in comps.items():
            c = _Component(self.gauge.p["window"], fn)
            c.load_state_dict(cs)
            self.components[fn] = c

    def observe(self, v: Mapping[str, float]) -> None:
        if len(self._comp_keys) < 2:
            return
        g = self.gauge
        p = g.p
        comps = self.components
        for fn, mk, sk in self._comp_keys:
            m = v.get(mk)
            if m is None or not finite(m):
                continue
            c = comps.get(fn)
            if c is None:
                c = comps[fn] = _Component(p["window"], fn)
            c.push(m, v.get(sk))
        ready = [(fn, c) for fn, c in comps.items() if c.start.full]
        if len(ready) < 2:
            return
        gains = [(c.gain(), fn, c) for fn, c in ready]
        rising = [x for x in gains if x[0] >= p["component_gain_sigma"]]
        flat = [fn for gain, fn, _ in gains if gain < p["component_flat_sigma"]]
        lead = rising[0] if len(rising) == 1 and len(flat) == len(gains) - 1 else None
        # most rows: no lead and nothing firing; the messages (and the list of flat functions in them) are built
        # only for a rule that holds this row
        for gain, fn, c in gains:
            self._judge(fn, gain, c, lead is not None and lead[1] == fn, flat)

    def _judge(self, fn: str, gain: float, c: _Component, is_lead: bool, flat: list[str]) -> None:
        g = self.gauge
        p = g.p
        pinned = False
        if is_lead and c.std.count > 0 and c.mean.mean >= c.peak - 0.05 * abs(c.peak - c.start.mean()):
            std0 = c.std_start.mean() if len(c.std_start) else math.nan
            pinned = c.std.mean <= p["component_dead"] or (std0 == std0 and c.std.mean <= 0.25 * std0)
        level = c.mean.mean
        # the rule ids stay f-strings in the calls: the rule catalog reads them from the source
        metric = c.metric
        g.check(f"reward-component-saturated:{fn}", pinned, "warn", metric, level,
                (lambda: f"reward function '{fn}' is pinned at its "
                f"ceiling ({level:.3g}, every completion scores alike; up {gain:.1f} sigma since the start) while "
                f"{_names(flat)} stay flat: the policy has learned the easy part and gets no signal from it any "
                "more; the task itself is not being learned. "
                + g.fix("reward-component-saturated", sentence=True))
                if pinned else "",
                for_=p["saturated_for"], clear=10)
        g.check(f"reward-component-dominant:{fn}", is_lead and not pinned, "info", metric, level,
                (lambda: f"reward function '{fn}' carries the whole "
                f"reward rise (up {gain:.1f} sigma since the start, now {level:.3g}) while {_names(flat)} stay "
                "flat: the policy optimises one component. If it is a format or length check, the task is not "
                f"being learned; {g.fix('reward-component-dominant')}.")
                if is_lead else "",
                for_=p["component_for"], clear=10)


#: The reward components' rules (``core/catalog.py`` collects them through ``reward.RULES``).
COMPONENT_RULES: tuple[Rule, ...] = (
    Rule(
        "reward", "reward-component-saturated", severities=("warn",),
        reads="rewards/<fn>/mean and /std per reward function",
        test="the one rising component pinned at its peak with std near 0, others flat, held `saturated_for` rows",
        params=("component_gain_sigma", "component_dead", "saturated_for"),
        means="the easy part is learned and gives no signal any more",
        fix="check the other functions' scale and weights",
        per_function=True,
        example=Example(
            "grpo",
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=min(1.0, 0.2 + 0.8 * ramp(i, 50, 40)), acc=0.3,
                                                            fmt_std=0.35 * (1 - ramp(i, 50, 40)))},
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=min(1.0, 0.2 + 0.8 * ramp(i, 50, 40)),
                                                      acc=0.3 + 0.3 * ramp(i, 50, 100),
                                                      fmt_std=0.35 * (1 - ramp(i, 50, 40)))},
            200, 50, 170, "rewards/fmt/mean"),
    ),
    Rule(
        "reward", "reward-component-dominant", severities=("info",),
        reads="rewards/<fn>/mean per reward function",
        test="one component up `component_gain_sigma`, the rest under `component_flat_sigma`, held `component_for` "
             "(info)",
        params=("component_gain_sigma", "component_flat_sigma", "component_for"),
        means="one component carries the whole rise",
        fix="log a held-out gold reward to tell hacking from learning",
        per_function=True,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=0.1 + 0.6 * ramp(i, 100, 100), acc=0.3)},
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=0.1 + 0.6 * ramp(i, 100, 100),
                                                      acc=0.3 + 0.3 * ramp(i, 100, 100))},
            200, 100, 160, "rewards/fmt/mean"),
    ),
)
