"""alerts.yaml: load, validate (fail fast, with file and line), merge over the shipped rules.

Every problem is reported as ``FILE:LINE: what is wrong; how to fix`` before
training starts, all of them at once rather than the first only.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..core import DIAGNOSIS_ID, GAUGE_CLASSES, GAUGE_IDS, REPORTING_CLASSES
from ..core.keys import FAMILIES, LIVE_INPUT_KEYS, TRL_LOGGED_KEYS, canonical_family, is_reward_function_key
from .expr import ExprError, Expression, parse

SEVERITIES = ("info", "warn", "stop")
SEVERITY_RANK = {"info": 0, "warn": 1, "stop": 2}
DEFAULT_PATH = Path(__file__).with_name("alerts.yaml")
TEMPLATE_FIELDS = frozenset({"value", "step", "rule", "gauge", "severity", "run_name", "run_url", "metric",
                             "trainer", "message", "expr", "project"})
RULE_KEYS = frozenset({"name", "gauge", "when", "finding", "min_severity", "for", "keep_firing_for", "severity",
                       "cooldown", "trainers", "title", "text", "inhibits", "channels", "enabled"})
TOP_KEYS = frozenset({"version", "extends", "defaults", "gauges", "channels", "rules", "gold_rewards"})
#: What a rule's ``gauge`` may name: a gauge, or the cross-gauge diagnoses.
RULE_GAUGES = (*GAUGE_IDS, DIAGNOSIS_ID)
DEFAULT_KEYS = frozenset({"for", "cooldown", "keep_firing_for", "channels"})
CHANNEL_KEYS = {
    "slack": frozenset({"type", "webhook_url_env", "min_severity", "username", "channel", "timeout"}),
    "email": frozenset({"type", "host", "port", "sender", "recipients", "username_env", "password_env", "starttls",
                        "ssl", "min_severity", "timeout"}),
}
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$")


class ConfigError(ValueError):
    """One or more configuration problems, each ``FILE:LINE: message``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class Rule:
    name: str
    gauge: str
    severity: str
    when: Expression | None = None
    finding: str | None = None  # regex over the gauge's core rule names
    min_severity: str = "warn"
    for_: int = 1
    keep_firing_for: int = 0
    cooldown: float = 600.0
    trainers: tuple[str, ...] = ()
    title: str = ""
    text: str = ""
    inhibits: tuple[str, ...] = ()
    channels: tuple[str, ...] | None = None
    line: int = 0
    source: str = ""

    def applies_to(self, family: str | None) -> bool:
        return not self.trainers or family is None or family in self.trainers


@dataclass
class ChannelConfig:
    name: str
    type: str
    options: dict[str, Any]
    min_severity: str = "warn"
    line: int = 0


@dataclass
class AlertConfig:
    rules: list[Rule]
    channels: dict[str, ChannelConfig] = field(default_factory=dict)
    gauge_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)

    def rule(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)


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


# -- YAML with line numbers ---------------------------------------------------------------------


class _Loc:
    """Line lookups for a composed YAML document."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def err(self, line: int, msg: str) -> None:
        self.problems.append(f"{self.path}:{line}: {msg}")

    def warn(self, line: int, msg: str) -> None:
        self.warnings.append(f"{self.path}:{line}: warning: {msg}")


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _pairs(node: yaml.MappingNode) -> list[tuple[str, yaml.Node, int]]:
    out = []
    for k, v in node.value:
        out.append((str(k.value), v, _line(k)))
    return out


def _value(node: yaml.Node) -> Any:
    """The Python value of one composed node (safe constructors only)."""
    return yaml.SafeLoader("").construct_object(node, deep=True)


def _did_you_mean(word: str, options: Any) -> str:
    m = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {m[0]!r}?)" if m else ""


# -- validation ---------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def known_metrics() -> frozenset[str]:
    """Every metric name a rule may reference: TRL's keys and rlcluster's derived values (static declarations:
    ``TRL_LOGGED_KEYS`` and each gauge's ``inputs``/``outputs``; per-function rewards are matched by pattern)."""
    names: set[str] = set(LIVE_INPUT_KEYS) | set(TRL_LOGGED_KEYS)
    for g in REPORTING_CLASSES:
        names.update(g.inputs)
        names.update(f"rlcluster/{g.id}/{k}" for k in (*g.outputs, "status"))
    return frozenset(names)


def _check_template(loc: _Loc, line: int, what: str, text: Any) -> str:
    if not isinstance(text, str):
        loc.err(line, f"{what} must be a string; quote it")
        return ""
    try:
        for _, fname, spec, _ in string.Formatter().parse(text):
            if fname is None:
                continue
            base = fname
            if "." in fname or "[" in fname or not fname.isidentifier():
                loc.err(line, f"{what}: field {{{fname}}} is not allowed; use plain fields such as "
                              f"{{value}} or {{step}}")
                continue
            if base not in TEMPLATE_FIELDS:
                loc.err(line, f"{what}: unknown field {{{fname}}}{_did_you_mean(base, TEMPLATE_FIELDS)}; "
                              f"available: {', '.join(sorted(TEMPLATE_FIELDS))}")
            if spec and "{" in spec:
                loc.err(line, f"{what}: nested fields in a format spec are not allowed")
    except ValueError as e:
        loc.err(line, f"{what}: {e}; double braces {{{{ }}}} write a literal brace")
    return text


def _int_field(loc: _Loc, line: int, name: str, v: Any, minimum: int) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int):
        loc.err(line, f"'{name}' must be an integer (a count of evaluations), not {v!r}")
        return None
    if v < minimum:
        loc.err(line, f"'{name}' must be >= {minimum}, not {v}")
        return None
    return v


