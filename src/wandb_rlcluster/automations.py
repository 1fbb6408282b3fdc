"""W&B-side rules: the alert rules W&B can evaluate itself, exported as W&B Automations.

The callback's rules run in the training process; if that process (or its machine) is gone,
or a run is watched by nobody, only W&B's own evaluation still fires. A rule maps to an
``OnRunMetric`` automation when it watches one logged metric against a constant:

- ``kl > 0.5`` with ``for: 3`` -> ``MIN(train/kl) over the last 3 values > 0.5`` (held for the window:
  the smallest of the last 3 values is above; ``<`` and ``<=`` use MAX). W&B's window counts the
  metric's logged values, as ``for:`` counts the logged rows that carry it;
- a threshold on rlcluster's robust z-score (``rlcluster/kl/kl_z > 10``) -> W&B's z-score event on the
  metric it is computed from (``train/kl``, window 30: the kl gauge's window). W&B's z-score uses the
  mean and standard deviation of the window, rlcluster's the median and MAD: the same spikes, less
  robust to earlier outliers;

plus one ``OnRunState`` automation for runs that end failed or crashed. Every other rule is listed
with the reason it cannot map (built-in findings and combined conditions need rlcluster's state).
Notifications go to a Slack integration of the entity (or a generic webhook). W&B Automations need a
paid W&B plan (Pro or Enterprise), and a team admin to create them.

What W&B sends is its own text, not the rule's (a stop rule's text says training was stopped: W&B
stops nothing). While the training process is alive, its callback alerts on the same rule too, so
each such event is notified twice. W&B filters runs by their display name only: a rule's
``trainers:`` cannot be kept (the automation watches every run of the project that logs the
metric) unless ``run_name`` narrows it to runs named by a pattern.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .alerts.config import AlertConfig, Rule
from .alerts.expr import Node

WANDB_SEVERITY = {"info": "INFO", "warn": "WARN", "stop": "ERROR"}
FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
# rlcluster's robust z-scores and what they are computed from: key -> (source metric by trainer family, window)
Z_SCORES: dict[str, tuple[dict[str, str], int]] = {
    "rlcluster/kl/kl_z": ({"grpo": "kl", "ppo": "objective/kl", "online_dpo": "objective/kl"}, 30),
}
PLACEHOLDER_PROJECT_ID = "<project id>"
PLACEHOLDER_INTEGRATION_ID = "<integration id>"


@dataclass(frozen=True)
class Planned:
    """One automation to create."""

    name: str
    kind: str  # "threshold" | "zscore" | "run-state"
    condition: str  # what W&B evaluates, in words
    severity: str  # info | warn | stop
    title: str
    message: str
    rule: str | None = None
    metric: str | None = None
    notes: tuple[str, ...] = ()
    filter_args: dict[str, Any] = field(default_factory=dict)
    trainers: tuple[str, ...] = ()  # the rule's scope in the callback, which W&B cannot keep
    run_name: str | None = None  # a regular expression over the run's display name (W&B's only run filter)

    def event(self, scope: Any) -> Any:
        from wandb.automations import MetricThresholdFilter, MetricZScoreFilter, OnRunMetric, OnRunState, RunEvent
        from wandb.automations.events import RunMetricFilter, RunStateFilter

        runs: dict[str, Any] = {"run": RunEvent.name.matches_regex(self.run_name)} if self.run_name else {}
        if self.kind == "threshold":
            # wandb's pydantic models: validators fill event_type and wrap the metric filter, which mypy cannot see
            return OnRunMetric(scope=scope, filter=RunMetricFilter(metric=MetricThresholdFilter(**self.filter_args),  # type: ignore[call-arg, arg-type]
                                                                   **runs))
        if self.kind == "zscore":
            return OnRunMetric(scope=scope, filter=RunMetricFilter(metric=MetricZScoreFilter(**self.filter_args),  # type: ignore[call-arg, arg-type]
                                                                   **runs))
        return OnRunState(scope=scope, filter=RunStateFilter(state=RunEvent.state.in_(self.filter_args["states"]),
                                                             **runs))

    def description(self) -> str:
        what = f"rlcluster rule {self.rule!r}" if self.rule else "rlcluster"
        return f"{what}: {self.condition}." + "".join(f" {n}" for n in self.notes)


@dataclass(frozen=True)
class Unmapped:
    rule: str
    reason: str


def wandb_key(name: str) -> str:
    """The key W&B stores a logged metric under: transformers' WandbCallback prefixes train/ (eval_x -> eval/x)."""
    if name.startswith(("rlcluster/", "train/", "eval/", "test/")):
        return name
    for prefix in ("eval_", "test_"):
        if name.startswith(prefix):
            return f"{prefix[:-1]}/{name[len(prefix):]}"
    return f"train/{name}"


