"""Reading ``alerts.yaml`` with its locations: ``FILE:LINE: problem; fix`` for every check.

Shared by the rule/channel checks (config.py) and the ``watchdog:`` section (watchdog.py), so neither imports
the other: the durations, the located problem list and the node helpers live here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import yaml

from ..safe_yaml import construct

#: Problems (and warnings) kept per file: a file with thousands of mistakes is the wrong file.
MAX_REPORTED = 50
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$")
def parse_duration(value: Any) -> float | None:
    """'10m', '1h30m', '45s', 90 -> seconds; None if malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 and math.isfinite(value) else None
    if not isinstance(value, str) or not value.strip():
        return None
    if value.strip() == "0":
        return 0.0
    m = _DURATION.match(value)
    if not m or not any(m.groups()):
        return None
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s


class _Loc:
    """Problems and warnings of one file (or object), each ``PATH:LINE: message`` (``PATH: message`` without
    a line). At most MAX_REPORTED of each are kept: a file with thousands of mistakes is the wrong file, and
    its messages would be megabytes. A message may be given as a callable, built only if it is kept."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.more_problems: list[int] = []  # lines of the problems not kept
        self.more_warnings: list[int] = []

    def _where(self, line: int) -> str:
        return f"{self.path}:{line}: " if line else f"{self.path}: "

    def err(self, line: int, msg: str | Callable[..., str]) -> None:
        if len(self.problems) >= MAX_REPORTED:
            self.more_problems.append(line)
            return
        self.problems.append(self._where(line) + (msg() if callable(msg) else msg))

    def warn(self, line: int, msg: str | Callable[..., str]) -> None:
        if len(self.warnings) >= MAX_REPORTED:
            self.more_warnings.append(line)
            return
        self.warnings.append(self._where(line) + "warning: " + (msg() if callable(msg) else msg))

    def report(self) -> list[str]:
        more = self.more_problems
        if not more:
            return list(self.problems)
        return [*self.problems, self._where(more[0]) + f"and {len(more):,} more problems (not shown); fix the ones "
                                                       "above first"]

    def report_warnings(self) -> list[str]:
        more = self.more_warnings
        if not more:
            return list(self.warnings)
        return [*self.warnings, self._where(more[0]) + f"warning: and {len(more):,} more warnings (not shown)"]


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _pairs(node: yaml.MappingNode) -> list[tuple[str, yaml.Node, int]]:
    out = []
    for k, v in node.value:
        out.append((str(k.value), v, _line(k)))
    return out


def _value(node: yaml.Node) -> Any:
    """The Python value of one checked node (safe constructors only; see safe_yaml)."""
    return construct(node)