def _severity(loc: _Loc, line: int, key: str, v: Any) -> str | None:
    if v not in SEVERITIES:
        loc.err(line, f"'{key}' must be one of info, warn, stop, not {v!r}{_did_you_mean(str(v), SEVERITIES)}")
        return None
    return str(v)


def _parse_rule(loc: _Loc, node: yaml.Node) -> dict[str, Any] | None:
    """A rule as a dict of given fields (values validated), with '_line'; None if not a mapping."""
    if not isinstance(node, yaml.MappingNode):
        loc.err(_line(node), "each rule must be a mapping with at least 'name'")
        return None
    out: dict[str, Any] = {"_line": _line(node), "_lines": {}}
    for key, vnode, kline in _pairs(node):
        out["_lines"][key] = kline
        if key not in RULE_KEYS:
            loc.err(kline, f"unknown rule field '{key}'{_did_you_mean(key, RULE_KEYS)}")
            continue
        out[key] = _value(vnode)
    return out


def _as_list(v: Any) -> Any:
    """YAML lets a one-item list be written as a bare string: ``trainers: grpo``."""
    return [v] if isinstance(v, str) else v


def _finish_rule(loc: _Loc, d: dict[str, Any], defaults: dict[str, Any], channel_names: set[str],
                 source: str) -> Rule | None:
    line = d.get("_line", 0)
    lines = d.get("_lines", {})

    def ln(k: str) -> int:
        return lines.get(k, line)

    name = d.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]+", name or ""):
        loc.err(ln("name"), f"rule 'name' must be a non-empty word (letters, digits, - _ . :), not {name!r}")
        return None
    ok = True
    gauge = d.get("gauge")
    if gauge not in RULE_GAUGES:
        loc.err(ln("gauge"), f"rule {name!r}: unknown gauge {gauge!r}{_did_you_mean(str(gauge), RULE_GAUGES)}; "
                             f"gauges: {', '.join(RULE_GAUGES)}")
        ok = False
    sev = _severity(loc, ln("severity"), "severity", d.get("severity", "warn"))
    ok = ok and sev is not None
    when, finding = d.get("when"), d.get("finding")
    expr = None
    if (when is None) == (finding is None):
        loc.err(line, f"rule {name!r}: give exactly one of 'when' (an expression such as \"kl > 0.5\") or "
                      f"'finding' (a pattern of the gauge's built-in rules, e.g. \"*\")")
        ok = False
    elif when is not None:
        if not isinstance(when, str):
            loc.err(ln("when"), f"rule {name!r}: 'when' must be a quoted string expression")
            ok = False
        else:
            try:
                expr = parse(when)
            except ExprError as e:
                loc.err(ln("when"), f"rule {name!r}: malformed 'when' at column {e.pos + 1}: {e} "
                                    f"(in {when!r}); write e.g. \"kl > 0.5 and reward_std < 0.05\"")
                ok = False
            else:
                known = known_metrics()
                for n in expr.names:
                    bare = n.removeprefix("train/")
                    if n not in known and bare not in known and not is_reward_function_key(bare):
                        loc.warn(ln("when"), f"rule {name!r}: metric {n!r} is not one rlcluster knows"
                                 f"{_did_you_mean(n, known)}; fine for a custom metric, otherwise a typo "
                                 "means this rule never fires")
    pattern = None
    if finding is not None:
        if not isinstance(finding, str) or not finding.strip():
            loc.err(ln("finding"), f"rule {name!r}: 'finding' must be a string such as \"*\" or "
                                   "\"truncation|length-explosion\"")
            ok = False
        else:
            pattern = "^(?:" + "|".join(re.escape(p.strip()).replace(r"\*", ".*")
                                         for p in finding.split("|")) + ")$"
    min_sev = _severity(loc, ln("min_severity"), "min_severity", d.get("min_severity", "warn"))
    ok = ok and min_sev is not None
    for_ = _int_field(loc, ln("for"), "for", d.get("for", defaults.get("for", 1)), 1)
    keep = _int_field(loc, ln("keep_firing_for"), "keep_firing_for",
                      d.get("keep_firing_for", defaults.get("keep_firing_for", 0)), 0)
    ok = ok and for_ is not None and keep is not None
    cd_raw = d.get("cooldown", defaults.get("cooldown", "10m"))
    cooldown = parse_duration(cd_raw)
    if cooldown is None:
        loc.err(ln("cooldown"), f"rule {name!r}: 'cooldown' {cd_raw!r} is not a duration; write e.g. 30s, 10m, 1h")
        ok = False
    trainers: list[str] = []
    tr = _as_list(d.get("trainers", []))
    if not isinstance(tr, list):
        loc.err(ln("trainers"), f"rule {name!r}: 'trainers' must be a list such as [grpo, ppo]")
        ok = False
    else:
        for t in tr:
            try:
                trainers.append(canonical_family(str(t)))
            except ValueError:
                loc.err(ln("trainers"), f"rule {name!r}: unknown trainer {t!r}"
                                        f"{_did_you_mean(str(t), FAMILIES)}; trainers: {', '.join(FAMILIES)}, rloo")
                ok = False
    title = _check_template(loc, ln("title"), f"rule {name!r} title", d.get("title", "{rule} at step {step}"))
    text = _check_template(loc, ln("text"), f"rule {name!r} text", d.get("text", "{message}"))
    inhibits = _as_list(d.get("inhibits", []))
    if not isinstance(inhibits, list) or not all(isinstance(x, str) for x in inhibits):
        loc.err(ln("inhibits"), f"rule {name!r}: 'inhibits' must be a list of rule names")
        ok, inhibits = False, []
    chans = _as_list(d.get("channels", defaults.get("channels")))
    if chans is not None:
        if not isinstance(chans, list):
            loc.err(ln("channels"), f"rule {name!r}: 'channels' must be a list of channel names")
            ok = False
        else:
            for c in chans:
                if c not in channel_names:
                    loc.err(ln("channels"), f"rule {name!r}: unknown channel {c!r}; define it under 'channels:' "
                                            f"(known: {', '.join(sorted(channel_names)) or 'none'})")
                    ok = False
    enabled = d.get("enabled", True)
    if not isinstance(enabled, bool):
        loc.err(ln("enabled"), f"rule {name!r}: 'enabled' must be true or false")
        ok = False
    if not ok or not enabled:
        return None
    return Rule(name=name, gauge=str(gauge), severity=str(sev), when=expr, finding=pattern,
                min_severity=str(min_sev), for_=int(for_ or 1), keep_firing_for=int(keep or 0),
                cooldown=float(cooldown or 0.0), trainers=tuple(trainers), title=title, text=text,
                inhibits=tuple(inhibits), channels=tuple(chans) if chans is not None else None, line=line,
                source=source)


