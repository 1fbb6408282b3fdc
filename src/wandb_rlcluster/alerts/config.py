"""alerts.yaml: load, validate (fail fast, with file and line), merge over the shipped rules.

Every problem is reported as ``FILE:LINE: what is wrong; how to fix`` before
training starts, all of them at once rather than the first only.
"""

from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..core import DIAGNOSIS_ID, GAUGE_CLASSES, GAUGE_IDS, REPORTING_CLASSES
from ..core.breaks_gauge import BREAKS_ID, BreakWatcher
from ..core.cluster import WARN_SOONER_MAX, check_warn_sooner
from ..core.gauge import Gauge, check_param
from ..core.keymap import check_keys, role_problem
from ..core.keys import FAMILIES, LIVE_INPUT_KEYS, TRL_LOGGED_KEYS, canonical_family, is_reward_function_key
from ..core.text import clean_text, did_you_mean
from ..readers import InputRefused, InputTooLarge, read_bounded
from ..safe_yaml import MAX_YAML_CHARS, compose_checked
from .expr import ExprError, Expression, parse
from .http_config import HTTP_CHANNEL_KEYS, HTTP_TYPES, check_http_channel, http_option_problem
from .located import (
    _line,
    _Loc,
    _pairs,
    _value,
    env_name_problem,
    format_spec_problem,
    parse_duration,
)
from .watchdog import RESERVED_RULES, check_value, parse_section

SEVERITIES = ("info", "warn", "stop")
DEFAULT_PATH = Path(__file__).with_name("alerts.yaml")
TEMPLATE_FIELDS = frozenset({"value", "step", "rule", "gauge", "severity", "run_name", "run_url", "metric",
                             "trainer", "message", "expr", "project", "rows"})
RULE_KEYS = frozenset({"name", "gauge", "when", "finding", "min_severity", "for", "keep_firing_for", "severity",
                       "cooldown", "trainers", "title", "text", "inhibits", "channels", "enabled"})
TOP_KEYS = frozenset({"version", "extends", "defaults", "gauges", "channels", "rules", "watchdog", "gold_rewards",
                      "warn_sooner", "keys"})
#: What a rule's ``gauge`` may name: a gauge, or the cross-gauge diagnoses.
RULE_GAUGES = (*GAUGE_IDS, BREAKS_ID, DIAGNOSIS_ID)
DEFAULT_KEYS = frozenset({"for", "cooldown", "keep_firing_for", "channels"})
CHANNEL_KEYS = {
    "slack": frozenset({"type", "webhook_url_env", "min_severity", "username", "channel", "timeout"}),
    "email": frozenset({"type", "host", "port", "sender", "recipients", "username_env", "password_env", "starttls",
                        "ssl", "min_severity", "timeout", "allow_plaintext_auth"}),
    **HTTP_CHANNEL_KEYS,  # webhook, discord, teams (http_config.py)
}
#: Fields that name an environment variable holding a secret (never the secret itself).
ENV_FIELDS = ("webhook_url_env", "username_env", "password_env", "url_env")
#: Longest title/text template, and longest rendered title/text (a template cannot print megabytes).
MAX_TEMPLATE_CHARS = 2000
MAX_RENDERED = 4000
#: Longest send timeout a channel may ask for, in seconds.
MAX_CHANNEL_TIMEOUT = 120


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

    def hold(self, warn_sooner: int = 0) -> int:
        """The rows this rule must hold before it fires: its ``for:``, ``warn_sooner`` shorter for a warn rule (never
        under one row), as the gauges shorten their warn holds; a stop rule keeps its own."""
        return max(1, self.for_ - warn_sooner) if self.severity == "warn" else self.for_


@dataclass
class ChannelConfig:
    name: str
    type: str
    options: dict[str, Any]
    min_severity: str = "warn"
    line: int = 0

    def __repr__(self) -> str:
        # options as a checkpoint would store them (see safe_options): a pasted secret is never shown
        shown = safe_options(self.type, self.options)
        hidden = len(self.options) - len(shown)
        more = f", {hidden} setting(s) not shown" if hidden else ""
        return (f"ChannelConfig(name={self.name!r}, type={self.type!r}, options={shown!r}{more}, "
                f"min_severity={self.min_severity!r}, line={self.line})")


