"""Deciding what is broken, kept apart from telling anyone (see notify.py).

Each rule moves through inactive → pending (condition true, fewer than ``for``
evaluations) → firing → resolved (false for more than ``keep_firing_for``
evaluations), Prometheus-style. A firing ``stop`` rule silences the warn/info
rules of its own gauge (and any rule it ``inhibits``); a rule that fired within
its ``cooldown`` is journaled but not notified again.
"""

from __future__ import annotations

import math
import re
import string
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import Any

from ..core import InstrumentCluster
from ..core.doc_links import alert_doc_url, rule_doc_url
from ..core.findings import SEVERITY_RANK, Finding, Level
from ..core.keys import to_float
from .config import MAX_RENDERED, AlertConfig, Rule, format_spec_problem


class AlertState(IntEnum):
    """Where a rule is; its value is what the run logs as ``rlcluster/alerts/<rule>``."""

    INACTIVE = 0
    PENDING = 1
    FIRING = 2


INACTIVE, PENDING, FIRING = AlertState


@dataclass(slots=True)
class RuleState:
    """One rule's progress: its state, the rows in a row its condition held, and the quiet rows while firing."""

    state: AlertState = INACTIVE
    held: int = 0
    quiet: int = 0


@dataclass
class AlertEvent:
    """A rule starting to fire or resolving; what the journal, W&B and channels receive."""

    kind: str  # "firing" | "resolved"
    rule: str
    gauge: str
    severity: str
    step: int
    value: float | None
    metric: str
    title: str
    text: str
    notify: bool
    suppressed: str | None = None  # "cooldown" | "inhibited by <rule>"
    cooldown: float = 0.0
    time: float = 0.0
    #: example completions (rollout evidence, see RLClusterCallback.attach); journaled only when present
    evidence: list[dict[str, Any]] = field(default_factory=list)
    #: the manual's page for what fired (``core/doc_links.py``); empty: worked out from ``rule`` and ``gauge``
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.doc:
            self.doc = event_doc_url(self.rule)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["value"] is not None and not math.isfinite(d["value"]):
            d["value"] = str(d["value"])
        if not d["evidence"]:
            del d["evidence"]
        return d


def event_doc_url(rule: str, label: str | None = None) -> str:
    """Where an alert is explained: for a forwarded finding (``label``, the gauge rule that fired, differs from the
    alert rule's name) the gauge rule's page; else the alert rule's own entry, which ``rlcluster rules NAME`` prints
    for shipped rules, a user's rules and the liveness alerts (stall, crash, signal) alike."""
    from ..core.catalog import rule_ids

    if label and label != rule and label.split(":", 1)[0] in rule_ids():
        return rule_doc_url(label)
    return alert_doc_url(rule)


class _SafeFormatter(string.Formatter):
    """str.format without attribute or index access, tolerant of missing values, bounded in size.

    Validation already refuses wide format specs in a file; this guard also holds for rules built
    in Python, where ``{value:>300000000}`` would otherwise print hundreds of megabytes.
    """

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        if not field_name.isidentifier():
            return "{" + field_name + "}", field_name
        return kwargs.get(field_name, ""), field_name

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec_problem(format_spec):
            format_spec = ""
        try:
            out = format(value, format_spec)
        except (ValueError, TypeError, OverflowError):
            out = "n/a" if value is None or value == "" else str(value)
        return out if len(out) <= MAX_RENDERED else out[: MAX_RENDERED - 1] + "…"


_FMT = _SafeFormatter()


def stop_finding(stop_on: str | None, events: Iterable[AlertEvent] | None, fired: Iterable[Finding]) -> Finding | None:
    """What stops a run at this row: the first firing alert event at the ``stop_on`` severity ("stop", or "warn":
    stop and warn), or, without an alert engine (``events`` None), the first such finding. None when nothing does.
    Shared by the callback and ``watch()``/the sidecar, so they stop on the same thing."""
    if not stop_on:
        return None
    wanted = ("stop",) if stop_on == "stop" else ("stop", "warn")
    if events is not None:
        e = next((e for e in events if e.kind == "firing" and e.severity in wanted), None)
        # a rule's severity was checked against SEVERITIES when its file was loaded
        return None if e is None else Finding(e.gauge, e.rule, e.severity, e.step, e.metric, e.value, e.title)  # type: ignore[arg-type]
    return next((f for f in fired if f.severity in wanted), None)


def render(template: str, fields: Mapping[str, Any]) -> str:
    """The rendered template, at most ``MAX_RENDERED`` characters; the template itself if it cannot render."""
    try:
        out = _FMT.vformat(template, (), dict(fields))
    except (ValueError, IndexError, KeyError, RecursionError):
        out = template
    return out if len(out) <= MAX_RENDERED else out[: MAX_RENDERED - 1] + "…"


