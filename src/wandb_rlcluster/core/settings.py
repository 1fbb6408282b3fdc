"""A run's settings, resolved once: the options a cluster is built from, each checked and combined before the first
row (warn_sooner, the key map, the framework's key profile and the family it implies, the gold rewards, the gauges'
parameters, the planned steps). ``InstrumentCluster`` is built from one ``RunSettings``; its keyword arguments are
resolved into one."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .frameworks import Profile, get_profile, profile_params
from .gauge import Gauge, check_param
from .gauges import GOLD_AWARE, REPORTING_CLASSES
from .keymap import KeyMap
from .keys import canonical_family
from .text import clean_text, did_you_mean

# Rows to buffer before guessing the family when it was not given.
DETECT_ROWS = 8


@dataclass(frozen=True)
class RunSettings:
    """Everything a cluster needs to know about a run before its first row, checked."""

    family: str | None
    """The trainer family (canonical), or None to detect it from the first rows' keys."""
    params: dict[str, dict[str, Any]]
    """Per-gauge parameters, checked (``checked_params``), the framework's and the gold rewards' included."""
    max_steps: int
    """The planned run length in steps (0: unknown)."""
    warn_sooner: int
    """Logged rows taken off every warn rule's hold (0 to ``WARN_SOONER_MAX``)."""
    framework: str
    """Whose key vocabulary the rows speak: ``trl``, ``verl``, ``openrlhf``."""
    profile: Profile | None
    """The framework's key profile (None: TRL's vocabulary)."""
    keymap: KeyMap
    """The user's mapping of quantities to logged keys."""
    recognise_keys: bool = True
    """Read a custom loop's keys by what their names mean."""
    detect_rows: int = DETECT_ROWS
    """Rows to buffer before guessing the family."""

    @staticmethod
    def resolve(trainer: str | None = None, params: Mapping[str, Mapping[str, Any]] | None = None,
                max_steps: object = 0, detect_rows: int = DETECT_ROWS, warn_sooner: object = 0,
                framework: str | None = None, keys: Mapping[str, Any] | KeyMap | None = None,
                recognise_keys: bool = True) -> RunSettings:
        """Check and combine a run's options (``InstrumentCluster``'s arguments); a bad one is a ValueError that
        names it."""
        sooner = check_warn_sooner(warn_sooner)
        keymap = keys if isinstance(keys, KeyMap) else KeyMap(keys)  # a bad mapping fails here, named
        # a framework's key profile (verl, OpenRLHF): its keys read by meaning, its family and gold reward implied
        profile = get_profile(framework)
        merged = profile_params(profile, params)
        if keymap.gold:  # the user's gold keys are held-out rewards: the reward gauge judges the proxy by them
            merged = _with_gold(merged, keymap.gold)
        if trainer is None and profile is not None:
            trainer = profile.family
        family = canonical_family(trainer) if trainer else None
        checked, problems = checked_params(merged)
        if problems:
            raise ValueError("; ".join(problems))
        gold = checked.get("reward", {}).get("gold")
        if gold:
            if not all(gold):  # names, checked above; an empty one matches no reward function
                raise ValueError(f"gold rewards must be a list of reward function names, not {gold!r}")
            for gid in GOLD_AWARE:
                checked.setdefault(gid, {}).setdefault("gold", list(gold))
        return RunSettings(family=family, params=checked, max_steps=planned_steps(max_steps), warn_sooner=sooner,
                           framework=profile.name if profile is not None else "trl", profile=profile, keymap=keymap,
                           recognise_keys=recognise_keys, detect_rows=max(1, detect_rows))

    def with_family(self, trainer: str | None) -> RunSettings:
        """The same settings for a known family (``trainer``: any spelling ``canonical_family`` reads)."""
        return replace(self, family=canonical_family(trainer) if trainer else None)


def checked_params(params: Mapping[str, Any] | None, where: str = "params") -> tuple[dict[str, dict[str, Any]],
                                                                                list[str]]:
    """Per-gauge parameter overrides, each checked (``check_param``) and made a plain Python value, and what was
    wrong with the rest: every name and value is checked before the first row, so a typo is not ignored and a
    string where a number belongs does not raise in the middle of a run."""
    by_id: dict[str, type[Gauge]] = {cls.id: cls for cls in REPORTING_CLASSES}
    out: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    if params is not None and not isinstance(params, Mapping):
        return out, [f"{where} must be a mapping of gauge id to its parameters, not {clean_text(repr(params), 60)}"]
    for gid, ps in (params or {}).items():
        if gid not in by_id:
            problems.append(f"{where}: unknown gauge id {clean_text(gid, 40)!r}{did_you_mean(str(gid), by_id)}; "
                            f"expected one of {', '.join(by_id)}")
            continue
        if not isinstance(ps, Mapping):
            problems.append(f"{where}.{gid} must be a mapping of parameter: value, not {clean_text(repr(ps), 60)}")
            continue
        out[gid] = {}
        for k, v in ps.items():
            value, problem = check_param(by_id[gid], k, v, where)
            if problem is None:
                out[gid][k] = value
            else:
                problems.append(problem)
    return out, problems


WARN_SOONER_MAX = 3
"""The most rows ``warn_sooner`` takes off: past that most holds are one row, a single noisy row warns."""


def check_warn_sooner(value: object) -> int:
    """``warn_sooner`` as a whole number of rows from 0 to ``WARN_SOONER_MAX``; anything else is a ValueError that says
    what to pass."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= WARN_SOONER_MAX:
        raise ValueError(f"warn_sooner must be a whole number of logged rows from 0 to {WARN_SOONER_MAX} (rows taken "
                         f"off every warn rule's hold; 0 = the defaults), not {clean_text(repr(value), 80)}")
    return int(value)


def planned_steps(value: object) -> int:
    """``max_steps`` as a whole number of steps (numpy's integers and whole floats too); anything else, or under one,
    is 0: the planned length is unknown."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return 0
    steps = float(value)
    return max(int(steps), 0) if math.isfinite(steps) else 0


def resolve_warn_sooner(warn_sooner: object, alerts: Any = None) -> int:
    """The ``warn_sooner`` a run or a read uses: the one given (checked), else the alert config's ``warn_sooner:``
    (``alerts``: an AlertConfig or None), else 0."""
    if warn_sooner is not None:
        return check_warn_sooner(warn_sooner)
    from_file = getattr(alerts, "warn_sooner", None)
    return check_warn_sooner(from_file) if from_file is not None else 0


def _with_gold(params: Mapping[str, Any] | None, gold: list[str]) -> Any:
    """``params`` with ``gold`` added to the reward gauge's gold rewards (a malformed ``params`` comes back as
    given: the cluster's own check names what is wrong with it)."""
    if params is not None and not isinstance(params, Mapping):
        return params
    out: dict[str, Any] = {g: (dict(ps) if isinstance(ps, Mapping) else ps) for g, ps in (params or {}).items()}
    reward = out.setdefault("reward", {})
    if isinstance(reward, dict):
        have = reward.get("gold")
        have = list(have) if isinstance(have, (list, tuple)) else ([] if have is None else have)
        if isinstance(have, list):
            reward["gold"] = have + [g for g in gold if g not in have]
    return out