def _number(n: Node) -> float | None:
    if n.kind == "num":
        return float(n.value)  # type: ignore[arg-type]
    if n.kind == "neg" and n.args[0].kind == "num":
        return -float(n.args[0].value)  # type: ignore[arg-type]
    return None


def _is_guard(n: Node) -> bool:
    """``not <a comparison of an rlcluster/ value>``: a guard on the callback's own reading (the KL gauge's
    ``to_teacher``), which W&B cannot see."""
    return (n.kind == "not" and n.args[0].kind == "cmp"
            and any(a.kind == "name" and str(a.value).startswith("rlcluster/") for a in n.args[0].args))


def single_comparison(rule: Rule) -> tuple[str, bool, str, float] | str:
    """(metric, under abs(), operator, threshold) of a rule that compares one metric with a constant, else why not.

    A rule that is such a comparison ``and`` a guard on rlcluster's own reading gives W&B the comparison: W&B cannot
    read the guard, so its rule is the looser one."""
    if rule.when is None or rule.when.root is None:
        return "no 'when' expression"
    root = rule.when.root
    if root.kind == "and" and any(_is_guard(a) for a in root.args):
        root = next(a for a in root.args if not _is_guard(a))
    if root.kind != "cmp":
        return f"{rule.when.text!r} combines conditions (and/or/not): a W&B automation watches one metric"
    op = str(root.value)
    left, right = root.args
    if _number(left) is not None and _number(right) is None:
        left, right, op = right, left, FLIP.get(op, op)
    threshold = _number(right)
    under_abs = left.kind == "call" and left.value == "abs" and left.args[0].kind == "name"
    metric_node = left.args[0] if under_abs else left
    if threshold is None or metric_node.kind != "name":
        return f"{rule.when.text!r} is not one metric compared with a constant (arithmetic or functions of metrics)"
    if op not in FLIP:
        return f"{rule.when.text!r} uses {op}: W&B thresholds compare with >, >=, < or <="
    return str(metric_node.value), under_abs, op, threshold


def _title(rule: Rule, condition: str) -> str:
    return f"[rlcluster] {rule.name}: {condition}"[:250]


def _runs(project: str, run_name: str | None) -> str:
    return f"a run in {project}" + (f" whose name matches {run_name!r}" if run_name else "")


def _message(rule: Rule, condition: str, project: str, run_name: str | None) -> str:
    """W&B's own words: the rule's text speaks for the callback ("training was stopped") and would be false here."""
    text = (f"W&B saw {condition} on {_runs(project, run_name)} (rlcluster rule {rule.name!r}, gauge {rule.gauge}, "
            f"severity {rule.severity}).")
    if rule.severity == "stop":
        text += (" In the training process, rlcluster's callback stops training on this rule; this notification "
                 "comes from W&B and stops nothing.")
    if rule.trainers and not run_name:
        text += (f" The rule is for {', '.join(rule.trainers)} runs, but W&B cannot tell a run's trainer: any run "
                 "that logs this metric matches.")
    return text + (" While the training process is alive, its callback alerts on this rule too: one event, two "
                   "notifications.")