class AlertEngine:
    """Evaluates the alert rules on every logged row.

    Args:
        config: a validated ``AlertConfig``.
        run_name, run_url, project: template fields.
        clock: wall-clock source for cooldowns (None: no cooldown, as in offline analysis).
    """

    def __init__(self, config: AlertConfig, *, run_name: str | None = None, run_url: str | None = None,
                 project: str | None = None, clock: Callable[[], float] | None = time.time,
                 warn_sooner: int = 0) -> None:
        """``warn_sooner``: rows taken off the ``for:`` of every warn-severity rule (never under 1), as the gauges take
        them off their warn holds (``InstrumentCluster(warn_sooner=...)``); stop rules keep theirs."""
        self.config = config
        self.warn_sooner = warn_sooner
        self.fields = {"run_name": run_name or "this run", "run_url": run_url or "", "project": project or ""}
        self.clock = clock
        self.state: dict[str, RuleState] = {r.name: RuleState() for r in config.rules}
        self.last_notified: dict[str, float] = {}
        self.last_finding: dict[tuple[str, str], Finding] = {}
        self.fired_total = 0
        self._patterns = {r.name: re.compile(r.finding) for r in config.rules if r.finding is not None}
        self._by_name = {r.name: r for r in config.rules}

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(self, step: int, raw: Mapping[str, Any], cluster: InstrumentCluster,
                 fired: Iterable[Finding] = (), updated: set[str] | None = None,
                 findings_only: bool = False) -> list[AlertEvent]:
        """One logged row, right after ``cluster.update(raw)``: returns the events (firing / resolved) it produced.

        ``updated`` is the set of gauges that read the row (``cluster.last_updated``); None evaluates all.
        ``findings_only``: the end of training (``fired`` is ``cluster.finalize()``'s findings, no new row): a rule
        that matches one of them fires now, whatever its ``for`` (there is no next row to wait for); no other rule's
        state moves (a metric rule or a pending finding rule would count the last row twice).
        """
        if findings_only:
            return self._final(step, cluster, list(fired))
        for f in fired:
            self.last_finding[(f.gauge, f.rule)] = f
        family = cluster.family
        self.fields["trainer"] = family or ""
        values = _Lookup(raw, cluster, updated)
        events: list[AlertEvent] = []
        for rule in self.config.rules:
            if not rule.applies_to(family):
                continue
            gauge = cluster.gauges.get(rule.gauge)
            if gauge is None:
                continue
            # Nothing this rule reads changed on this row: no evaluation, no state change (a key logged
            # every other row must not reset a `for` counter).
            if rule.when is not None:
                if not values.any_in_row(rule.when.names):
                    continue
                active, value = rule.when.evaluate(values.get)
                metric = rule.when.names[0] if rule.when.names else ""
                message = f"{rule.when.text} (value {value:.4g})" if isinstance(value, float) else rule.when.text
                label = rule.name
            else:
                if updated is not None and rule.gauge not in updated:
                    continue
                st = self.state.get(rule.name)
                if st is not None and st.state == INACTIVE and not st.held and not gauge.firing():
                    continue  # nothing firing in the gauge and nothing pending: this row changes nothing
                match = self._matching_finding(rule, gauge)
                active = match is not None
                value = match.value if match else None
                metric = match.metric if match else ""
                message = match.message if match else ""
                label = match.rule if match else rule.name
            st = self.state.setdefault(rule.name, RuleState())
            if active:
                st.held += 1
                st.quiet = 0
                if st.state != FIRING:
                    st.state = FIRING if st.held >= rule.hold(self.warn_sooner) else PENDING
                    if st.state == FIRING:
                        events.append(self._event("firing", rule, step, value, metric, message, label))
            else:
                st.held = 0
                if st.state == FIRING:
                    st.quiet += 1
                    if st.quiet > rule.keep_firing_for:
                        st.state = INACTIVE
                        events.append(self._event("resolved", rule, step, value, metric, message, rule.name))
                elif st.state == PENDING:
                    st.state = INACTIVE
        self._route(events)
        return events

    def _final(self, step: int, cluster: InstrumentCluster, final: list[Finding]) -> list[AlertEvent]:
        events: list[AlertEvent] = []
        for rule in self.config.rules:
            if rule.when is not None or not rule.applies_to(cluster.family):
                continue
            st = self.state.setdefault(rule.name, RuleState())
            if st.state == FIRING:
                continue
            f = self._best_match(rule, final)
            if f is not None:
                self.last_finding[(f.gauge, f.rule)] = f
                st.state, st.quiet = FIRING, 0
                events.append(self._event("firing", rule, step, f.value, f.metric, f.message, f.rule))
        self._route(events)
        return events

    def _matching_finding(self, rule: Rule, gauge: Any) -> Finding | None:
        """The finding behind the worst of ``gauge``'s firing core rules that ``rule`` matches."""
        return self._best_match(rule, (self.last_finding.get((rule.gauge, r)) for r in gauge.firing()))

    def _best_match(self, rule: Rule, findings: Iterable[Finding | None]) -> Finding | None:
        """The worst finding (the first of equals) of ``rule``'s gauge that its pattern and ``min_severity`` take."""
        pat = self._patterns[rule.name]
        best: Finding | None = None
        min_rank = SEVERITY_RANK[rule.min_severity]
        for f in findings:
            if (f is None or f.gauge != rule.gauge or SEVERITY_RANK.get(f.severity, 0) < min_rank
                    or not pat.match(f.rule)):
                continue
            if best is None or SEVERITY_RANK[f.severity] > SEVERITY_RANK[best.severity]:
                best = f
        return best

    def _event(self, kind: str, rule: Rule, step: int, value: float | None, metric: str, message: str,
               label: str) -> AlertEvent:
        fields = {**self.fields, "value": value, "step": step, "rule": label, "gauge": rule.gauge,
                  "severity": rule.severity, "metric": metric, "message": message,
                  "expr": rule.when.text if rule.when else "", "rows": rule.hold(self.warn_sooner)}
        title = render(rule.title, fields)
        text = render(rule.text, fields) if kind == "firing" else f"Resolved: {title}"
        return AlertEvent(kind=kind, rule=rule.name, gauge=rule.gauge, severity=rule.severity, step=step,
                          value=value, metric=metric, title=title, text=text, notify=kind == "firing",
                          cooldown=rule.cooldown, time=self.clock() if self.clock else 0.0,
                          doc=event_doc_url(rule.name, label))

    def _route(self, events: list[AlertEvent]) -> None:
        """Inhibition and cooldown: which firing events are notified."""
        if not events:
            return
        firing = [r for r in self.config.rules if r.name in self.state and self.state[r.name].state == FIRING]
        for e in events:
            if e.kind != "firing":
                continue
            self.fired_total += 1
            for other in firing:
                if other.name == e.rule:
                    continue
                stop_silences = (other.severity == "stop" and other.gauge == e.gauge
                                 and SEVERITY_RANK[e.severity] < SEVERITY_RANK["stop"])
                if stop_silences or e.rule in other.inhibits:
                    e.notify, e.suppressed = False, f"inhibited by {other.name}"
                    break
            if not e.notify:
                continue
            rule = self._by_name[e.rule]
            if self.clock is not None and rule.cooldown > 0:
                last = self.last_notified.get(e.rule)
                now = self.clock()
                if last is not None and now - last < rule.cooldown:
                    e.notify, e.suppressed = False, "cooldown"
                    continue
                self.last_notified[e.rule] = now

    # -- reading ---------------------------------------------------------------------------------
    def states(self) -> dict[str, AlertState]:
        return {name: st.state for name, st in self.state.items()}

    def firing(self) -> list[str]:
        return [name for name, st in self.state.items() if st.state == FIRING]

    def state_dict(self) -> dict[str, Any]:
        # [state, held, quiet] per rule: the checkpoint format of every version
        return {"state": {k: [int(v.state), v.held, v.quiet] for k, v in self.state.items()},
                "last_notified": dict(self.last_notified), "fired_total": self.fired_total}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for k, v in (state.get("state") or {}).items():
            if k in self.state and isinstance(v, list) and len(v) == 3 and INACTIVE <= int(v[0]) <= FIRING:
                self.state[k] = RuleState(AlertState(int(v[0])), int(v[1]), int(v[2]))
        self.last_notified.update({k: float(v) for k, v in (state.get("last_notified") or {}).items()})
        self.fired_total = int(state.get("fired_total", 0))


