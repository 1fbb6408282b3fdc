"""Settings of the alerts that no logged row can raise: a stall, a crash, a hard death.

Every alert rule is evaluated in ``on_log``; these three fire precisely when ``on_log`` stops
coming. Their knobs live in the ``watchdog:`` section of ``alerts.yaml`` and are also
constructor arguments of ``RLClusterCallback`` (same names; a constructor argument wins):

    watchdog:
      stall_alert: true        # warn when no step completes for max(stall_factor x median step, stall_floor)
      stall_factor: 10
      stall_floor: 10m
      stall_startup: 30m       # the bound until the cadence is known (model loading, compilation), and the
                               # least bound while a checkpoint is written or an evaluation runs
      stall_warmup: 3          # first steps left out of the median step time
      stall_check_every: 5s
      stall_severity: warn     # info or warn: a stalled loop cannot be stopped by an alert
      crash_alert: true        # exception out of train(), SIGTERM, exit without on_train_end
      crash_timeout: 10s       # how long a crash notice may hold up the dying process
      guardian: true           # a watcher process that reports a kill -9 / OOM kill

Validation reports ``FILE:LINE: problem; fix`` like the rest of the file (see config.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ..alerts.located import parse_duration

if TYPE_CHECKING:
    import yaml

    from ..alerts.located import _Loc

STALL_SEVERITIES = ("info", "warn")  # "stop" would promise what nothing can do: the loop is stuck
RESERVED_RULES = ("stall", "crash", "signal")  # the liveness alerts' names: a rule of that name would reroute them


@dataclass(frozen=True)
class LivenessSettings:
    """The stall watchdog, crash notice and guardian knobs, validated (durations in seconds)."""

    stall_alert: bool = True
    stall_factor: float = 10.0
    stall_floor: float = 600.0
    stall_startup: float = 1800.0
    stall_warmup: int = 3
    stall_check_every: float = 5.0
    stall_severity: str = "warn"
    crash_alert: bool = True
    crash_timeout: float = 10.0
    guardian: bool = True

    @property
    def any_on(self) -> bool:
        return self.stall_alert or self.crash_alert or self.guardian


KEYS = tuple(f.name for f in fields(LivenessSettings))
_BOOLS = frozenset({"stall_alert", "crash_alert", "guardian"})
_DURATIONS = frozenset({"stall_floor", "stall_startup", "stall_check_every", "crash_timeout"})


def check_value(key: str, value: Any) -> tuple[Any, str | None]:
    """(validated value, None) or (None, 'problem; fix') for one knob: shared by the YAML and the constructor."""
    if key in _BOOLS:
        if not isinstance(value, bool):
            return None, f"'{key}' must be true or false, not {value!r}"
        return value, None
    if key in _DURATIONS:
        secs = parse_duration(value)
        if secs is None or secs <= 0:
            return None, f"'{key}' {value!r} is not a positive duration; write e.g. 30s, 10m, 1h (or seconds)"
        if key == "crash_timeout" and secs > 300:
            return None, f"'{key}' {value!r} is over 5 minutes: a dying process must not hang that long; use e.g. 10s"
        return secs, None
    if key == "stall_factor":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
            return None, f"'stall_factor' must be a number >= 1 (multiples of the median step time), not {value!r}"
        return float(value), None
    if key == "stall_warmup":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None, f"'stall_warmup' must be an integer >= 0 (steps left out of the cadence), not {value!r}"
        return value, None
    if key == "stall_severity":
        if value not in STALL_SEVERITIES:
            return None, (f"'stall_severity' must be info or warn, not {value!r} (a stalled training loop cannot be "
                          "stopped by an alert; route it with a channel's min_severity)")
        return value, None
    return None, f"unknown watchdog setting '{key}'"


def parse_section(loc: _Loc, node: yaml.Node, line: int) -> dict[str, Any]:
    """The ``watchdog:`` section of one file: validated values by key; problems go to ``loc``."""
    import yaml

    from ..alerts.located import _line, _pairs, _value
    from ..core.text import did_you_mean

    if not isinstance(node, yaml.MappingNode):
        loc.err(line, f"'watchdog' must be a mapping of settings ({', '.join(KEYS)})")
        return {}
    out: dict[str, Any] = {}
    for key, vnode, kline in _pairs(node):
        if key not in KEYS:
            loc.err(kline, f"unknown watchdog setting '{key}'{did_you_mean(key, KEYS)}; settings: {', '.join(KEYS)}")
            continue
        value, problem = check_value(key, _value(vnode))
        if problem:
            loc.err(_line(vnode), f"watchdog: {problem}")
        else:
            out[key] = value
    return out


def resolve(from_file: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None = None) -> LivenessSettings:
    """The file's (already validated) values, then the constructor's overrides; a bad override raises ValueError."""
    settings = replace(LivenessSettings(), **{k: v for k, v in (from_file or {}).items() if k in KEYS})
    problems = []
    changes: dict[str, Any] = {}
    for key, raw in (overrides or {}).items():
        value, problem = check_value(key, raw)
        if problem:
            problems.append(problem)
        else:
            changes[key] = value
    if problems:
        raise ValueError("RLClusterCallback: " + "; ".join(problems))
    return replace(settings, **changes)
