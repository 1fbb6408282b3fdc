"""The one place that knows transformers/TRL function names: what the training thread is doing.

Callbacks get no trainer reference and transformers has no "stuck" or "exception" event, so
the stall and crash notices read the training thread's stack (``sys._current_frames``) and
recognise frames by the names that transformers, TRL and torch give them today
(``_calculate_rewards``, ``evaluation_loop``, ``_save_checkpoint``, ``torch/distributed`` ...).
Those names are internals: if they change, a description falls back to the innermost frames,
and :func:`locate_train_frame` tells the callback (one warning) when ``Trainer.train`` itself
cannot be found on the stack. Reading frames never touches CUDA, locks or collectives.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

MAX_DEPTH = 2000

# (label, priority) by marker; lower priority number = more telling when several are on the stack.
# A marker is (path fragment or "", function names or None for any function in that path).
_MARKERS: tuple[tuple[str, str, frozenset[str] | None, int], ...] = (
    ("a collective (torch.distributed)", "torch/distributed/", None, 0),
    ("waiting for the vLLM server", "trl/generation/vllm_client", None, 1),
    ("generation (vLLM)", "vllm/", None, 1),
    ("the reward function", "trl/", frozenset({"_calculate_rewards"}), 2),
    ("generation", "transformers/generation/", frozenset({"generate"}), 3),
    ("generation", "trl/", frozenset({"_generate", "_generate_single_turn", "_generate_and_score_completions"}), 4),
    ("checkpointing", "transformers/", frozenset({"_save_checkpoint", "save_model", "_save"}), 3),
    ("evaluation", "transformers/", frozenset({"evaluate", "evaluation_loop", "prediction_step", "_evaluate"}), 3),
    ("data loading", "torch/utils/data/", frozenset({"__next__", "_next_data", "_get_data"}), 5),
    ("the optimizer step", "torch/optim/", None, 5),
    ("the backward pass", "torch/autograd/", None, 6),
    ("the backward pass", "torch/_tensor.py", frozenset({"backward"}), 6),
    ("a W&B call", "wandb/", None, 6),
    ("a trainer callback", "transformers/trainer_callback.py", frozenset({"call_event"}), 7),
    ("a forward pass", "torch/nn/modules/module.py", frozenset({"_call_impl", "_wrapped_call_impl"}), 8),
)
_THIS_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB = tuple(p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p)


@dataclass(frozen=True)
class Activity:
    """What a thread is doing: a label (``the reward function `my_reward```), and where (``rewards.py:42 in f``)."""

    label: str
    where: str

    def sentence(self) -> str:
        return f"{self.label}, at {self.where}" if self.where else self.label


@dataclass(frozen=True)
class TrainFrame:
    """Identifies the running ``Trainer.train`` call without keeping its frame (and the model) alive."""

    frame_id: int
    code: CodeType
    thread: int


def _norm(path: str) -> str:
    return path.replace(os.sep, "/")


def _is_library(path: str) -> bool:
    return ("site-packages" in path or "dist-packages" in path or path.startswith(_STDLIB)
            or path.startswith(_THIS_PACKAGE) or path.startswith("<"))


def _frames(frame: FrameType | None) -> list[FrameType]:
    """Innermost first."""
    out: list[FrameType] = []
    while frame is not None and len(out) < MAX_DEPTH:
        out.append(frame)
        frame = frame.f_back
    return out


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {getattr(code, 'co_qualname', code.co_name)}"


def describe_frames(frame: FrameType | None, train: TrainFrame | None = None) -> Activity:
    """What the stack starting at ``frame`` (innermost) is doing."""
    stack = _frames(frame)
    if not stack:
        return Activity("unknown (no Python frame)", "")
    if train is not None and len(stack) < MAX_DEPTH and not any(id(f) == train.frame_id and f.f_code is train.code
                                                                for f in stack):
        return Activity("not training: Trainer.train() has returned or raised without on_train_end",
                        _where(stack[0]))
    best: tuple[int, str, int] | None = None  # (priority, label, index)
    for i, f in enumerate(stack):
        path = _norm(f.f_code.co_filename)
        name = f.f_code.co_name
        for label, fragment, names, prio in _MARKERS:
            if fragment in path and (names is None or name in names) and (best is None or prio < best[0]):
                best = (prio, label, i)
    user = next((f for f in stack if not _is_library(_norm(f.f_code.co_filename))), None)
    where = _where(user if user is not None else stack[0])
    if best is None:
        return Activity(f"in {stack[0].f_code.co_name}", where)
    prio, label, i = best
    if label == "the reward function" and i > 0:
        fn = stack[i - 1].f_code.co_name  # the frame TRL called: the reward function (or a reward model)
        label = f"the reward function `{fn}`" if fn not in ("_call_impl", "_wrapped_call_impl") else \
            "the reward function (a reward model's forward pass)"
    elif label == "a collective (torch.distributed)":
        fn = next((f.f_code.co_name for f in reversed(stack[: i + 1]) if "torch/distributed/" in
                   _norm(f.f_code.co_filename)), "")
        label = f"a collective (torch.distributed.{fn}): another rank may have died or be stuck" if fn else label
    elif label == "a trainer callback" and i > 0:
        inner = stack[i - 1].f_code
        label = f"a trainer callback ({getattr(inner, 'co_qualname', inner.co_name)})"
    return Activity(label, where)


def describe_thread(ident: int, train: TrainFrame | None = None) -> Activity:
    """What thread ``ident`` is doing right now, read from another thread."""
    frame = sys._current_frames().get(ident)
    try:
        return describe_frames(frame, train)
    finally:
        del frame


def train_frame_alive(train: TrainFrame) -> bool | None:
    """Is ``Trainer.train`` still on its thread's stack? None when that cannot be told (a stack too deep)."""
    frame = sys._current_frames().get(train.thread)
    try:
        if frame is None:
            return False  # the training thread has ended
        stack = _frames(frame)
        if len(stack) >= MAX_DEPTH:
            return None
        return any(id(f) == train.frame_id and f.f_code is train.code for f in stack)
    finally:
        frame = None
        stack = []


def exception_through_train(train: TrainFrame) -> BaseException | None:
    """The exception that ended ``train``, if the training thread is still handling it (an ``except`` block, a
    ``with`` exit) or the interactive shell kept it (``sys.last_value``: IPython, the REPL)."""
    candidates: list[Any] = []
    current = sys._current_exceptions().get(train.thread)
    candidates.append(current[1] if isinstance(current, tuple) else current)  # a 3-tuple before Python 3.12
    candidates.append(getattr(sys, "last_value", None))
    for exc in candidates:
        if not isinstance(exc, BaseException):
            continue
        tb = exc.__traceback__
        while tb is not None:
            if id(tb.tb_frame) == train.frame_id and tb.tb_frame.f_code is train.code:
                return exc
            tb = tb.tb_next
    return None


def locate_train_frame() -> TrainFrame | None:
    """The caller's enclosing ``Trainer.train`` call, or None when transformers' layout is not the expected one."""
    transformers = sys.modules.get("transformers")
    trainer_cls = getattr(transformers, "Trainer", None) if transformers is not None else None
    if trainer_cls is None:
        return None
    import threading

    frame = sys._getframe(1)
    try:
        found = None
        for f in _frames(frame):
            if f.f_code.co_name == "train" and isinstance(f.f_locals.get("self"), trainer_cls):
                found = TrainFrame(id(f), f.f_code, threading.get_ident())
        return found  # the outermost: a trainer that calls another trainer's train() is still inside the first
    finally:
        del frame
