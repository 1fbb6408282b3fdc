"""Rollout statistics for ``rlcluster analyze`` of a W&B run: the completions tables TRL logged.

With ``log_completions=True`` TRL's GRPO/RLOO trainers log a W&B table ``completions`` at every logging
step: the last generation batch (step, prompt, completion, one column per reward function, advantage),
the very batch the live callback reads through ``attach()``. Each table becomes the same ``rollouts/...``
statistics (``core/rollouts.py``), merged into the trainer's log row of that step so the gauges judge them
as they would live. Lengths are characters here (the table has no token counts) and EOS is unknown.

A run written by the callback with ``attach()`` already carries ``rlcluster/rollouts/...`` values: they
are merged the same way (and the tables are not re-judged), and its ``rlcluster/rollouts/evidence``
tables give each alert's examples back. Findings of the rollout-aware gauges get their examples from
those tables, else from the completions table of their step (re-read then: memory stays bounded).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core.rollouts import ROLLOUT_GAUGES, RolloutBatch, RolloutStats, batch_from_table, evidence_focus
from .readers import InputRefused, read_bounded

__all__ = ["OfflineRollouts", "add_evidence", "with_rollouts"]

_OWN = "rlcluster/rollouts/"
_TABLE_LIMIT = 256 * 1024 * 1024  # one completions table (a large batch of long completions is tens of MB)


def _step(row: Mapping[str, Any]) -> int | None:
    s = row.get("train/global_step")
    return int(s) if isinstance(s, (int, float)) and s == s and abs(s) < 2**53 else None


def _is_metrics_row(row: Mapping[str, Any]) -> bool:
    return "train/reward" in row or "train/loss" in row


@dataclass
class OfflineRollouts:
    """The rollout tables of one W&B offline run, and what was computed from them."""

    run_dir: Path
    completions: list[tuple[int, str]] = field(default_factory=list)  # (step, table path) of TRL's tables
    evidence_tables: list[tuple[int, str]] = field(default_factory=list)  # rlcluster/rollouts/evidence
    group_size: int = 0
    weights: list[float] | None = None
    reward_names: list[str] | None = None
    judged: int = 0  # completions tables turned into statistics
    skipped: list[str] = field(default_factory=list)  # tables that could not be read, with the reason

    def read_table(self, path: str) -> tuple[list[str], list[list[Any]]] | None:
        """(columns, rows) of a table file of this run, or None (noted in ``skipped``)."""
        try:
            f = (self.run_dir / "files" / path).resolve()
            if self.run_dir.resolve() not in f.parents:
                raise InputRefused("outside the run directory")
            doc = json.loads(read_bounded(f, _TABLE_LIMIT))
            cols, data = doc["columns"], doc["data"]
            if not isinstance(cols, list) or not isinstance(data, list):
                raise ValueError("not a table")
            return [str(c) for c in cols], [r for r in data if isinstance(r, list)]
        except (OSError, InputRefused, ValueError, KeyError, TypeError, RecursionError) as e:
            self.skipped.append(f"{path}: {type(e).__name__}: {e}")
            return None

    def batch(self, step: int, path: str) -> RolloutBatch | None:
        table = self.read_table(path)
        if table is None:
            return None
        cols, data = table
        names = [c for c in cols if c in self.reward_names] if self.reward_names else None
        weights = self.weights if self.weights is not None and names is not None and len(self.weights) == len(names) \
            else None
        return batch_from_table(cols, data, step=step, reward_names=names, weights=weights,
                                group_size=self.group_size)

    def batch_at(self, step: int) -> RolloutBatch | None:
        """The completions batch logged at ``step`` or the last one before it."""
        before = [(s, p) for s, p in self.completions if s <= step]
        return self.batch(*before[-1]) if before else None

    def evidence_at(self, step: int, focus: str | None, max_chars: int = 300) -> list[dict[str, Any]]:
        own = [p for s, p in self.evidence_tables if s == step]
        if own:  # what the live alert showed, as the callback logged it
            table = self.read_table(own[-1])
            if table is not None:
                return _examples_from_evidence_table(*table)
        b = self.batch_at(step)
        if b is None:
            return []
        stats = RolloutStats()
        stats.update(b)
        return stats.evidence(focus, max_chars=max_chars)


def _examples_from_evidence_table(cols: list[str], data: list[list[Any]]) -> list[dict[str, Any]]:
    out = []
    for r in data:
        d = dict(zip(cols, r, strict=False))
        ex = {k: d.get(k) for k in ("why", "step", "prompt", "completion", "reward", "advantage", "length",
                                    "length_unit", "repetition") if d.get(k) is not None}
        if d.get("eos") is not None:
            ex["eos"] = bool(d["eos"])
        ex["rewards"] = {c[7:]: d[c] for c in cols if c.startswith("reward:")}
        out.append(ex)
    return out


def with_rollouts(run: Any) -> tuple[list[dict[str, Any]], OfflineRollouts | None]:
    """The run's history rows with rollout statistics merged into each step's trainer row, and the source."""
    history: list[dict[str, Any]] = run.history
    refs = [t for t in run.tables if t.get("type") == "table-file" and isinstance(t.get("path"), str)]
    own_keys = any(isinstance(k, str) and k.startswith(_OWN) for row in history[:1000] for k in row)
    if not refs and not own_keys:
        return history, None
    config = run.config if isinstance(run.config, Mapping) else {}
    g = config.get("num_generations")
    w = config.get("reward_weights")
    names = sorted({k[14:-5] for row in history[:200] for k in row
                    if isinstance(k, str) and k.startswith("train/rewards/") and k.endswith("/mean")})
    ro = OfflineRollouts(Path(run.path), group_size=int(g) if isinstance(g, int) and g > 0 else 0,
                         weights=[float(x) for x in w] if isinstance(w, list) and all(
                             isinstance(x, (int, float)) for x in w) else None,
                         reward_names=names or None)
    # each table by the trainer step of the row that logged it
    seen: set[tuple[str, int]] = set()
    for row in history:
        for key, value in row.items():
            if not isinstance(value, Mapping) or value.get("_type") != "table-file" or not isinstance(
                    value.get("path"), str):
                continue
            step = _step(row)
            if step is None or (key, step) in seen:
                continue  # TRL logs the last batch again with the end-of-training row: judged once
            seen.add((key, step))
            if key == "completions":
                ro.completions.append((step, value["path"]))
            elif key == "rlcluster/rollouts/evidence":
                ro.evidence_tables.append((step, value["path"]))
    # the trainer's metrics row of each step (the last one), where the rollout values go
    target: dict[int, dict[str, Any]] = {}
    for row in history:
        s = _step(row)
        if s is not None and _is_metrics_row(row):
            target[s] = row
    rows = history
    dest: dict[str, Any] | None
    if own_keys:  # the callback already judged the rollouts live: move its values into the trainer's row
        for row in history:
            own = [k for k in row if isinstance(k, str) and k.startswith(_OWN) and not isinstance(row[k], Mapping)]
            s = _step(row)
            if not own or s is None:
                continue
            dest = target.get(s, row)
            for k in own:
                dest["rollouts/" + k[len(_OWN):]] = row.pop(k) if dest is not row else row[k]
    else:
        stats = RolloutStats()
        for step, path in ro.completions:
            b = ro.batch(step, path)
            if b is None or not len(b):
                continue
            values = stats.update(b)
            ro.judged += 1
            dest = target.get(step)
            if dest is None:
                dest = {"train/global_step": step}
                rows = rows if rows is not history else list(history)
                rows.append(dest)  # no trainer row for that step: a row of its own, after the others
            dest.update(values)
    return rows, ro


def add_evidence(analysis: Any, rollouts: OfflineRollouts | None, max_chars: int = 300) -> None:
    """Attach example completions to the analysis' findings (and alerts) of the rollout-aware gauges."""
    if rollouts is None or not (rollouts.completions or rollouts.evidence_tables):
        return
    cache: dict[tuple[int, str | None], list[dict[str, Any]]] = {}

    def examples(step: int, metric: str) -> list[dict[str, Any]]:
        key = (step, evidence_focus(metric))
        if key not in cache:
            cache[key] = rollouts.evidence_at(step, key[1], max_chars)
        return cache[key]

    for f in analysis.cluster.findings:
        if f.gauge in ROLLOUT_GAUGES:
            ex = examples(f.step, f.metric)
            if ex:
                analysis.evidence[(f.gauge, f.rule, f.step)] = ex
    for e in analysis.alerts or ():
        if e.kind == "firing" and e.gauge in ROLLOUT_GAUGES and not e.evidence:
            e.evidence = examples(e.step, e.metric)
