"""Reading ``alerts.yaml`` with its locations: ``FILE:LINE: problem; fix`` for every check.

Shared by the rule/channel checks (config.py), the ``watchdog:`` section (watchdog.py) and the HTTP channels'
settings (http_config.py), so none imports another: the durations, the located problem list, the node helpers and
the two checks every template and secret goes through (format specs, environment-variable names) live here.
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
#: Widest field and longest precision a template format spec may ask for ({value:>12.4g} is fine).
MAX_SPEC_WIDTH = 100
MAX_SPEC_PRECISION = 30
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_TOKEN_PREFIXES = ("xox", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "glpat", "AKIA", "sk_", "hooks")
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?",
                   re.DOTALL)
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


def format_spec_problem(spec: str) -> str | None:
    """Why a template format spec is refused (too wide, too precise, not a spec), or None if it is fine."""
    if not spec:
        return None
    m = _SPEC.fullmatch(spec)
    if m is None:
        return "is not a format spec such as .3g, >8 or .1%"
    width, precision = m.group("width"), m.group("precision")
    if width and (len(width) > 4 or int(width) > MAX_SPEC_WIDTH):
        return f"asks for a width over {MAX_SPEC_WIDTH}"
    if precision and (len(precision) > 4 or int(precision) > MAX_SPEC_PRECISION):
        return f"asks for a precision over {MAX_SPEC_PRECISION}"
    return None


def env_name_problem(value: Any) -> str | None:
    """Why a ``*_env`` value is not an environment-variable name; the message never repeats the value,
    which may be the very secret (a webhook URL, a token) pasted into the wrong field."""
    if not isinstance(value, str) or not value:
        return "must be the name of an environment variable (e.g. RLCLUSTER_SLACK_WEBHOOK)"
    # Names are UPPER_CASE by convention; a word with lower-case letters and no '_' (hunter2, sEcReT...) or a
    # long run of capitals and digits with no '_' is a pasted secret far more often than a name.
    lower = any(c.islower() for c in value)
    token_like = "_" not in value and (lower or (len(value) >= 24 and any(c.isdigit() for c in value)))
    if not _ENV_NAME.fullmatch(value) or value.startswith(_TOKEN_PREFIXES) or token_like:
        return ("must be the NAME of an environment variable (letters, digits, _), and the value given looks like "
                "a URL or a secret itself (not shown here): put the secret in an environment variable, write its "
                "name here, and rotate the secret if this file was shared")
    return None
