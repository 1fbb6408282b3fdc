"""The one module that reads TRL's GRPO/RLOO internals for rollouts: the completions the trainer already made.

Callbacks get no trainer and no completions, so :meth:`RLClusterCallback.attach` hands the trainer
here. What is read (TRL 1.16; ``GRPOTrainer`` and ``RLOOTrainer`` alike):

- ``trainer._logs``: ``prompt``, ``completion``, ``rewards[<fn>]`` and ``advantages`` deques that TRL fills
  on every process with the whole gathered generation batch, for its ``log_completions`` table (they
  are filled whether that option is on or not). The tail of the last batch is read at ``on_log``:
  no generation, no extra forward pass, no collective.
- ``trainer._calculate_rewards(inputs, prompts, completions, completion_ids_list)``, wrapped on the
  instance (main process only) to note each training batch's size and, from this process's
  ``completion_ids_list``, the token length of each completion and whether it ended with EOS (the
  same test as TRL's ``completions/clipped_ratio``: last id in ``eos_token_ids`` or the pad id).
- ``num_generations``, ``reward_func_names``, ``reward_weights``.

If any of it is missing or shaped differently (another TRL version, another trainer), rollout
statistics switch off with exactly one warning and the callback goes on as without ``attach()``.
Nothing here raises into the training loop.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.rollouts import ROLLOUT_GAUGES, RolloutBatch, RolloutStats, as_text, evidence_focus

logger = logging.getLogger("wandb_rlcluster")

_LOG_COLUMNS = ("prompt", "completion", "rewards", "advantages")
_REWARD_PARAMS = ("inputs", "prompts", "completions", "completion_ids_list")
TESTED_WITH = "TRL 1.16"


@dataclass
class _Note:
    """What the reward wrapper saw of one training batch on this process."""

    total: int  # completions in the gathered batch
    local: list[Any]  # this process's completions, as TRL passed them
    lengths: list[int]
    eos: list[bool]


def _tail(items: Any, n: int) -> list[Any]:
    size = len(items)
    return list(itertools.islice(items, max(0, size - n), size))


class RolloutTap:
    """Reads each training batch's completions, rewards and advantages from a GRPO/RLOO trainer."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.active = False
        self.problem = ""
        self.batches = 0
        self._noted = 0
        self._taken = 0
        self._note: _Note | None = None
        self._eos: frozenset[int] = frozenset()

    # -- setup ---------------------------------------------------------------------------------------
    def install(self) -> bool:
        """Hook into the trainer; False (after one warning) when its layout is not the one this reads."""
        problem = self._check()
        if problem:
            self._fail(problem)
            return False
        t = self.trainer
        original = t._calculate_rewards
        tap = self

        def _calculate_rewards(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            if tap.active:
                tap._record(out, args, kwargs)
            return out

        _calculate_rewards.__wrapped__ = original  # type: ignore[attr-defined]
        _calculate_rewards._rlcluster_tap = self  # type: ignore[attr-defined]
        t._calculate_rewards = _calculate_rewards
        self.active = True
        return True

    def _check(self) -> str:
        t = self.trainer
        name = type(t).__name__
        missing = [a for a in ("_logs", "_calculate_rewards", "num_generations", "reward_func_names",
                               "reward_weights", "state") if not hasattr(t, a)]
        if missing:
            return f"{name} has no {', '.join(missing)} (rollouts are read from GRPO and RLOO trainers)"
        logs = t._logs
        if not isinstance(logs, Mapping) or any(k not in logs for k in _LOG_COLUMNS) \
                or not isinstance(logs["rewards"], Mapping):
            return f"{name}._logs does not hold the {', '.join(_LOG_COLUMNS)} columns"
        try:
            params = list(inspect.signature(t._calculate_rewards).parameters)
        except (TypeError, ValueError):
            params = []
        if params[:4] != list(_REWARD_PARAMS):
            return f"{name}._calculate_rewards takes ({', '.join(params)}), not ({', '.join(_REWARD_PARAMS)})"
        if not isinstance(t.num_generations, int) or t.num_generations < 1:
            return f"{name}.num_generations is {t.num_generations!r}"
        ids = getattr(t, "eos_token_ids", None) or []
        pad = getattr(getattr(t, "_tokenizer", None), "pad_token_id", None)
        self._eos = frozenset(int(i) for i in [*ids, *([pad] if pad is not None else [])])
        return ""

    # -- on the training thread ------------------------------------------------------------------------
    def _record(self, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Called right after TRL scored a batch: note its size and, for this process's part, lengths and EOS."""
        try:
            model = getattr(self.trainer, "model", None)
            if model is not None and not getattr(model, "training", True):
                return  # evaluation batches are not training rollouts
            bound = dict(zip(_REWARD_PARAMS, args, strict=False)) | kwargs
            completions = list(bound["completions"])
            ids_list = bound["completion_ids_list"]
            shape = getattr(out, "shape", None)
            total = int(shape[0]) if shape is not None and len(shape) else len(completions)
            eos = self._eos
            self._note = _Note(total=total, local=completions, lengths=[len(ids) for ids in ids_list],
                               eos=[bool(len(ids)) and int(ids[-1]) in eos for ids in ids_list])
            self._noted += 1
        except Exception as e:  # noqa: BLE001 - a wrapper around TRL's reward step must never raise
            self._fail(f"reading a scored batch failed ({type(e).__name__}: {e})")

    def take(self, step: int) -> RolloutBatch | None:
        """The training batch scored since the last call, or None (no new batch, or the tap is off)."""
        if not self.active or self._noted == self._taken or self._note is None:
            return None
        self._taken = self._noted
        note = self._note
        self._note = None
        try:
            t = self.trainer
            logs = t._logs
            n = note.total
            if len(logs["completion"]) < n or len(logs["prompt"]) < n:
                return None  # TRL has not logged this batch (a trainer subclass that skips it)
            raw = _tail(logs["completion"], n)
            names = [str(x) for x in t.reward_func_names]
            weights = [float(w) for w in t.reward_weights.tolist()] if hasattr(t.reward_weights, "tolist") \
                else [float(w) for w in t.reward_weights]
            rewards = {fn: [float(x) for x in _tail(logs["rewards"][fn], n)] for fn in names if fn in logs["rewards"]}
            advantages = [float(x) for x in _tail(logs["advantages"], n)]
            k = len(note.local)
            mine = raw[:k] == note.local  # this process's completions come first in the gathered batch
            lengths: list[float] | None = [float(x) for x in note.lengths] if mine and k == n else None
            eos: list[bool | None] | None = ([*note.eos, *([None] * (n - k))]) if mine else None
            batch = RolloutBatch(
                step=step,
                prompts=[as_text(p) for p in _tail(logs["prompt"], n)],
                completions=[as_text(c) for c in raw],
                rewards=rewards,
                weights=dict(zip(names, weights, strict=False)),
                advantages=advantages if len(advantages) == n else None,
                lengths=lengths,
                eos=eos,
                group_size=int(t.num_generations),
            )
        except Exception as e:  # noqa: BLE001
            self._fail(f"reading the trainer's completion log failed ({type(e).__name__}: {e})")
            return None
        self.batches += 1
        return batch

    def _fail(self, reason: str) -> None:
        first = not self.problem
        self.active = False
        self.problem = reason
        if first:
            try:
                import trl

                version = f"TRL {trl.__version__}"
            except Exception:  # noqa: BLE001
                version = "this TRL"
            logger.warning("rlcluster: rollout statistics and alert examples are off: %s. They read the trainer's "
                           "internals as of %s (here: %s); every other gauge and alert works as without attach().",
                           reason, TESTED_WITH, version)


class RolloutJudge:
    """The callback's rollouts: each logged step's completions judged (``rollouts/...`` statistics for the row), and
    example completions put in every alert of a rollout-aware gauge. Off until a trainer is attached."""

    def __init__(self) -> None:
        self.tap: RolloutTap | None = None
        self.stats: RolloutStats | None = None
        self.row: dict[str, float] = {}  # this step's statistics, written to W&B with the row
        self.opts: dict[str, Any] = {}
        self.stored: Mapping[str, Any] | None = None  # a checkpoint's state, until a trainer is attached
        self.seconds = 0.0
        self.calls = 0

    def attach(self, trainer: Any, ceilings: Mapping[str, float] | None, opts: dict[str, Any]) -> None:
        self.opts = opts
        if not getattr(getattr(trainer, "accelerator", None), "is_main_process", True):
            return  # statistics and evidence come from the main process, like every other live input
        tap = RolloutTap(trainer)
        if tap.install():
            self.tap = tap
            self.stats = RolloutStats(ceilings)
            if self.stored:
                self.stats.load_state_dict(self.stored)

    def state_dict(self) -> dict[str, Any]:
        return self.stats.state_dict() if self.stats is not None else {}

    def load_state_dict(self, value: Mapping[str, Any]) -> None:
        self.stored = dict(value or {})
        if self.stats is not None and value:
            try:
                self.stats.load_state_dict(value)
            except Exception as e:  # noqa: BLE001
                logger.warning("rlcluster: could not restore rollout state from the checkpoint (%s)", e)

    def judge(self, row: dict[str, Any], step: int) -> None:
        """Add this step's rollout statistics to the row (main process, attached trainer only)."""
        self.row = {}
        if self.tap is None or self.stats is None:
            return
        batch = self.tap.take(step)
        if batch is None:
            return
        t0 = time.perf_counter()
        stats = self.stats.update(batch)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        row.update(stats)
        self.row = stats

    def evidence(self, events: list[Any]) -> None:
        """Example completions for every alert of a rollout-aware gauge that fired on this row."""
        if self.stats is None or self.stats.last is None:
            return
        opts = self.opts
        cache: dict[str | None, list[dict[str, Any]]] = {}
        for e in events:
            if e.kind != "firing" or e.gauge not in ROLLOUT_GAUGES:
                continue
            focus = evidence_focus(e.metric)
            if focus not in cache:
                cache[focus] = self.stats.evidence(focus, max_chars=opts["max_chars"], redact=opts["redact"],
                                                   max_examples=opts["max_examples"])
            e.evidence = cache[focus]
