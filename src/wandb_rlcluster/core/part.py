"""A part of a gauge: the statistics, the decision and the rule declarations of a few related rules.

A gauge that decides many rules composes parts (``RewardGauge``: its level, shifts, volatility, gold coupling ...)
and gives each the rows it reads. A part keeps its statistics as its own attributes and checks its rules through its
gauge (``check``, ``p``, ``derived``): the gauge's checkpoint holds each part's attributes beside its own, under the
same names as when they were the gauge's (``parts_state``, ``load_parts_state``), so a checkpoint keeps its shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .fields import instance_items
from .gauge import Gauge, load_field, state_of

PART_SKIP = frozenset({"gauge"})
"""A part's attributes that are not its state: the gauge it belongs to."""


class GaugePart:
    """One part of a gauge. Subclasses create their statistics in ``__init__`` after calling this one."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge


def parts_state(parts: Sequence[GaugePart]) -> dict[str, Any]:
    """Every part's attributes, flat: one checkpoint dict beside the gauge's own."""
    out: dict[str, Any] = {}
    for part in parts:
        out.update(state_of(part, PART_SKIP))
    return out


def load_parts_state(parts: Sequence[GaugePart], state: Mapping[str, Any]) -> dict[str, Any]:
    """Load each key a part holds into that part; return the keys no part holds (the gauge's own)."""
    owner: dict[str, GaugePart] = {}
    for part in parts:
        for k, _ in instance_items(part):
            if k not in PART_SKIP:
                owner[k] = part
    rest: dict[str, Any] = {}
    for k, v in state.items():
        holder = owner.get(k)
        if holder is None:
            rest[k] = v
        else:
            load_field(holder, k, v)
    return rest
