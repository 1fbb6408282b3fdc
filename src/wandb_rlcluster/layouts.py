"""Panel layouts as data (``layouts/*.yaml``, also at the repo root as ``panels/``).

One layout per trainer family names, for every gauge, the panels to draw, the
metric keys as W&B stores them (TRL's ``train/<key>`` and ``rlcluster/...``), and
the alert rules whose thresholds belong on the panel. The W&B report and the
local dashboard are both drawn from these, so they show the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .core import GAUGE_IDS
from .core.keys import canonical_family
from .safe_yaml import load_checked

LAYOUT_DIR = Path(__file__).with_name("layouts")
FAMILY_LAYOUT = {"grpo": "grpo", "dpo": "dpo", "kto": "dpo", "orpo": "dpo", "ppo": "ppo",
                 "online_dpo": "online_dpo", "sft": "sft", "reward": "sft"}
#: layouts of a framework's own keys (core/frameworks.py): verl runs store verl's names, not TRL's
FRAMEWORK_LAYOUT = {"verl": "verl", "openrlhf": "openrlhf"}
LAYOUT_NAMES = ("grpo", "dpo", "ppo", "online_dpo", "sft", "verl", "openrlhf")


@dataclass(frozen=True)
class PanelSpec:
    gauge: str
    title: str
    y: tuple[str, ...]
    rules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Section:
    name: str
    guide: str
    panels: tuple[PanelSpec, ...]


@dataclass(frozen=True)
class Layout:
    family: str
    title: str
    trainers: tuple[str, ...]
    sections: tuple[Section, ...] = field(default_factory=tuple)

    def gauges(self) -> set[str]:
        return {p.gauge for s in self.sections for p in s.panels}


def _section(d: dict[str, Any], where: str) -> Section:
    panels = []
    for p in d.get("panels", []):
        if p.get("gauge") not in GAUGE_IDS:
            raise ValueError(f"{where}: panel {p.get('title')!r} names unknown gauge {p.get('gauge')!r}")
        panels.append(PanelSpec(gauge=p["gauge"], title=str(p["title"]), y=tuple(p.get("y") or ()),
                                rules=tuple(p.get("rules") or ())))
    return Section(name=str(d["name"]), guide=str(d.get("guide", "")).strip(), panels=tuple(panels))


@lru_cache(maxsize=8)
def load_layout(trainer: str) -> Layout:
    """The layout for a trainer family (``rloo`` → the GRPO layout, ``kto`` → DPO, ...) or a framework (``verl``)."""
    key = str(trainer).strip().lower()
    name = FRAMEWORK_LAYOUT[key] if key in FRAMEWORK_LAYOUT else FAMILY_LAYOUT[canonical_family(trainer)]
    path = LAYOUT_DIR / f"{name}.yaml"
    doc = load_checked(path.read_text(encoding="utf-8"))
    sections = [_section(s, str(path)) for s in doc.get("sections", [])]
    include = doc.get("include")
    if include:
        inc = LAYOUT_DIR / include
        sections.append(_section(load_checked(inc.read_text(encoding="utf-8")), str(inc)))
    layout = Layout(family=name, title=str(doc["title"]), trainers=tuple(doc.get("trainers", [name])),
                    sections=tuple(sections))
    missing = set(GAUGE_IDS) - layout.gauges()
    if missing:
        raise ValueError(f"{path}: layout has no panel for gauges {sorted(missing)}")
    return layout


def thresholds(panel: PanelSpec, alert_config: Any) -> list[tuple[str, float, str, str]]:
    """(metric, value, severity, rule) for each named rule whose condition is a simple ``metric op number``."""
    out: list[tuple[str, float, str, str]] = []
    if alert_config is None:
        return out
    from .automations import single_comparison

    for name in panel.rules:
        rule = alert_config.rule(name)
        if rule is None or rule.when is None:
            continue
        parsed = single_comparison(rule)  # as W&B Automations read it: a guard on rlcluster's own values dropped
        if isinstance(parsed, tuple) and not parsed[1]:
            metric, _, op, value = parsed
            shown = f"{value:.1f}" if value == int(value) else f"{value:g}"  # 1.0, 0.5: as alerts.yaml writes them
            out.append((metric, value, rule.severity, f"{rule.severity} {op} {shown}"))
    return out