def _compose(path: str, text: str, loc: _Loc) -> yaml.Node | None:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        loc.err(line, f"invalid YAML: {e.problem or e}; check indentation and quoting around this line")
        return None
    except yaml.YAMLError as e:
        loc.err(1, f"invalid YAML: {e}")
        return None
    if node is None:
        return yaml.MappingNode("tag:yaml.org,2002:map", [])
    if not isinstance(node, yaml.MappingNode):
        loc.err(_line(node), "the file must be a mapping with a 'rules:' list")
        return None
    return node


def _raw_document(path: str, text: str, loc: _Loc) -> dict[str, Any] | None:
    """Top-level sections with raw rule dicts (fields + lines), not yet merged or finished."""
    root = _compose(path, text, loc)
    if root is None:
        return None
    doc: dict[str, Any] = {"rules": [], "defaults": {}, "gauges": {}, "channels": {}, "extends": None}
    for key, vnode, kline in _pairs(root):
        if key not in TOP_KEYS:
            loc.err(kline, f"unknown top-level section '{key}'{_did_you_mean(key, TOP_KEYS)}; "
                           f"sections: {', '.join(sorted(TOP_KEYS))}")
            continue
        if key == "version":
            if _value(vnode) != 1:
                loc.err(kline, "'version' must be 1")
        elif key == "extends":
            v = _value(vnode)
            if v not in ("default", "none"):
                loc.err(kline, f"'extends' must be 'default' (add to the shipped rules) or 'none', not {v!r}")
            doc["extends"] = v
        elif key == "defaults":
            if not isinstance(vnode, yaml.MappingNode):
                loc.err(kline, "'defaults' must be a mapping")
                continue
            for dk, dv, dl in _pairs(vnode):
                if dk not in DEFAULT_KEYS:
                    loc.err(dl, f"unknown default '{dk}'{_did_you_mean(dk, DEFAULT_KEYS)}; "
                                f"defaults: {', '.join(sorted(DEFAULT_KEYS))}")
                else:
                    doc["defaults"][dk] = _value(dv)
        elif key == "gauges":
            if not isinstance(vnode, yaml.MappingNode):
                loc.err(kline, "'gauges' must map gauge ids to parameter overrides")
                continue
            by_id = {g.id: g for g in GAUGE_CLASSES}
            for gid, gnode, gl in _pairs(vnode):
                if gid not in by_id:
                    loc.err(gl, f"unknown gauge {gid!r}{_did_you_mean(gid, GAUGE_IDS)}")
                    continue
                if not isinstance(gnode, yaml.MappingNode):
                    loc.err(gl, f"gauges.{gid} must be a mapping of parameter: value")
                    continue
                allowed = set(by_id[gid].defaults)
                for pk, pnode, gl in _pairs(gnode):
                    pv = _value(pnode)
                    if pk not in allowed:
                        loc.err(gl, f"gauges.{gid}: unknown parameter {pk!r}{_did_you_mean(str(pk), allowed)}; "
                                    f"parameters: {', '.join(sorted(allowed))}")
                    elif type(pv) is not type(by_id[gid].defaults[pk]) and not (
                            isinstance(pv, (int, float)) and isinstance(by_id[gid].defaults[pk], (int, float))
                            and not isinstance(pv, bool)):
                        loc.err(gl, f"gauges.{gid}.{pk} must be like {by_id[gid].defaults[pk]!r}, not {pv!r}")
                    else:
                        doc["gauges"].setdefault(gid, {})[pk] = pv
        elif key == "gold_rewards":  # held-out reward functions: the reward gauge's `gold` parameter
            gold = _as_list(_value(vnode))
            if not isinstance(gold, list) or not all(isinstance(g, str) and g.strip() for g in gold):
                loc.err(kline, "'gold_rewards' must be a list of reward function names as TRL logs them "
                               "(rewards/<name>/mean), e.g. gold_rewards: [verifier]")
                continue
            doc["gauges"].setdefault("reward", {})["gold"] = [g.strip() for g in gold]
        elif key == "channels":
            if not isinstance(vnode, yaml.MappingNode):
                loc.err(kline, "'channels' must map channel names to their settings")
                continue
            for cname, cnode, cl in _pairs(vnode):
                ch = _channel(loc, cname, cnode, cl)
                if ch:
                    doc["channels"][cname] = ch
        elif key == "rules":
            if not isinstance(vnode, yaml.SequenceNode):
                loc.err(kline, "'rules' must be a list (each item starts with '- name: ...')")
                continue
            for item in vnode.value:
                r = _parse_rule(loc, item)
                if r is not None:
                    doc["rules"].append(r)
    return doc


