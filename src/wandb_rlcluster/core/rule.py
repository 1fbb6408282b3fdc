"""A rule as its gauge declares it, beside the code that decides it: like a ruff rule's entry.

A declaration says what the rule reads, how it decides today (its noise model and test, in a phrase), its
severities, the parameters its thresholds come from (their values are read from the gauge's ``defaults`` /
``family_defaults`` when asked, never copied here), the seed's words it implements (a verbatim quote of the Part II
post or of ``shared/INSTRUMENTS.md``, or none), what a firing means, the fix, and its example streams (a firing
stream and a healthy one, made by the row makers of ``core/streams.py``). Each gauge module holds a tuple of them
next to its gauge class; ``core/catalog.py`` collects them in gauge order. This module imports no gauge, so every
gauge module can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .gauge import Gauge

POST = "post"
"""The seed: Part II of "The Post-Training Instrument Cluster" (``shared/seed/``)."""
INSTRUMENTS = "INSTRUMENTS.md"
"""The domain reference (``shared/INSTRUMENTS.md``), which carries Part I (SFT) and Part III (GRPO)."""

FALSE_ALARM_BUDGET = 0.02
"""The default false-alarm budget of a rule: the share of healthy runs it may warn on, per trainer family and per
healthy noise model of the calibration harness (``benchmarks/calibration``). Summed over the handful of rules a
healthy stream can trip it keeps a run's chance of any false warning in the low percent."""
STOP_ALARM_BUDGET = 0.005
"""The budget of a rule that can stop a run: a false stop ends someone's training, a false warning costs a look."""

ANY_GAUGE = "*"
"""The gauge of a rule every gauge can raise on the keys it reads (``value-out-of-range``)."""

Row = dict[str, float]
Maker = Callable[[int, np.random.Generator], Row]


@dataclass(frozen=True)
class Example:
    """A firing stream and a healthy stream of the same length and family.

    ``onset`` is the first row of the pathology (the rule must not fire before it), ``fire_by`` the row by which it
    must have fired; ``plot`` the key drawn in the reference; ``kwargs`` what ``analyze_rows`` is given
    (``params``, ``max_steps``). A row's ``step`` is its 1-based row number, so "fires by row 45" is "fires at step
    45 or earlier"."""

    trainer: str
    firing: Maker
    healthy: Maker
    n: int
    onset: int
    fire_by: int
    plot: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    #: Extra rows (e.g. evaluation rows) merged in by step after the maker's rows: (step, row) pairs per stream.
    extra: Callable[[bool, np.random.Generator], list[Row]] | None = None

    def rows(self, firing: bool) -> list[Row]:
        """The stream (``firing`` or healthy), deterministic for the example's seed."""
        rng = np.random.default_rng(self.seed)
        make = self.firing if firing else self.healthy
        out: list[Row] = [{"step": float(i), **make(i, rng)} for i in range(1, self.n + 1)]
        if self.extra is not None:
            out.extend(self.extra(firing, rng))
            out.sort(key=lambda r: (r["step"], "eval_loss" in r))
        return out


@dataclass(frozen=True)
class Rule:
    """One rule: what it reads and decides, where its numbers come from, what to do, and its example.

    ``severities`` are the ones its ``check`` calls can raise: ``tests/test_rule_catalog.py`` reads them from the
    source (``catalog.raised_rules``) and fails when the declaration says otherwise."""

    gauge: str
    id: str
    _: KW_ONLY
    severities: tuple[str, ...]
    reads: str
    test: str
    means: str
    fix: str
    example: Example = field(compare=False)
    params: tuple[str, ...] = ()
    #: The seed's words (verbatim), and which text they are from (``POST`` or ``INSTRUMENTS``).
    seed: str = "none"
    seed_source: str = ""
    #: One rule per reward function: the id it raises is ``<id>:<function name>``.
    per_function: bool = False
    #: Where a number differs from the seed's, or has no seed line: why.
    origin: str = ""
    #: The rule decides by a sequential test whose threshold comes from the false-alarm budget
    #: (``core.sequential.arl_for``): its budget is shown in the reference.
    budgeted: bool = False
    #: The gauge parameter holding the rule's own ARL0 budget (empty: the engine's ``BASE_ARL``).
    budget_param: str = ""
    #: The share of healthy runs (per family and noise model) the rule may warn on; None: the default
    #: (``FALSE_ALARM_BUDGET``, ``STOP_ALARM_BUDGET`` for a rule that can stop). A rule declaring its own says why
    #: in ``origin``.
    false_alarm_budget: float | None = None

    def alarm_budget(self) -> float:
        """The share of healthy runs this rule may warn (or stop) on, per family and noise model."""
        if self.false_alarm_budget is not None:
            return self.false_alarm_budget
        return STOP_ALARM_BUDGET if "stop" in self.severities else FALSE_ALARM_BUDGET

    def budget(self) -> str:
        """The false-alarm budget as the reference shows it: '-' for a rule held k rows (no budget declared)."""
        if not self.budgeted:
            return "-"
        from .sequential import SOONER_FACTOR, arl_for

        arl = float(gauge_class(self.gauge).defaults[self.budget_param]) if self.budget_param else arl_for(0)  # type: ignore[union-attr]
        return f"ARL0 {arl:,.0f} rows (÷{SOONER_FACTOR:g} per warn_sooner)"

    @property
    def key(self) -> tuple[str, str]:
        return (self.gauge, self.id)

    def thresholds(self) -> dict[str, dict[str, Any]]:
        """``{param: {"default": value, <family>: value, ...}}`` read from the gauge class now."""
        cls = gauge_class(self.gauge)
        out: dict[str, dict[str, Any]] = {}
        for name in self.params:
            if cls is None:
                continue
            row: dict[str, Any] = {}
            if name in cls.defaults:
                row["default"] = cls.defaults[name]
            for fam, fd in cls.family_defaults.items():
                if name in fd:
                    row[fam] = fd[name]
            out[name] = row
        return out

    def threshold_text(self) -> str:
        """``warn=0.5 (ppo, online_dpo: 6.0); for=3`` -- or ``-`` for a rule without parameters."""
        parts = []
        for name, row in self.thresholds().items():
            text = f"{name}={_fmt(row.get('default'))}"
            fams: dict[str, list[str]] = {}
            for fam, v in row.items():
                if fam != "default":
                    fams.setdefault(_fmt(v), []).append(fam)
            if fams:
                text += " (" + "; ".join(f"{', '.join(f)}: {v}" for v, f in fams.items()) + ")"
            parts.append(text)
        return "; ".join(parts) or "-"


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def gauge_class(gauge_id: str) -> type[Gauge] | None:
    """The gauge class (or the diagnoser) whose ``id`` is ``gauge_id``; None for ``ANY_GAUGE``."""
    from .cluster import REPORTING_CLASSES  # the gauges import this module: read them when asked

    for cls in REPORTING_CLASSES:
        if cls.id == gauge_id:
            return cls
    return None
