"""The rule catalog: every rule id the core can raise, like ruff's rule list, collected from the gauge modules.

Each gauge module declares its rules (``Rule``, ``core/rule.py``) in a tuple beside the gauge class that decides
them: what a rule reads, how it decides, its severities, the parameters its thresholds come from, the seed's words
it implements, what a firing means, the fix, and its example streams. This module collects them in gauge order (the
order of ``cluster.GAUGE_CLASSES``, then ``value-out-of-range`` and the diagnoses), and reads the source for what it
can raise (``raised_rules``), so the catalog cannot drift from the code: ``tests/test_rule_catalog.py`` fails when a
rule the code can raise has no declaration, a declaration names a rule the code cannot raise or other severities
than the code's, or an example stops firing by its row or starts firing on its healthy stream.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import (
    attention_entropy,
    breaks_gauge,
    convergence,
    diagnosis,
    efficiency,
    entropy,
    gradients,
    kl,
    learning_rate,
    length,
    lora,
    loss,
    policy_ratio,
    reward,
    reward_signal,
    samples,
    sanity,
)
from .diagnosis import PATTERNS
from .gauge import Gauge
from .gauges import REPORTING_CLASSES
from .rule import ANY_GAUGE as ANY_GAUGE
from .rule import INSTRUMENTS as INSTRUMENTS
from .rule import POST as POST
from .rule import Example as Example
from .rule import Rule as Rule
from .sequential import SOONER_FACTOR, arl_for

CATALOG: tuple[Rule, ...] = (
    *loss.LOSS_RULES,
    *gradients.GRADIENT_RULES,
    *learning_rate.LEARNING_RATE_RULES,
    *attention_entropy.ATTENTION_ENTROPY_RULES,
    *samples.SAMPLES_RULES,
    *lora.LORA_RULES,
    *efficiency.EFFICIENCY_RULES,
    *convergence.CONVERGENCE_RULES,
    *reward.RULES,
    *kl.RULES,
    *policy_ratio.RULES,
    *length.RULES,
    *entropy.RULES,
    *reward_signal.RULES,
    *breaks_gauge.RULES,  # abrupt breaks in every series: the watcher the cluster runs after the gauges
    *sanity.RULES,  # value-out-of-range, which every gauge raises on the keys it reads
    *diagnosis.RULES,
)
"""Every rule, in gauge order."""

EXAMPLES: dict[tuple[str, str], Example] = {r.key: r.example for r in CATALOG}
"""(gauge, rule) -> its example streams."""


def by_key() -> dict[tuple[str, str], Rule]:
    return {r.key: r for r in CATALOG}


def rule_ids() -> frozenset[str]:
    """Every rule id the catalog documents (a per-function rule by its id without ``:<function>``)."""
    return _RULE_IDS


_RULE_IDS = frozenset(r.id for r in CATALOG)


def declared_fix(gauge_id: str, rule: str) -> str:
    """The fix ``gauge_id``'s declaration of ``rule`` gives (``Gauge.fix``: what a finding's message says to do)."""
    return _FIXES[(gauge_id, rule)]


_FIXES = {r.key: r.fix for r in CATALOG}


# -- what the reference shows of a rule, read from its gauge class ------------------------------------------------

def gauge_class(gauge_id: str) -> type[Gauge] | None:
    """The gauge class (or the diagnoser) whose ``id`` is ``gauge_id``; None for ``ANY_GAUGE``."""
    for cls in REPORTING_CLASSES:
        if cls.id == gauge_id:
            return cls
    return None


def budget(rule: Rule) -> str:
    """The false-alarm budget as the reference shows it: '-' for a rule held k rows (no budget declared)."""
    if not rule.budgeted:
        return "-"
    arl = float(gauge_class(rule.gauge).defaults[rule.budget_param]) if rule.budget_param else arl_for(0)  # type: ignore[union-attr]
    return f"ARL0 {arl:,.0f} rows (÷{SOONER_FACTOR:g} per warn_sooner)"


def thresholds(rule: Rule) -> dict[str, dict[str, Any]]:
    """``{param: {"default": value, <family>: value, ...}}`` read from the gauge class now."""
    cls = gauge_class(rule.gauge)
    out: dict[str, dict[str, Any]] = {}
    for name in rule.params:
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


def threshold_text(rule: Rule) -> str:
    """``warn=0.5 (ppo, online_dpo: 6.0); for=3`` -- or ``-`` for a rule without parameters."""
    parts = []
    for name, row in thresholds(rule).items():
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


# -- what the source can raise --------------------------------------------------------------------------------------

_RAISED: dict[str, set[str]] | None = None


def raised_rules(root: Path | None = None) -> dict[str, set[str]]:
    """``{rule id: severities}`` for every rule the core's source can raise, read from its syntax tree.

    Every ``.check(...)`` and ``Finding(...)`` call in ``core/*.py``: a literal id; an f-string id
    (``f"reward-ceiling:{fn}"`` is ``reward-ceiling``, one per reward function); an id built from a prefix
    (``NonFiniteTracker.check(..., "loss")`` with ``f"{prefix}-nonfinite"``); the diagnoser's ``pat.name``
    (every pattern); a name bound to a string constant (``RANGE_RULE``). A ``.check`` whose id is none of these
    is ``?<source>`` so the catalog test fails until this reader learns it."""
    global _RAISED
    if root is None and _RAISED is not None:
        return _RAISED
    base = root or Path(__file__).parent
    out: dict[str, set[str]] = {}
    templates: list[tuple[str, str]] = []  # (suffix after {prefix}, severity)
    prefixes: set[str] = set()
    trees = {f: ast.parse(f.read_text(encoding="utf-8")) for f in sorted(base.glob("*.py"))}
    consts = _string_constants(trees)
    for f, tree in trees.items():
        names = _imported_names(tree, consts, f.stem)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            callee = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if callee == "check" and len(node.args) >= 3:
                if (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                        and fn.value.id == "NonFiniteTracker"):
                    if len(node.args) >= 4 and isinstance(node.args[3], ast.Constant):
                        prefixes.add(str(node.args[3].value))
                    continue
                rid, sev = node.args[0], _const(node.args[2])
                for name in _ids(rid, names, templates, sev):
                    out.setdefault(name, set()).add(sev)
            elif callee == "Finding" and len(node.args) >= 3:
                rid, sev = node.args[1], _const(node.args[2])
                if isinstance(rid, ast.Name) and rid.id in names:
                    out.setdefault(names[rid.id], set()).add(sev)
                elif isinstance(rid, ast.Constant) and isinstance(rid.value, str):
                    out.setdefault(rid.value, set()).add(sev)
    for prefix in prefixes:
        for suffix, sev in templates:
            out.setdefault(prefix + suffix, set()).add(sev)
    if root is None:
        _RAISED = out
    return out


def _const(node: ast.AST) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"


def _ids(node: ast.AST, names: dict[str, str], templates: list[tuple[str, str]], sev: str) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and str(head.value).endswith(":"):
            yield str(head.value)[:-1]
        elif (isinstance(head, ast.FormattedValue) and isinstance(head.value, ast.Name) and head.value.id == "prefix"
              and len(node.values) == 2 and isinstance(node.values[1], ast.Constant)):
            templates.append((str(node.values[1].value), sev))
        else:
            yield "?" + ast.unparse(node)
    elif isinstance(node, ast.Attribute) and node.attr == "name" and ast.unparse(node) == "pat.name":
        yield from (p.name for p in PATTERNS)
    elif isinstance(node, ast.Name) and node.id in names:
        yield names[node.id]
    else:
        yield "?" + ast.unparse(node)


def _string_constants(trees: dict[Path, ast.Module]) -> dict[str, dict[str, str]]:
    """``{module stem: {NAME: "value"}}`` of module-level string constants."""
    out: dict[str, dict[str, str]] = {}
    for f, tree in trees.items():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                out.setdefault(f.stem, {})[node.targets[0].id] = node.value.value
    return out


def _imported_names(tree: ast.Module, consts: dict[str, dict[str, str]], stem: str) -> dict[str, str]:
    """The string constants a module can name: its own and those it imports from a sibling module."""
    names = dict(consts.get(stem, {}))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in consts:
            for alias in node.names:
                if alias.name in consts[node.module]:
                    names[alias.asname or alias.name] = consts[node.module][alias.name]
    return names