@dataclass
class AlertConfig:
    rules: list[Rule]
    channels: dict[str, ChannelConfig] = field(default_factory=dict)
    gauge_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)
    watchdog: dict[str, Any] = field(default_factory=dict)  # validated `watchdog:` settings (see watchdog.py)
    #: `warn_sooner:` rows off every warn hold (``InstrumentCluster``); None where no file sets it
    warn_sooner: int | None = None
    #: `keys:` which logged key is what, for a custom loop (``core/keymap.py``): ``{"reward": ["reward/g"]}``
    keys: dict[str, list[str]] = field(default_factory=dict)

    def rule(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The rules as JSON-safe data, so a checkpoint can rebuild exactly these rules (``from_dict``)
        wherever and whenever it is resumed, whether they came from a file or were built in Python.
        Channels keep their known settings and the *names* of their secrets' environment variables only:
        a setting that is unknown or invalid (a webhook URL pasted into ``webhook_url_env``) is left out."""
        return self._data(safe=True)

    def _data(self, *, safe: bool) -> dict[str, Any]:
        channels = {}
        for n, c in self.channels.items():
            if safe and c.type not in CHANNEL_KEYS:
                continue
            options = safe_options(c.type, c.options) if safe else dict(c.options)
            channels[n] = {"type": c.type, "options": _json_safe(options), "min_severity": c.min_severity,
                           "line": c.line}
        return {
            "format": CONFIG_FORMAT,
            "sources": [str(x) for x in self.sources],
            "gauge_params": _json_safe(self.gauge_params),
            "channels": channels,
            "rules": [{"name": r.name, "gauge": r.gauge, "severity": r.severity,
                       "when": getattr(r.when, "text", r.when), "finding": r.finding,
                       "min_severity": r.min_severity, "for": r.for_, "keep_firing_for": r.keep_firing_for,
                       "cooldown": r.cooldown, "trainers": list(r.trainers), "title": r.title, "text": r.text,
                       "inhibits": list(r.inhibits), "channels": list(r.channels) if r.channels is not None else None,
                       "line": r.line, "source": r.source} for r in self.rules],
            "watchdog": _json_safe(self.watchdog),
            "warn_sooner": self.warn_sooner,
            "keys": {r: list(v) for r, v in self.keys.items()},
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "checkpoint") -> AlertConfig:
        """Rebuild the rules written by ``to_dict()``, through the same checks as a YAML file; raises
        ConfigError naming what is wrong."""
        if not isinstance(data, dict) or data.get("format") != CONFIG_FORMAT:
            raise ConfigError([f"{where}: stored alert rules are not in the {CONFIG_FORMAT} format; pass alerts= "
                               "again (a path or an AlertConfig)"])
        return _from_data(data, where)


CONFIG_FORMAT = "rlcluster-alerts/1"


def validate_config(config: AlertConfig, where: str = "AlertConfig") -> AlertConfig:
    """An AlertConfig built in Python (or changed after loading) checked like a YAML file: the checked copy,
    or ConfigError listing every problem. One set of checks for files, objects and checkpoints."""
    if not isinstance(config, AlertConfig):
        raise ConfigError([f"{where}: alerts= must be a path, an AlertConfig, a stored dict, None or False, "
                           f"not {type(config).__name__}"])
    checked = _from_data(config._data(safe=False), where)
    # warnings already given with their file and line are not repeated without them
    known = {w.split(": warning: ", 1)[-1] for w in config.warnings}
    checked.warnings = list(config.warnings) + [w for w in checked.warnings
                                                if w.split(": warning: ", 1)[-1] not in known]
    checked.sources = tuple(config.sources)
    return checked


def _from_data(data: dict[str, Any], where: str) -> AlertConfig:
    """Rules, channels and gauge settings in the stored form (``AlertConfig._data``), through the validators
    of the YAML path; problems are reported as ``WHERE: rule 'x': ...``."""
    loc = _Loc(where)
    raw_channels = data.get("channels") or {}
    channels: dict[str, ChannelConfig] = {}
    if not isinstance(raw_channels, dict):
        loc.err(0, "'channels' must map channel names to their settings")
        raw_channels = {}
    for n, c in raw_channels.items():
        if not isinstance(c, dict) or not isinstance(c.get("options", {}), dict):
            loc.err(0, f"channel {clean_text(n, 40)!r} must be a mapping with a 'type' and 'options'")
            continue
        value = {**(c.get("options") or {}), "type": c.get("type"), "min_severity": c.get("min_severity", "warn")}
        ch = _channel_value(loc, str(n), value, 0)
        if ch is not None:
            ch.line = c.get("line", 0) if isinstance(c.get("line", 0), int) else 0
            channels[str(n)] = ch
    gauges = _gauge_params(loc, [(g, 0, list((v or {}).items()) if isinstance(v, dict) else v)
                                 for g, v in (data.get("gauge_params") or {}).items()])
    raw_rules = data.get("rules") or []
    if not isinstance(raw_rules, list):
        loc.err(0, "'rules' must be a list")
        raw_rules = []
    rules: list[Rule] = []
    for i, d in enumerate(raw_rules):
        if not isinstance(d, dict):
            loc.err(0, f"rule #{i + 1} must be a mapping with at least 'name'")
            continue
        raw: dict[str, Any] = {k: v for k, v in d.items() if k in RULE_KEYS and k != "finding"}
        if d.get("finding") is not None:
            raw["_finding_regex"] = d["finding"]  # stored as the compiled pattern, not the glob a file holds
        raw.update(_line=0, _lines={})
        rule = _finish_rule(loc, raw, {}, set(channels) | set(raw_channels), where)
        if rule is not None:
            line, source = d.get("line", 0), d.get("source")
            rule.line = line if isinstance(line, int) and not isinstance(line, bool) else 0
            rule.source = str(source) if source else where
            rules.append(rule)
    names = {r.name for r in rules} | {str(d.get("name")) for d in raw_rules if isinstance(d, dict)}
    for r in rules:
        for target in r.inhibits:
            if target not in names:
                loc.err(0, f"rule {r.name!r} inhibits unknown rule {target!r}{did_you_mean(target, names)}")

    watchdog: dict[str, Any] = {}
    raw_watchdog = data.get("watchdog") or {}
    if not isinstance(raw_watchdog, dict):
        loc.err(0, "'watchdog' must map setting names to values")
        raw_watchdog = {}
    for k, v in raw_watchdog.items():
        value, problem = check_value(str(k), v)
        if problem:
            loc.err(0, f"stored watchdog setting: {problem}")
        else:
            watchdog[str(k)] = value
    warn_sooner = data.get("warn_sooner")
    if warn_sooner is not None:
        try:
            warn_sooner = check_warn_sooner(warn_sooner)
        except ValueError as e:
            if where != "checkpoint":
                loc.err(0, str(e))
            else:  # another version's or an edited checkpoint: a resume must not fail on it
                loc.warn(0, f"stored {e}; left out")
            warn_sooner = None
    keys, key_problems = check_keys(data.get("keys") or None, "keys")
    for problem in key_problems:
        loc.err(0, problem)
    problems = loc.report()
    if problems:
        raise ConfigError(problems)
    sources = data.get("sources") or ()
    return AlertConfig(rules=rules, channels=channels, gauge_params=gauges,
                       sources=tuple(str(x) for x in sources) if isinstance(sources, (list, tuple)) else (),
                       warnings=loc.report_warnings(), watchdog=watchdog, warn_sooner=warn_sooner, keys=keys)


def safe_options(ctype: str, options: dict[str, Any]) -> dict[str, Any]:
    """The channel settings that are safe to store and show: known settings with valid values only (a
    secret pasted into a ``*_env`` field, ``timeout`` or an unknown key such as ``password`` is left out)."""
    keys = CHANNEL_KEYS.get(ctype, frozenset())
    return {k: v for k, v in options.items()
            if k in keys and k not in ("type", "min_severity") and option_problem(k, v) is None}


def option_problem(key: str, value: Any) -> str | None:
    """Why a channel setting's value is refused (never repeating the value), or None."""
    if key in ENV_FIELDS:
        return env_name_problem(value)
    if key in ("starttls", "ssl", "allow_plaintext_auth"):
        return None if isinstance(value, bool) else "must be true or false"
    if key == "timeout":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_CHANNEL_TIMEOUT
        return None if ok else f"must be a number of seconds, more than 0 and at most {MAX_CHANNEL_TIMEOUT}"
    if key == "port":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536
        return None if ok else "must be an integer 1-65535"
    if key == "recipients":
        ok = isinstance(value, list) and bool(value) and all(isinstance(x, str) and x for x in value)
        return None if ok else "must be a list of addresses"
    if key in ("host", "sender", "username", "channel"):
        return None if isinstance(value, str) and value.strip() else "must be a non-empty string"
    if key == "min_severity":
        return None if value in SEVERITIES else "must be info, warn or stop"
    return http_option_problem(key, value)


def _json_safe(value: Any) -> Any:
    """Plain JSON types only (a YAML date or set becomes its string): checkpoints are written with json."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    return str(value)


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
    if len(text) > MAX_TEMPLATE_CHARS:
        loc.err(line, f"{what} is {len(text):,} characters long; keep it under {MAX_TEMPLATE_CHARS:,} (alerts are "
                      "read on a phone)")
        return ""
    try:
        for _, fname, spec, _ in string.Formatter().parse(text):
            if fname is None:
                continue
            spec_problem = format_spec_problem(spec or "") if spec and "{" not in spec else None
            if spec_problem:
                loc.err(line, f"{what}: the format spec of {{{clean_text(fname, 40)}}} {spec_problem}; write e.g. "
                              "{value:.3g}")
                continue
            base = fname
            if "." in fname or "[" in fname or not fname.isidentifier():
                loc.err(line, f"{what}: field {{{fname}}} is not allowed; use plain fields such as "
                              f"{{value}} or {{step}}")
                continue
            if base not in TEMPLATE_FIELDS:
                loc.err(line, lambda fname=fname: f"{what}: unknown field {{{fname}}}"
                                                  f"{did_you_mean(fname, TEMPLATE_FIELDS)}; "
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
        loc.err(line, f"'{key}' must be one of info, warn, stop, not {v!r}{did_you_mean(str(v), SEVERITIES)}")
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
            loc.err(kline, f"unknown rule field '{key}'{did_you_mean(key, RULE_KEYS)}")
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

    if name in RESERVED_RULES:
        loc.err(ln("name"), f"rule name {name!r} is reserved for the liveness alerts (stall, crash, signal: see the "
                            "'watchdog' section); give the rule another name")
        return None
    ok = True
    gauge = d.get("gauge")
    if gauge not in RULE_GAUGES:
        loc.err(ln("gauge"), f"rule {name!r}: unknown gauge {gauge!r}{did_you_mean(str(gauge), RULE_GAUGES)}; "
                             f"gauges: {', '.join(RULE_GAUGES)}")
        ok = False
    sev = _severity(loc, ln("severity"), "severity", d.get("severity", "warn"))
    ok = ok and sev is not None
    when, finding = d.get("when"), d.get("finding")
    regex = d.get("_finding_regex")  # a rule built in Python or stored in a checkpoint holds the regex itself
    expr = None
    if (when is None) == (finding is None and regex is None):
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
                                    f"(in {clean_text(when, 120)!r}); write e.g. \"kl > 0.5 and reward_std < 0.05\"")
                ok = False
            else:
                known = known_metrics()
                for n in expr.names:
                    bare = n.removeprefix("train/")
                    if n not in known and bare not in known and not is_reward_function_key(bare):
                        loc.warn(ln("when"), lambda n=n: f"rule {name!r}: metric {n!r} is not one rlcluster knows"
                                 f"{did_you_mean(n, known)}; fine for a custom metric, otherwise a typo "
                                 "means this rule never fires")
    pattern = None
    if regex is not None:
        try:
            re.compile(regex)
            pattern = regex if isinstance(regex, str) else None
        except (re.error, TypeError, ValueError, RecursionError, OverflowError):
            pattern = None
        if pattern is None:
            loc.err(ln("finding"), f"rule {name!r}: 'finding' must be a regular expression over the gauge's rule "
                                   "names, such as '^(?:truncation|length-explosion)$'")
            ok = False
    elif finding is not None:
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
                                        f"{did_you_mean(str(t), FAMILIES)}; trainers: {', '.join(FAMILIES)}, rloo")
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


def _compose(path: str, text: str, loc: _Loc) -> yaml.MappingNode | None:
    """The checked node graph (see safe_yaml: size, aliases, tags, duplicate keys), or None with problems."""
    node, problems = compose_checked(text)
    for line, msg in problems:
        loc.err(line, msg)
    if problems:
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
    doc: dict[str, Any] = {"rules": [], "defaults": {}, "gauges": {}, "channels": {}, "extends": None,
                           "watchdog": {}, "warn_sooner": None, "keys": {}}
    for key, vnode, kline in _pairs(root):
        if key not in TOP_KEYS:
            loc.err(kline, f"unknown top-level section '{key}'{did_you_mean(key, TOP_KEYS)}; "
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
                    loc.err(dl, f"unknown default '{dk}'{did_you_mean(dk, DEFAULT_KEYS)}; "
                                f"defaults: {', '.join(sorted(DEFAULT_KEYS))}")
                else:
                    doc["defaults"][dk] = _value(dv)
        elif key == "gauges":
            if not isinstance(vnode, yaml.MappingNode):
                loc.err(kline, "'gauges' must map gauge ids to parameter overrides")
                continue
            items = [(gid, gl, [(pk, pl, _value(pn)) for pk, pn, pl in _pairs(gnode)]
                      if isinstance(gnode, yaml.MappingNode) else None) for gid, gnode, gl in _pairs(vnode)]
            for gid, params in _gauge_params(loc, items).items():
                doc["gauges"].setdefault(gid, {}).update(params)
        elif key == "gold_rewards":  # held-out reward functions: the reward gauge's `gold` parameter
            gold = _as_list(_value(vnode))
            if not isinstance(gold, list) or not all(isinstance(g, str) and g.strip() for g in gold):
                loc.err(kline, "'gold_rewards' must be a list of reward function names as TRL logs them "
                               "(rewards/<name>/mean), e.g. gold_rewards: [verifier]")
                continue
            doc["gauges"].setdefault("reward", {})["gold"] = [g.strip() for g in gold]
        elif key == "warn_sooner":  # rows off every warn hold: RLClusterCallback(warn_sooner=...) wins over it
            v = _value(vnode)
            try:
                doc["warn_sooner"] = check_warn_sooner(v)
            except ValueError:
                loc.err(kline, f"'warn_sooner' must be a whole number of logged rows from 0 to {WARN_SOONER_MAX}, "
                               f"taken off every warn rule's hold (0 = the defaults), not {clean_text(repr(v), 40)}; "
                               "e.g. warn_sooner: 1")
        elif key == "keys":  # which logged key is what (a custom loop): --map and watch(keys=...) win over it
            doc["keys"] = _keys_section(loc, vnode, kline)
        elif key == "channels":
            if not isinstance(vnode, yaml.MappingNode):
                loc.err(kline, "'channels' must map channel names to their settings")
                continue
            for cname, cnode, cl in _pairs(vnode):
                ch = _channel(loc, cname, cnode, cl)
                if ch:
                    doc["channels"][cname] = ch
        elif key == "watchdog":

            doc["watchdog"] = parse_section(loc, vnode, kline)
        elif key == "rules":
            if not isinstance(vnode, yaml.SequenceNode):
                loc.err(kline, "'rules' must be a list (each item starts with '- name: ...')")
                continue
            for item in vnode.value:
                r = _parse_rule(loc, item)
                if r is not None:
                    doc["rules"].append(r)
    return doc


def _keys_section(loc: _Loc, vnode: yaml.Node, kline: int) -> dict[str, list[str]]:
    """``keys:`` checked entry by entry, each problem at its own line: ``{quantity: [logged keys]}``."""
    if not isinstance(vnode, yaml.MappingNode):
        loc.err(kline, "'keys' must map a quantity to the key your loop logs it under, e.g. "
                       "keys: {reward: reward/mean, gold: true_score, entropy: policy/entropy}")
        return {}
    entries: dict[str, object] = {}
    for role, node, line in _pairs(vnode):
        value = _value(node)
        problem = role_problem(role, value)
        if problem:
            loc.err(line, problem)
            continue
        entries[role] = value
        _, problems = check_keys(entries)
        for p in problems:  # the same key named for two quantities: reported where the second one is
            loc.err(line, p)
            entries.pop(role)
    return check_keys(entries)[0]


def _gauge_params(loc: _Loc, items: list[tuple[Any, int, Any]]) -> dict[str, dict[str, Any]]:
    """Checked per-gauge parameter overrides from ``(gauge id, line, [(param, line, value)] or a non-list)``;
    the stored form gives ``(param, value)`` pairs and line 0."""
    classes: tuple[type[Gauge], ...] = (*GAUGE_CLASSES, BreakWatcher)
    by_id = {g.id: g for g in classes}
    out: dict[str, dict[str, Any]] = {}
    for gid, gl, params in items:
        if gid not in by_id:
            loc.err(gl, f"unknown gauge {clean_text(gid, 40)!r}{did_you_mean(str(gid), by_id)}")
            continue
        if not isinstance(params, list):
            loc.err(gl, f"gauges.{gid} must be a mapping of parameter: value")
            continue
        for item in params:
            pk, pl, pv = item if len(item) == 3 else (item[0], gl, item[1])
            value, problem = check_param(by_id[gid], pk, pv, where="gauges")
            if problem:
                loc.err(pl, problem)
            else:
                out.setdefault(gid, {})[pk] = value
    return out


def _channel(loc: _Loc, name: str, node: yaml.Node, line: int) -> ChannelConfig | None:
    return _channel_value(loc, name, _value(node), line, _node_lines(node))


def _node_lines(node: yaml.Node, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """The line of every key (and list item) under ``node``, by its path of keys: where a nested setting is."""
    out: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, vnode, kline in _pairs(node):
            out[path + (key,)] = kline
            out.update(_node_lines(vnode, path + (key,)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[path + (str(i),)] = _line(item)
            out.update(_node_lines(item, path + (str(i),)))
    return out


_TYPES = ", ".join(CHANNEL_KEYS)


def _channel_value(loc: _Loc, name: str, v: Any, line: int,
                   lines: dict[tuple[str, ...], int] | None = None) -> ChannelConfig | None:
    """One channel's settings (a YAML mapping, or an object's options with its type and min_severity); ``lines``:
    where each nested setting is (a problem of a webhook's header is reported at that header's line)."""
    if not isinstance(v, dict):
        loc.err(line, f"channel {name!r} must be a mapping with a 'type' ({_TYPES})")
        return None
    ctype = v.get("type", name if name in CHANNEL_KEYS else None)
    if ctype not in CHANNEL_KEYS:
        loc.err(line, f"channel {name!r}: 'type' must be one of {_TYPES}, not {clean_text(repr(ctype), 40)}")
        return None
    ok = True
    secret_keys = tuple(k for k in ("password", "webhook_url", "url") if k not in CHANNEL_KEYS[ctype])
    def at(k: str) -> int:  # an HTTP channel's problems at the setting's own line (slack/email: the channel's)
        return (lines or {}).get((k,), line) if ctype in HTTP_TYPES else line

    for k in v:
        if k not in CHANNEL_KEYS[ctype] and k not in secret_keys:
            loc.err(at(k), f"channel {name!r}: unknown setting {clean_text(k, 40)!r}"
                           f"{did_you_mean(str(k), CHANNEL_KEYS[ctype])}")
            ok = False
    for k in secret_keys:
        if k in v:
            env_key = "webhook_url_env" if "webhook_url_env" in CHANNEL_KEYS[ctype] and "url" in k else f"{k}_env"
            loc.err(at(k), f"channel {name!r}: never put secrets in the configuration; use '{env_key}: ENV_VAR_NAME'")
            ok = False
    if ctype in HTTP_TYPES:
        for path, said in check_http_channel(str(ctype), v):
            where = next((lines[path[:n]] for n in range(len(path), 0, -1) if lines and path[:n] in lines), line)
            loc.err(where, f"channel {name!r}: {said}")
            ok = False
    if ctype == "slack" and "webhook_url_env" not in v:
        loc.err(line, f"channel {name!r}: set 'webhook_url_env' to the name of the environment variable "
                      "holding the Slack incoming-webhook URL")
        ok = False
    for k in ENV_FIELDS:
        problem = env_name_problem(v[k]) if k in v else None
        if problem:
            loc.err(at(k), f"channel {name!r}: '{k}' {problem}")
            ok = False
    for k in ("starttls", "ssl", "allow_plaintext_auth", "timeout", "username", "channel"):
        problem = option_problem(k, v[k]) if k in v and k in CHANNEL_KEYS[ctype] else None
        if problem:
            loc.err(at(k), f"channel {name!r}: '{k}' {problem}")
            ok = False
    if ctype == "email":
        for req in ("host", "sender", "recipients"):
            if req not in v:
                loc.err(line, f"channel {name!r}: missing '{req}'")
                ok = False
        for k in ("host", "sender", "recipients", "port"):
            problem = option_problem(k, v[k]) if k in v else None
            if problem:
                loc.err(line, f"channel {name!r}: '{k}' {problem}")
                ok = False
        tls = v.get("starttls") is True or v.get("ssl") is True
        if v.get("starttls") is True and v.get("ssl") is True:
            loc.err(line, f"channel {name!r}: use either 'starttls: true' (port 587) or 'ssl: true' (port 465), "
                          "not both")
            ok = False
        if (v.get("username_env") or v.get("password_env")) and not tls and v.get("allow_plaintext_auth") is not True:
            loc.err(line, f"channel {name!r}: SMTP login without TLS sends the password in clear text; set "
                          "'starttls: true' (port 587) or 'ssl: true' (port 465), or, only for a relay on this machine "
                          "or a trusted private network, 'allow_plaintext_auth: true'")
            ok = False
    min_sev = v.get("min_severity", "warn")
    if min_sev not in SEVERITIES:
        loc.err(at("min_severity"), f"channel {name!r}: 'min_severity' must be info, warn or stop")
        ok = False
    if not ok:
        return None
    opts = {k: val for k, val in v.items() if k not in ("type", "min_severity")}
    return ChannelConfig(name=name, type=str(ctype), options=opts, min_severity=str(min_sev), line=line)


def _read(path: str | os.PathLike[str], loc: _Loc) -> str | None:
    try:
        data = read_bounded(path, limit=4 * MAX_YAML_CHARS)  # regular files only: a FIFO would block forever
    except InputTooLarge:
        loc.err(1, f"the file is over {4 * MAX_YAML_CHARS:,} bytes; a configuration over {MAX_YAML_CHARS:,} "
                   "characters is refused (is it the right file?)")
        return None
    except InputRefused as e:
        if str(e) == "no such file":
            loc.err(1, "no such file; check the path given to alerts=")
        elif str(e) == "it is a directory":
            loc.err(1, "is a directory; give the path of the YAML file")
        else:
            loc.err(1, f"cannot read it: {e}")
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        loc.err(1, "cannot read it (not UTF-8 text); is it a UTF-8 YAML file?")
    return None


def _is_default(path: str | os.PathLike[str]) -> bool:
    try:
        return Path(path).resolve() == DEFAULT_PATH.resolve()
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop: not the shipped file, and _read says why
        return False


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
    if path is not None and not _is_default(path):
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
    watchdog: dict[str, Any] = {}
    warn_sooner: int | None = None
    keys: dict[str, list[str]] = {}
    for loc, doc in docs:
        if doc["warn_sooner"] is not None:
            warn_sooner = doc["warn_sooner"]
        keys.update(doc["keys"])
        defaults.update(doc["defaults"])
        watchdog.update(doc["watchdog"])
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
        for target in _as_list(r.get("inhibits", [])) or []:
            if isinstance(target, str) and target not in names and target not in merged_rules:
                loc.err(r.get("_lines", {}).get("inhibits", r.get("_line", 0)),
                        f"rule {r.get('name')!r} inhibits unknown rule {target!r}{did_you_mean(target, names)}")
    problems = default_loc.report() + (user_loc.report() if user_loc else [])
    if problems:
        raise ConfigError(problems)
    warnings = default_loc.report_warnings() + (user_loc.report_warnings() if user_loc else [])
    sources = tuple(loc.path for loc, _ in docs)
    return AlertConfig(rules=rules, channels=channels, gauge_params=gauges, sources=sources, warnings=warnings,
                       watchdog=watchdog, warn_sooner=warn_sooner, keys=keys)
