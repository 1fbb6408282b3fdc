"""Record once: train every (base, seed) healthy twin and every (cause, seed) faulty run, save the rows as logged.

Each run is a real TRL trainer on the tiny local model (``wandb_rlcluster.tiny``), started from the same briefly
pretrained policy as its twin (same seed, same data order, same sampling) so that the two differ only from the
switch step on. What is written per run, under ``bench-out/faults/runs/``: ``<name>.jsonl`` -- the trainer's own
``state.log_history``, row for row -- and ``<name>.json`` with the cause, seed, onset, damage step and the damage
rule (computed here, from the rows and the twin, before any detector reads them).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from causes import BASES, CAUSES, Ctx, GoldReward, ProxyReward, SwitchableCollator, damage_step, onset_for
from transformers import TrainerCallback

PRETRAIN_STEPS = 120


@dataclass
class RunMeta:
    name: str
    base: str
    trainer: str
    seed: int
    cause: str | None
    onset: int | None
    damage: int | None
    damage_rule: str | None
    expected: list[str]
    steps: int
    n_rows: int
    train_s: float
    error: str | None = None


class FaultSwitch(TrainerCallback):
    """Switches the fault on so that the row logged at ``onset`` is the first one trained under it."""

    def __init__(self, onset: int, switch: Any, ctx_ref: list[Ctx]) -> None:
        self.onset, self.switch, self.ctx_ref, self.done = onset, switch, ctx_ref, False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.done and state.global_step >= self.onset - 1:
            self.switch(self.ctx_ref[0])
            self.done = True


_PRETRAINED: dict[tuple[int, int], dict[str, Any]] = {}


def _cached_pretrain(original: Any) -> Any:
    """``tiny.pretrain`` once per (seed, steps): a twin and its faulty runs start from the same weights anyway, and
    on a shared CPU the pretraining is a third of a run's time."""
    def pretrain(model: Any, tokenizer: Any, *, steps: int = 120, seed: int = 0, **kw: Any) -> Any:
        key = (seed, steps)
        if key not in _PRETRAINED:
            original(model, tokenizer, steps=steps, seed=seed, **kw)
            _PRETRAINED[key] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict(_PRETRAINED[key])
        return model
    pretrain.cached = True  # type: ignore[attr-defined]
    return pretrain


def run_name(base_or_cause: str, seed: int) -> str:
    return f"{base_or_cause}-s{seed}"


def train_one(base: str, seed: int, cause: str | None, workdir: Path) -> tuple[list[dict[str, Any]], float, str | None]:
    """Train one run (the twin when ``cause`` is None); returns its logged rows, train seconds and any error."""
    from transformers.trainer_callback import PrinterCallback

    from wandb_rlcluster import tiny

    if not getattr(tiny.pretrain, "cached", False):
        tiny.pretrain = _cached_pretrain(tiny.pretrain)
    b = BASES[base]
    onset = onset_for(seed, base)
    ctx_ref: list[Ctx] = []
    callbacks = []
    if cause is not None:
        callbacks.append(FaultSwitch(onset, CAUSES[cause].switch, ctx_ref))
    proxy = ProxyReward(seed) if b.gold else None
    overrides = dict(b.overrides)
    eval_steps = overrides.pop("eval_steps", 0)
    extra: dict[str, Any] = {"reward_funcs": [proxy, GoldReward()]} if proxy is not None else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = tiny.make_trainer(b.kind, output_dir=workdir, max_steps=b.steps, seed=seed,
                                    pretrain_steps=PRETRAIN_STEPS, callbacks=callbacks, eval_steps=eval_steps,
                                    **extra, **overrides)
    trainer.remove_callback(PrinterCallback)
    collator = SwitchableCollator(trainer.data_collator, seed)
    collator.install(trainer)
    ctx_ref.append(Ctx(trainer, proxy, collator, seed=seed))
    error = None
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
    except Exception as e:  # noqa: BLE001 - a fault may crash the trainer; the rows up to the crash are the record
        error = f"{type(e).__name__}: {str(e)[:200]}"
    train_s = time.perf_counter() - t0
    rows = [dict(r) for r in trainer.state.log_history]
    return rows, train_s, error


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN; readers (ours, the peers') parse "nan" / "inf" strings back
    return v


def save_run(out: Path, meta: RunMeta, rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{meta.name}.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({k: _jsonable(v) for k, v in r.items()}) + "\n")
    (out / f"{meta.name}.json").write_text(json.dumps(asdict(meta), indent=1), encoding="utf-8")


def load_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        rows.append({k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in r.items()})
    return rows


def load_meta(path: Path) -> RunMeta:
    return RunMeta(**json.loads(path.read_text(encoding="utf-8")))


def record(base: str, seed: int, cause: str | None, out: Path, twin_rows: list[dict[str, Any]] | None = None
           ) -> tuple[RunMeta, list[dict[str, Any]]]:
    """Train and save one run; a faulty run's damage step is read against its twin's rows."""
    os.environ.setdefault("WANDB_MODE", "disabled")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        rows, train_s, error = train_one(base, seed, cause, Path(tmp))
    b = BASES[base]
    name = run_name(cause or f"twin_{base}", seed)
    if cause is None:
        meta = RunMeta(name, base, b.kind, seed, None, None, None, None, [], b.steps, len(rows), train_s, error)
    else:
        c = CAUSES[cause]
        onset = onset_for(seed, base)
        dmg = damage_step(c, rows, onset, twin_rows or [])
        meta = RunMeta(name, base, b.kind, seed, cause, onset, dmg, c.damage_rule, list(c.expected), b.steps,
                       len(rows), train_s, error)
    save_run(out, meta, rows)
    return meta, rows


def refresh_damage(runs_dir: Path) -> int:
    """Recompute every faulty run's damage step from its saved rows and its twin's with the rules in ``causes.py``
    (so the rules, not the moment a run was recorded, define it); returns how many changed."""
    changed = 0
    for mp in sorted(runs_dir.glob("*.json")):
        meta = load_meta(mp)
        if meta.cause is None or meta.cause not in CAUSES or meta.onset is None:
            continue
        twin = runs_dir / f"{run_name(f'twin_{meta.base}', meta.seed)}.jsonl"
        rows = load_rows(mp.with_suffix(".jsonl"))
        dmg = damage_step(CAUSES[meta.cause], rows, meta.onset, load_rows(twin) if twin.exists() else [])
        if dmg != meta.damage or meta.damage_rule != CAUSES[meta.cause].damage_rule:
            meta.damage, meta.damage_rule = dmg, CAUSES[meta.cause].damage_rule
            mp.write_text(json.dumps(asdict(meta), indent=1), encoding="utf-8")
            changed += 1
    return changed