def _channel(loc: _Loc, name: str, node: yaml.Node, line: int) -> ChannelConfig | None:
    v = _value(node)
    if not isinstance(v, dict):
        loc.err(line, f"channel {name!r} must be a mapping with a 'type' (slack or email)")
        return None
    ctype = v.get("type", name if name in CHANNEL_KEYS else None)
    if ctype not in CHANNEL_KEYS:
        loc.err(line, f"channel {name!r}: 'type' must be slack or email, not {ctype!r}")
        return None
    ok = True
    for k in v:
        if k not in CHANNEL_KEYS[ctype]:
            loc.err(line, f"channel {name!r}: unknown setting {k!r}{_did_you_mean(str(k), CHANNEL_KEYS[ctype])}")
            ok = False
    for k in ("password", "webhook_url", "url"):
        if k in v:
            loc.err(line, f"channel {name!r}: never put secrets in the file; use '{k}_env: ENV_VAR_NAME'")
            ok = False
    if ctype == "slack" and not isinstance(v.get("webhook_url_env"), str):
        loc.err(line, f"channel {name!r}: set 'webhook_url_env' to the name of the environment variable "
                      "holding the Slack incoming-webhook URL")
        ok = False
    if ctype == "email":
        for req in ("host", "sender", "recipients"):
            if req not in v:
                loc.err(line, f"channel {name!r}: missing '{req}'")
                ok = False
        rec = v.get("recipients")
        if rec is not None and not (isinstance(rec, list) and rec and all(isinstance(x, str) for x in rec)):
            loc.err(line, f"channel {name!r}: 'recipients' must be a list of addresses")
            ok = False
        port = v.get("port", 25)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            loc.err(line, f"channel {name!r}: 'port' must be an integer 1-65535")
            ok = False
    min_sev = v.get("min_severity", "warn")
    if min_sev not in SEVERITIES:
        loc.err(line, f"channel {name!r}: 'min_severity' must be info, warn or stop")
        ok = False
    if not ok:
        return None
    opts = {k: val for k, val in v.items() if k not in ("type", "min_severity")}
    return ChannelConfig(name=name, type=str(ctype), options=opts, min_severity=str(min_sev), line=line)


