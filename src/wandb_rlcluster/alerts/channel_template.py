"""Templates of the HTTP channels: ``{field}`` over the alert, ``${ENV_VAR}`` for a secret from the environment.

Why two kinds of placeholder: a webhook body names the alert's fields (``{rule}``, ``{state}``...), while a header or
a body field such as PagerDuty's ``routing_key`` needs a secret that must never be written in ``alerts.yaml``. A
``${NAME}`` is replaced by the variable's value as it was when the channel started, and never goes through the
formatter (a brace in a token is just a brace); every such value is then masked in the channel's errors.

A string that is one whole field, ``"{value}"``, keeps the field's JSON type (a number, an integer step, null when
unknown, the examples as a list); any other string is text.
"""

from __future__ import annotations

import datetime
import math
import re
import string
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..core.text import did_you_mean
from .located import env_name_problem, format_spec_problem

if TYPE_CHECKING:  # the settings' checks import this module before training: no channel code loaded for them
    from .channels import AlertMessage

#: The fields a channel template may name (the rule templates' fields are in config.TEMPLATE_FIELDS).
CHANNEL_FIELDS = frozenset({"title", "message", "text", "severity", "state", "rule", "gauge", "metric", "value",
                            "step", "run_name", "run_url", "project", "doc", "alert_id", "time", "examples"})
#: ``${NAME}``: an environment variable's value.
ENV_REF = re.compile(r"\$\{([^{}]*)\}")
#: Header names whose values are credentials: written as ``${NAME}`` in a file, masked in every error.
SECRET_HEADER = re.compile(r"(?i)^(?:authorization|proxy-authorization|cookie)$|token|key|secret|auth|signature|"
                           r"password|session|credential")
_WHOLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Longest template string, longest rendered string.
MAX_TEMPLATE_CHARS = 2000
MAX_RENDERED = 4000

#: The webhook's body when ``body:`` is not given: every field, typed.
DEFAULT_BODY: dict[str, Any] = {
    "source": "wandb-rlcluster", "state": "{state}", "severity": "{severity}", "rule": "{rule}", "gauge": "{gauge}",
    "metric": "{metric}", "value": "{value}", "step": "{step}", "title": "{title}", "message": "{message}",
    "run_name": "{run_name}", "run_url": "{run_url}", "project": "{project}", "doc": "{doc}",
    "alert_id": "{alert_id}", "time": "{time}", "examples": "{examples}",
}


def env_names(text: str) -> list[str]:
    """The environment variables a string names with ``${NAME}``."""
    return ENV_REF.findall(text)


def walk_strings(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every string leaf of a body template with its path of keys (list items as their index)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from walk_strings(v, (*path, str(k)))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from walk_strings(v, (*path, str(i)))


def env_problems(text: str) -> list[str]:
    """Why the ``${...}`` references of a string are refused (never repeating a value that looks like a secret)."""
    out = []
    for name in env_names(text):
        problem = env_name_problem(name)
        if problem:
            out.append(f"${{...}} {problem}")
    return out


def template_problems(text: str, *, fields: bool = True) -> list[str]:
    """Why a channel template string is refused: its ``${NAME}`` references, and (``fields``) its ``{field}``
    placeholders: unknown fields, attribute or index access, format specs that are too wide or nested."""
    if len(text) > MAX_TEMPLATE_CHARS:
        return [f"is {len(text):,} characters long; keep it under {MAX_TEMPLATE_CHARS:,}"]
    out = env_problems(text)
    if not fields:
        return out
    try:
        parsed = list(string.Formatter().parse(ENV_REF.sub("", text)))
    except ValueError as e:
        return [*out, f"{e}; double braces {{{{ }}}} write a literal brace"]
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            out.append(f"field {{{name[:40]}}} is not allowed; use plain fields such as {{rule}} or {{value}}")
        elif name not in CHANNEL_FIELDS:
            out.append(f"unknown field {{{name}}}{did_you_mean(name, CHANNEL_FIELDS)}; fields: "
                       f"{', '.join(sorted(CHANNEL_FIELDS))}")
        elif spec and "{" in spec:
            out.append("nested fields in a format spec are not allowed")
        elif spec and (problem := format_spec_problem(spec)):
            out.append(f"the format spec of {{{name}}} {problem}; write e.g. {{value:.3g}}")
    return out


def fields_of(msg: AlertMessage) -> dict[str, Any]:
    """The values a channel template can name, typed (None where unknown)."""
    value: float | str | None = msg.value
    if msg.value is not None and not math.isfinite(msg.value):
        value = str(msg.value)  # JSON has no NaN or infinity: "nan", "inf"
    stamp = (datetime.datetime.fromtimestamp(msg.time, datetime.timezone.utc).isoformat(timespec="seconds")
             if msg.time > 0 else None)
    return {"title": msg.title, "message": msg.text, "text": msg.text, "severity": msg.severity, "state": msg.state,
            "rule": msg.rule, "gauge": msg.gauge, "metric": msg.metric or None, "value": value, "step": msg.step,
            "run_name": msg.run_name, "run_url": msg.run_url, "project": msg.project, "doc": msg.doc,
            "alert_id": msg.alert_id or None, "time": stamp, "examples": msg.evidence_lines()}


class _Formatter(string.Formatter):
    """str.format over the known fields only: no attribute or index access, a missing value is empty, a failing
    spec falls back to the plain value, every piece bounded (the file's checks hold for Python-built configs too)."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        return kwargs.get(field_name) if field_name in CHANNEL_FIELDS else "", field_name

    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, list):
            value = "\n".join(map(str, value))
        if value is None:
            return "n/a" if format_spec else ""
        if format_spec_problem(format_spec):
            format_spec = ""
        try:
            out = format(value, format_spec)
        except (ValueError, TypeError, OverflowError):
            out = str(value)
        return out[:MAX_RENDERED]


_FMT = _Formatter()


def render_text(template: str, fields: Mapping[str, Any], env: Mapping[str, str], *, with_fields: bool = True) -> str:
    """``template`` with its ``${NAME}`` replaced from ``env`` and (``with_fields``) its ``{field}`` from ``fields``."""
    out = []
    for i, piece in enumerate(ENV_REF.split(template)):
        if i % 2:
            out.append(env.get(piece, ""))
        elif with_fields:
            try:
                out.append(_FMT.vformat(piece, (), dict(fields)))
            except (ValueError, IndexError, KeyError, RecursionError):
                out.append(piece)
        else:
            out.append(piece)
    return "".join(out)


def render_body(template: Any, fields: Mapping[str, Any], env: Mapping[str, str]) -> Any:
    """A body template rendered: mappings and lists kept, strings rendered (a whole ``{field}`` keeps its type)."""
    if isinstance(template, str):
        whole = _WHOLE.fullmatch(template)
        if whole and whole[1] in CHANNEL_FIELDS:
            return fields.get(whole[1])
        return render_text(template, fields, env)
    if isinstance(template, Mapping):
        return {str(k): render_body(v, fields, env) for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        return [render_body(v, fields, env) for v in template]
    return template
