"""Findings: what a gauge says when something needs a person's attention.

A finding is the unit that every consumer shares: the analyzer prints it, the
alert engine routes it, the callback logs it. Keeping it a plain dataclass with
a stable ``to_dict`` is what lets the JSON output be a contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .doc_links import rule_doc_url

Severity = Literal["info", "warn", "stop"]
Status = Literal["ok", "warn", "stop", "no-data"]

SEVERITY_RANK: dict[str, int] = {"ok": 0, "info": 0, "no-data": -1, "warn": 1, "stop": 2}


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
