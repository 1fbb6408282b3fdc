"""Per-layer gradient health inside a Trainer, and which forward probes stay off under sharding.

The callback reads the full gradients every ``grad_every`` optimizer steps: on rank 0 under one process or DDP, from
every rank's shards under FSDP2 (one all_reduce), inside the wrapped optimizer step under ZeRO
(``sharded_grads.py``). A measurement waits for the step's log row, where the logged (pre-clip) ``grad_norm`` of the
same step undoes a clipping factor.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..core.keys import to_float
from . import probes
from .sharded_grads import ShardedGradients, fsdp2_gradient_stats, whole_gradient_stats
from .sharded_grads import layer_index as sharded_layer

logger = logging.getLogger("wandb_rlcluster")


class GradientReader:
    """Gradient statistics for the step's row, and the notes on what is off or how it is measured under this engine.

    Args:
        every: optimizer steps between two measurements (0: off).
        probe_every: the forward probes' cadences, ``{gauge: (label, every)}`` (what sharding turns off).
        lora_every: the LoRA probe's cadence.
        live: where a measurement waits for the step's row (the callback's live values).
        on_error: ``(where, exception)``: a failing probe is one warning, never an exception in training.
    """

    def __init__(self, every: int, probe_every: Mapping[str, tuple[str, int]], lora_every: int,
                 live: dict[str, float], on_error: Callable[[str, BaseException], None]) -> None:
        self.every = every
        self.probe_every = probe_every
        self.lora_every = lora_every
        self.live = live
        self.on_error = on_error
        self.grads: ShardedGradients | None = None
        self.pending: tuple[int, dict[str, float], bool] | None = None
        self.max_grad_norm = 0.0
        self.notes: dict[str, str] = {}
        self.collective_probes = False  # FSDP2 / ZeRO-3: every rank runs the probes' forward, the main one reports
        self.sharded_params = False
        self.forward_off = ""  # why the forward probes are off ("" while they are on)
        self._warned_clip = False

    def setup(self, args: Any, state: Any, model: Any, optimizer: Any) -> None:
        """How the full gradients are read under this engine, and which probes must stay off (same on every rank).

        ZeRO runs its optimizer step inside ``accelerator.backward``, where no callback hook runs: the ZeRO
        optimizer's ``step`` is wrapped until ``on_train_end`` and measures on the steps the cadence says."""
        grads = self.grads = ShardedGradients.detect(args, model, optimizer)
        self.max_grad_norm = float(getattr(args, "max_grad_norm", 0) or 0)
        notes: dict[str, str] = {}
        if self.every and grads.unavailable:
            notes["gradients"] = f"gradient stats: unavailable under {grads.label}: {grads.unavailable}"
        elif self.every and grads.collective:
            notes["gradients"] = (f"gradient stats under {grads.label}: from the full gradients (each rank sums "
                                  f"its shard, one all_reduce every {self.every} steps)")
        if grads.zero_opt is not None and self.every:
            every = self.every
            grads.wrap_zero_step(due=lambda: (state.global_step + 1) % every == 0,
                                 deliver=lambda live, layers: self.hold(state, live, layers, after_clip=False),
                                 on_error=lambda e: self.on_error("gradient probe", e))
        self.sharded_params = grads.sharded_params
        self.collective_probes = grads.engine in ("fsdp2", "zero3")
        if grads.sharded_params:
            why = (f"off under {grads.label}: the parameters are sharded, and a probe on the main process alone would "
                   "wait forever for the other ranks' shards")
            together = (f"under {grads.label}: every rank runs the probe at the same step (the sharded forward needs "
                        "them all), the main process reports")
            if not self.collective_probes:
                self.forward_off = why
            for gid, (label, probe_every) in self.probe_every.items():
                if probe_every:
                    notes[gid] = f"{label} {together}" if self.collective_probes else f"{label}: {why}"
            if self.lora_every:
                notes["lora"] = (f"LoRA: off under {grads.label}: the adapter weights are sharded (measuring them "
                                 "needs every rank's shards)")
        self.notes = notes
        if state.is_world_process_zero:
            for text in notes.values():  # what is off or unavailable is a warning; how it is measured is info
                (logger.warning if "off under" in text or "unavailable" in text else logger.info)("rlcluster: %s",
                                                                                                   text)

    def setup_failed(self, args: Any, e: BaseException) -> None:
        """Under FSDP / DeepSpeed a failed setup leaves every probe off: a probe on one rank could hang the others."""
        if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
            self.grads = ShardedGradients("sharded", f"setup failed ({type(e).__name__})", sharded_params=True)
            self.forward_off = "off under sharding: the probe setup failed"

    def notes_summary(self, prefix: str) -> dict[str, str]:
        return {f"{prefix}/probes/{gid}": text for gid, text in self.notes.items()}

    def apply_notes(self, cluster: Any) -> None:
        """The gauge table (``cluster.summary()``) says what is off or how it is measured under this engine."""
        for gid, text in self.notes.items():
            g = cluster.gauges.get(gid)
            if g is not None and not g.note:
                g.note = text

    def hold(self, state: Any, live: dict[str, float], layers: dict[str, float], after_clip: bool) -> None:
        """Keep a measurement (main process) for the step's log row; ``after_clip``: read after max_grad_norm."""
        if not state.is_world_process_zero:
            return
        self.live.update(live)  # spread, sparsity, non-finite: a common clipping factor leaves them as they are
        norm = layers.get("measured_norm", math.nan)
        clipped = after_clip and self.max_grad_norm > 0 and norm >= self.max_grad_norm * (1 - 1e-3)
        self.pending = (state.global_step + 1, layers, clipped)

    def settle(self, row: Mapping[str, Any], step: int) -> dict[str, float]:
        """Per-layer norms before clipping: transformers hands ``on_pre_optimizer_step`` the clipped gradients, all
        scaled by one factor, so the logged (pre-clip) grad_norm of the same step gives the factor back."""
        if self.pending is None:
            return {}
        measured_at, layers, clipped = self.pending
        self.pending = None
        if not clipped:
            return layers
        g = row.get("grad_norm")
        g = to_float(g) if isinstance(g, (int, float)) else None
        norm = layers.get("measured_norm", math.nan)
        if measured_at == step and g is not None and math.isfinite(g) and g > 0 and norm > 0:
            return {k: v * g / norm for k, v in layers.items()}
        if not self._warned_clip:
            self._warned_clip = True
            logger.warning("rlcluster: per-layer gradient norms of step %d were clipped to max_grad_norm and no "
                           "grad_norm was logged at that step to undo it: left out (make logging_steps divide "
                           "grad_every)", measured_at)
        return {}

    def measure(self, state: Any, model: Any) -> None:
        """``on_pre_optimizer_step``: the same decision on every rank (the global step and the cadence), since
        FSDP2's measurement is a collective."""
        if not self.every or model is None or (state.global_step + 1) % self.every:
            return
        grads = self.grads
        if grads is not None and (grads.unavailable or grads.zero_opt is not None):
            return  # nothing to read here, or ZeRO: measured inside the wrapped optimizer step
        t0 = time.perf_counter()
        try:
            if grads is not None and grads.collective:  # FSDP2: every rank, its shards, one all_reduce
                named = list(probes._unwrap(model).named_parameters())
                live, layers = fsdp2_gradient_stats(named, grads.n_layers)
            elif state.is_world_process_zero:  # one process or DDP: rank 0's gradients are the full ones
                named = list(probes._unwrap(model).named_parameters())
                n_layers = grads.n_layers if grads is not None else 1 + max(
                    (i for i in (sharded_layer(n) for n, _ in named) if i is not None), default=-1)
                live, layers = whole_gradient_stats(named, n_layers)
            else:
                return
            self.hold(state, live, layers, after_clip=True)
        except Exception as e:  # noqa: BLE001
            self.on_error("gradient probe", e)
        if grads is not None:
            grads.calls += 1
            grads.seconds += time.perf_counter() - t0

    def unwrap(self) -> None:
        """Every rank at the end: the ZeRO optimizer's own step back."""
        if self.grads is not None:
            try:
                self.grads.unwrap()
            except Exception as e:  # noqa: BLE001
                self.on_error("gradient probe", e)