def _plan_rule(rule: Rule, project: str, run_name: str | None = None) -> Planned | Unmapped:
    if rule.finding is not None:
        return Unmapped(rule.name, "forwards the gauge's built-in findings, which rlcluster computes in the training "
                                   "process from its own state (baselines, windows): not a logged metric W&B can watch")
    parsed = single_comparison(rule)
    if isinstance(parsed, str):
        return Unmapped(rule.name, parsed)
    metric, under_abs, op, threshold = parsed
    if run_name:
        notes = [f"Evaluated by W&B on the runs whose name matches {run_name!r}."]
    else:
        notes = [f"Evaluated by W&B on every run of the project that logs the metric (the rule is for "
                 f"{', '.join(rule.trainers)} runs: W&B filters runs by name only)." if rule.trainers else ""]
    if rule.keep_firing_for:
        notes.append("W&B notifies on each match; rlcluster's keep_firing_for and cooldown do not apply.")
    if metric in Z_SCORES:
        sources, window = Z_SCORES[metric]
        families = set(rule.trainers) or set(sources)
        source = {sources[f] for f in families if f in sources}
        if len(source) != 1:
            return Unmapped(rule.name, f"{metric} is computed from {' or '.join(sorted(set(sources.values())))} "
                                       "depending on the trainer: give the rule `trainers:` (e.g. [grpo])")
        if rule.for_ > 1:
            return Unmapped(rule.name, f"'for: {rule.for_}' on a z-score: W&B's z-score event fires on one value "
                                       "and has no hold window")
        if threshold <= 0 and not (op in ("<", "<=") and not under_abs and threshold < 0):
            return Unmapped(rule.name, "a z-score threshold must be away from 0 (e.g. > 4, or < -4)")
        key = wandb_key(source.pop())
        if under_abs:
            if op not in (">", ">="):
                return Unmapped(rule.name, "abs(z) < k is not a W&B z-score event (only deviations above k are)")
            direction, cond = "ANY", f"|z-score of {key}| over the last {window} values > {threshold:g}"
        elif op in (">", ">="):
            direction, cond = "INCREASE", f"z-score of {key} over the last {window} values > {threshold:g}"
        else:
            direction, cond = "DECREASE", f"z-score of {key} over the last {window} values < {threshold:g}"
        notes.append("W&B's z-score uses the window's mean and standard deviation; rlcluster's robust z its median "
                     "and MAD.")
        return Planned(name=f"rlcluster-{project}-{rule.name}", kind="zscore", condition=cond,
                       severity=rule.severity, title=_title(rule, cond),
                       message=_message(rule, cond, project, run_name), rule=rule.name, metric=key,
                       notes=tuple(n for n in notes if n),
                       filter_args={"name": key, "window": window, "threshold": abs(threshold),
                                    "change_dir": direction}, trainers=tuple(rule.trainers), run_name=run_name)
    if under_abs:
        return Unmapped(rule.name, f"{rule.when.text!r} takes abs() of the metric: W&B thresholds compare the value")  # type: ignore[union-attr]
    key = wandb_key(metric)
    args: dict[str, Any] = {"name": key, "cmp": op, "threshold": threshold}
    if rule.for_ > 1:
        agg = "MIN" if op in (">", ">=") else "MAX"
        args.update(agg=agg, window=rule.for_)
        cond = f"{agg}({key}) over the last {rule.for_} values {op} {threshold:g}"
    else:
        cond = f"{key} {op} {threshold:g}"
    return Planned(name=f"rlcluster-{project}-{rule.name}", kind="threshold", condition=cond,
                   severity=rule.severity, title=_title(rule, cond), message=_message(rule, cond, project, run_name),
                   rule=rule.name, metric=key, notes=tuple(n for n in notes if n),
                   filter_args=args, trainers=tuple(rule.trainers), run_name=run_name)


def plan(config: AlertConfig, project: str, run_name: str | None = None) -> tuple[list[Planned], list[Unmapped]]:
    """The automations for ``config``'s rules in ``project``, and the rules that cannot map (with why).

    ``run_name``: a regular expression over the runs' display names that every automation is limited to.
    """
    planned: list[Planned] = []
    unmapped: list[Unmapped] = []
    sooner = config.warn_sooner or 0  # the file's warn_sooner: takes the same rows off a warn rule's window
    for rule in config.rules:
        p = _plan_rule(replace(rule, for_=rule.hold(sooner)) if sooner else rule, project, run_name)
        (unmapped if isinstance(p, Unmapped) else planned).append(p)  # type: ignore[arg-type]
    cond = "a run ends failed or crashed (W&B's FAILED state covers both)"
    planned.append(Planned(
        name=f"rlcluster-{project}-run-failed", kind="run-state", condition=cond, severity="stop",
        title=f"[rlcluster] a run in {project} failed or crashed",
        message=(f"W&B saw {_runs(project, run_name)} end in the failed/crashed state: the training process "
                 "raised, was killed or lost its machine. rlcluster's own crash alert (or its guardian's, after a "
                 "kill -9) names the step and the last checkpoint, when the machine could still send it."),
        notes=("Fires even when the training machine is gone.",), filter_args={"states": ["FAILED"]},
        run_name=run_name))
    return planned, unmapped


def _action(p: Planned, integration_id: str, webhook: bool) -> Any:
    from wandb.automations import SendNotification, SendWebhook

    if webhook:
        payload = {"source": "rlcluster", "automation": p.name, "rule": p.rule, "severity": p.severity,
                   "title": p.title, "text": p.message}
        return SendWebhook(integration_id=integration_id, request_payload=payload)  # type: ignore[call-arg]  # pydantic alias
    return SendNotification(integration_id=integration_id, title=p.title, message=p.message,
                            severity=WANDB_SEVERITY[p.severity])  # type: ignore[arg-type]  # pydantic parses the name


