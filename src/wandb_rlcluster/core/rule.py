"""A rule as its gauge declares it, beside the code that decides it: like a ruff rule's entry.

A declaration says what the rule reads, how it decides today (its noise model and test, in a phrase), its
severities, the parameters its thresholds come from (their values are read from the gauge's ``defaults`` /
``family_defaults`` when asked, never copied here), the seed's words it implements (a verbatim quote of the Part II
post or of ``shared/INSTRUMENTS.md``, or none), what a firing means, the fix, and its example streams (a firing
stream and a healthy one, made by the row makers of ``core/streams.py``). Each gauge module holds a tuple of them
next to its gauge class; ``core/catalog.py`` collects them in gauge order and reads what needs the gauge classes
(thresholds, budgets). This module imports no other core module, so every gauge module can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import numpy as np

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

    def __post_init__(self) -> None:
        _FIXES[(self.gauge, self.id)] = self.fix

    @property
    def key(self) -> tuple[str, str]:
        return (self.gauge, self.id)


def declared_fix(gauge_id: str, rule: str) -> str:
    """The fix ``gauge_id``'s declaration of ``rule`` gives (``Gauge.fix``: what a finding's message says to do).

    Each declaration enters itself here when its gauge module builds it, so a gauge reads its fix without importing
    the catalog (which imports every gauge module)."""
    return _FIXES[(gauge_id, rule)]


_FIXES: dict[tuple[str, str], str] = {}
"""(gauge, rule) -> the fix its declaration gives; filled by ``Rule.__post_init__``."""
