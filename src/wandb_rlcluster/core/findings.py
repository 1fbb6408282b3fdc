"""Findings: what a gauge says when something needs a person's attention.

A finding is the unit that every consumer shares: the analyzer prints it, the
alert engine routes it, the callback logs it. Keeping it a plain dataclass with
a stable ``to_dict`` is what lets the JSON output be a contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal

from .doc_links import rule_doc_url

Severity = Literal["info", "warn", "stop"]
Status = Literal["ok", "warn", "stop", "no-data"]



class Level(IntEnum):
    """The one order of severities and statuses: ``ok = info < warn < stop``. An ``info`` finding never changes a
    status; a status that is neither ``warn`` nor ``stop`` (``ok``, ``no-data``) ranks as ``ok``."""

    OK = 0
    INFO = 0  # an alias of OK: the same rank
    WARN = 1
    STOP = 2

    @classmethod
    def of(cls, name: str) -> Level:
        """The level of a severity or status name; anything else ranks as ``ok``."""
        return cls(SEVERITY_RANK.get(name, 0))


#: Rank of each severity and status name, from ``Level`` (plain ints: they go into checkpoints and logged metrics).
SEVERITY_RANK: dict[str, int] = {name.lower(): int(level) for name, level in Level.__members__.items()}
#: The status name of each rank: ``STATUSES[rank]``.
STATUSES: tuple[str, ...] = tuple(level.name.lower() for level in Level)


@dataclass
class Finding:
    """One rule firing on one gauge.

    ``step`` is the first training step at which the rule fired (after its
    persistence requirement was met); ``value`` is the metric's value then.
    """

    gauge: str
    rule: str
    severity: Severity
    step: int
    metric: str
    value: float | None
    message: str
    extra: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        value = self.value
        if value is not None and value != value:  # NaN is not valid JSON
            value_out: object = "NaN"
        elif value is not None and value in (float("inf"), float("-inf")):
            value_out = "Infinity" if value > 0 else "-Infinity"
        else:
            value_out = value
        return {
            "gauge": self.gauge,
            "rule": self.rule,
            "severity": self.severity,
            "step": self.step,
            "metric": self.metric,
            "value": value_out,
            "message": self.message,
            "doc": rule_doc_url(self.rule),  # the rule's page in the manual (core/doc_links.py)
        }