def _read(path: str | os.PathLike[str], loc: _Loc) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        loc.err(1, "no such file; check the path given to alerts=")
    except IsADirectoryError:
        loc.err(1, "is a directory; give the path of the YAML file")
    except (OSError, UnicodeDecodeError) as e:
        loc.err(1, f"cannot read it ({type(e).__name__}); is it a UTF-8 YAML file?")
    return None


def load_config(path: str | os.PathLike[str] | None = None) -> AlertConfig:
    """The shipped rules, or ``path``'s rules (merged over the shipped ones unless ``extends: none``).

    Raises ConfigError listing every problem as ``FILE:LINE: message``.
    """
    docs: list[tuple[_Loc, dict[str, Any]]] = []
    default_loc = _Loc(str(DEFAULT_PATH))
    default_text = _read(DEFAULT_PATH, default_loc)
    default_doc = _raw_document(str(DEFAULT_PATH), default_text or "", default_loc) if default_text else None
    user_loc: _Loc | None = None
    user_doc = None
    if path is not None and Path(path).resolve() != DEFAULT_PATH.resolve():
        user_loc = _Loc(str(path))
        text = _read(path, user_loc)
        if text is not None:
            user_doc = _raw_document(str(path), text, user_loc)
    if default_doc is not None and (user_doc is None or user_doc.get("extends") != "none"):
        docs.append((default_loc, default_doc))
    if user_doc is not None and user_loc is not None:
        docs.append((user_loc, user_doc))
    # merge: later files override rules by name (field by field), channels, gauges, defaults
    merged_rules: dict[str, tuple[_Loc, dict[str, Any]]] = {}
    defaults: dict[str, Any] = {}
    channels: dict[str, ChannelConfig] = {}
    gauges: dict[str, dict[str, Any]] = {}
    for loc, doc in docs:
        defaults.update(doc["defaults"])
        channels.update(doc["channels"])
        for gid, params in doc["gauges"].items():
            gauges.setdefault(gid, {}).update(params)
        seen: set[str] = set()
        for r in doc["rules"]:
            name = r.get("name")
            if isinstance(name, str):
                if name in seen:
                    loc.err(r["_line"], f"duplicate rule name {name!r}; names must be unique within a file "
                                        "(a later file overrides an earlier one by name)")
                    continue
                seen.add(name)
                if name in merged_rules and merged_rules[name][0] is not loc:
                    prev_loc, prev = merged_rules[name]
                    merged = {**prev, **{k: v for k, v in r.items() if not k.startswith("_")}}
                    merged["_line"], merged["_lines"] = r["_line"], r["_lines"]
                    merged_rules[name] = (loc, merged)
                    continue
            merged_rules[str(name) if name is not None else f"#{len(merged_rules)}"] = (loc, r)
    rules: list[Rule] = []
    for loc, r in merged_rules.values():
        rule = _finish_rule(loc, r, defaults, set(channels), loc.path)
        if rule is not None:
            rules.append(rule)
    names = {r.name for r in rules}
    for loc, r in merged_rules.values():
        for target in r.get("inhibits", []) or []:
            if isinstance(target, str) and target not in names and target not in merged_rules:
                loc.err(r.get("_lines", {}).get("inhibits", r.get("_line", 0)),
                        f"rule {r.get('name')!r} inhibits unknown rule {target!r}{_did_you_mean(target, names)}")
    problems = default_loc.problems + (user_loc.problems if user_loc else [])
    if problems:
        raise ConfigError(problems)
    warnings = default_loc.warnings + (user_loc.warnings if user_loc else [])
    sources = tuple(loc.path for loc, _ in docs)
    return AlertConfig(rules=rules, channels=channels, gauge_params=gauges, sources=sources, warnings=warnings)