class _Lookup:
    """Metric lookup for expressions: raw keys, canonical keys, then rlcluster derived values."""

    def __init__(self, raw: Mapping[str, Any], cluster: InstrumentCluster, updated: set[str] | None) -> None:
        self.raw = raw
        self.cluster = cluster
        self.updated = updated
        self._canon: dict[str, float] | None = None

    def _canonical(self) -> dict[str, float]:
        if self._canon is None:  # the cluster already normalised this row: reuse it, do not redo it
            row = self.cluster.last_row
            self._canon = row.values if row is not None else {}
        return self._canon

    def any_in_row(self, names: Iterable[str]) -> bool:
        for n in names:
            if n.startswith("rlcluster/"):
                parts = n.split("/", 2)
                if self.updated is None or (len(parts) > 1 and parts[1] in self.updated):
                    return True
                continue
            if n in self.raw or n.removeprefix("train/") in self._canonical():
                return True
        return False

    def get(self, name: str) -> float | None:
        if name.startswith("rlcluster/"):
            parts = name.split("/", 2)
            if len(parts) == 3:
                g = self.cluster.gauges.get(parts[1])
                if g is not None:
                    if parts[2] == "status":
                        return float(Level.of(g.status))
                    return g.derived.get(parts[2])
            return None
        v = self.raw.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return to_float(v)  # 10**400 is +inf, not an OverflowError
        return self._canonical().get(name.removeprefix("train/"))