def graphql_input(p: Planned, scope: Any, integration_id: str, webhook: bool = False) -> dict[str, Any]:
    """The ``CreateFilterTriggerInput`` wandb sends for ``p`` (what --dry-run prints, with placeholder ids)."""
    from wandb.automations._inputs import prepare_to_create

    auto = p.event(scope) >> _action(p, integration_id, webhook)
    return prepare_to_create(auto, name=p.name, description=p.description()).model_dump()


def render_plan(planned: Sequence[Planned], unmapped: Sequence[Unmapped], entity: str, project: str,
                target: str) -> str:
    """The --dry-run text: each automation in words, then the rules that stay with the callback and why."""
    lines = [f"W&B Automations for {entity}/{project} (dry run: nothing sent; W&B Automations need a paid plan)",
             f"would create {len(planned)}, each notifying {target}:"]
    width = max(len(p.name) for p in planned)
    for p in planned:
        event = {"threshold": "RUN_METRIC", "zscore": "RUN_METRIC_ZSCORE", "run-state": "RUN_STATE"}[p.kind]
        lines.append(f"  {p.name:<{width}}  {event:<17}  {WANDB_SEVERITY[p.severity]:<5}  {p.condition}")
    scoped = [p for p in planned if p.trainers and not p.run_name]
    if scoped:
        lines.append(f"W&B filters runs by name only: {', '.join(p.rule or p.name for p in scoped)} will also fire "
                     "for runs of other trainers that log the same metric (--run-name REGEX narrows them)")
    lines.append("while a training process is alive, its callback alerts on these rules too: each such event is "
                 "notified twice")
    lines.extend(render_unmapped(unmapped))
    return "\n".join(lines)


def render_unmapped(unmapped: Sequence[Unmapped]) -> list[str]:
    """The rules that stay with the callback, grouped by why."""
    lines = [f"cannot map {len(unmapped)} rule(s); they stay with the callback:"]
    by_reason: dict[str, list[str]] = {}
    for u in unmapped:
        by_reason.setdefault(u.reason, []).append(u.rule)
    for reason, rules in by_reason.items():
        lines.append(f"  {', '.join(rules)}: {reason}")
    return lines


def render_inputs(planned: Sequence[Planned], project: str, webhook: bool = False) -> str:
    """One JSON line per automation: the GraphQL input it would be created with (placeholder ids)."""
    from wandb.automations import ProjectScope

    scope = ProjectScope(id=PLACEHOLDER_PROJECT_ID, name=project)
    return "\n".join(json.dumps(graphql_input(p, scope, PLACEHOLDER_INTEGRATION_ID, webhook), sort_keys=True)
                     for p in planned)


class ExportError(RuntimeError):
    """A one-line reason the export cannot go on (no integration, permission, plan)."""


def export(planned: Sequence[Planned], entity: str, project: str, *, slack_channel: str | None = None,
           webhook: str | None = None, api: Any = None,
           echo: Callable[[str], None] = print) -> list[str]:
    """Create the automations in W&B; returns the names created (an existing one with the same name is kept)."""
    import wandb

    api = api if api is not None else wandb.Api()
    if webhook:
        hooks = [h for h in api.webhook_integrations(entity=entity) if h.name == webhook]
        if not hooks:
            raise ExportError(f"no webhook integration named {webhook!r} in entity {entity!r}: add it in the team's "
                              "W&B settings (Webhooks)")
        integration_id = hooks[0].id
    else:
        hooks = list(api.slack_integrations(entity=entity))
        if slack_channel:
            hooks = [h for h in hooks if h.channel_name.lstrip("#") == slack_channel.lstrip("#")]
        if not hooks:
            where = f" posting to {slack_channel!r}" if slack_channel else ""
            raise ExportError(f"no Slack integration{where} in entity {entity!r}: connect Slack in the team's W&B "
                              "settings, or pass --webhook NAME")
        integration_id = hooks[0].id
    scope = api.project(project, entity=entity)
    created: list[str] = []
    for p in planned:
        auto = p.event(scope) >> _action(p, integration_id, bool(webhook))
        try:
            api.create_automation(auto, name=p.name, description=p.description())
        except ValueError as e:
            if "exists" in str(e):
                echo(f"exists   {p.name} (left as is)")
                continue
            raise ExportError(f"could not create {p.name}: {str(e).splitlines()[0]}") from None
        except Exception as e:  # noqa: BLE001 - one line, never a traceback
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ExportError(f"could not create {p.name}: {msg} (W&B Automations need a paid plan and "
                              "permission to manage the entity's automations)") from None
        created.append(p.name)
        echo(f"created  {p.name}  {p.condition}")
    return created
