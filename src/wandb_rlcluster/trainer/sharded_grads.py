"""Gradient health from the FULL gradients when the model is sharded (FSDP2, DeepSpeed ZeRO-1/2/3).

Under sharding no rank holds a whole gradient: FSDP2 hands each rank a ``Shard(0)`` DTensor slice, ZeRO-1/2 keep
each rank's partition of the flat gradient buffer inside the optimizer (``p.grad`` is None), ZeRO-3 partitions every
parameter (``p.shape`` may be ``(0,)``; the full one is ``p.ds_shape``). Every statistic the gradient gauge needs is
a sum over elements (per-layer squared norms, the total, tiny and non-finite counts), so each rank sums its own
slice and ONE ``all_reduce(SUM)`` of a packed tensor gives the full values -- no gradient is ever gathered.

The collective is entered by every rank at the same optimizer step: whether a step is measured depends only on the
global step and the cadence, which all ranks share, and a rank that fails to read its slice still enters the
reduction (with a failure flag), so the ranks never wait on each other. Where DeepSpeed runs its optimizer step
inside ``accelerator.backward`` (no callback hook between backward and step), the ZeRO optimizer's ``step`` is
wrapped for the run and unwrapped at its end. An engine this module cannot read is reported as unavailable, with
the reason, never measured wrongly.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

logger = logging.getLogger("wandb_rlcluster")

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
TINY = 1e-8


def layer_index(name: str) -> int | None:
    """The transformer block a parameter belongs to (``model.layers.3.mlp...`` -> 3), None outside the blocks."""
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


@dataclass
class GradientSums:
    """Additive gradient statistics: each rank sums its own elements; the sum over ranks is the full model's."""

    n_layers: int
    layer_sq: list[float] = field(default_factory=list)
    layer_numel: list[float] = field(default_factory=list)
    total_sq: float = 0.0
    small: float = 0.0
    nonfinite: float = 0.0
    numel: float = 0.0
    failed: float = 0.0  # ranks that could not read their slice

    def __post_init__(self) -> None:
        self.layer_sq = self.layer_sq or [0.0] * self.n_layers
        self.layer_numel = self.layer_numel or [0.0] * self.n_layers

    def add(self, name: str, grad: torch.Tensor, weight: float = 1.0) -> None:
        """One parameter's local gradient slice (``weight`` < 1 where the slice is replicated on other ranks)."""
        g = grad.detach()
        if g.numel() == 0:
            return
        # reduced in float32 at least, without a widened copy of the gradient (an embedding's can be gigabytes)
        wide = torch.float32 if g.dtype in (torch.float16, torch.bfloat16) else None
        sq = float(torch.linalg.vector_norm(g, dtype=wide)) ** 2
        small = float((g.abs() < TINY).sum())
        nonfinite = float((~torch.isfinite(g)).sum())
        self.total_sq += weight * sq
        self.small += weight * small
        self.nonfinite += weight * nonfinite
        self.numel += weight * g.numel()
        idx = layer_index(name)
        if idx is not None and idx < self.n_layers:
            self.layer_sq[idx] += weight * sq
            self.layer_numel[idx] += weight * g.numel()

    def pack(self, device: torch.device | str = "cpu") -> torch.Tensor:
        values = [*self.layer_sq, *self.layer_numel, self.total_sq, self.small, self.nonfinite, self.numel,
                  self.failed]
        return torch.tensor(values, dtype=torch.float64, device=device)

    @classmethod
    def unpack(cls, t: torch.Tensor, n_layers: int) -> GradientSums:
        v = t.detach().cpu().tolist()
        L = n_layers
        return cls(L, v[:L], v[L:2 * L], *v[2 * L:2 * L + 5])

    def stats(self) -> tuple[dict[str, float], dict[str, float]]:
        """(live inputs for the core, per-layer norms for W&B), the same keys as the single-process probe, plus
        ``measured_norm``: the norm of every gradient element read (to compare with the logged ``grad_norm``)."""
        if self.numel <= 0:
            return {}, {}
        out: dict[str, float] = {"gradients/nonfinite": float(round(self.nonfinite)),
                                 "gradients/sparsity": self.small / max(1.0, self.numel)}
        per_layer = {f"layer_{i:02d}_norm": math.sqrt(sq) if sq == sq and sq >= 0 else float("nan")
                     for i, (sq, n) in enumerate(zip(self.layer_sq, self.layer_numel, strict=True)) if n > 0}
        finite = [v for v in per_layer.values() if math.isfinite(v)]
        if len(finite) >= 2 and min(finite) > 0:
            out["gradients/layer_spread"] = max(finite) / min(finite)
        per_layer["measured_norm"] = math.sqrt(self.total_sq) if self.total_sq == self.total_sq else float("nan")
        return out, per_layer


def _reduce(sums: GradientSums, group: Any = None, device: torch.device | str = "cpu") -> GradientSums:
    """ONE all_reduce(SUM) of the packed statistics over ``group`` (every rank of it must call this)."""
    import torch.distributed as dist

    t = sums.pack(device)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return GradientSums.unpack(t, sums.n_layers)


def _collective_device(sample: torch.Tensor | None = None) -> torch.device:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return sample.device if sample is not None and sample.device.type != "meta" else torch.device("cpu")


def _n_layers(names: Iterable[str]) -> int:
    idx = [i for i in (layer_index(n) for n in names) if i is not None]
    return max(idx) + 1 if idx else 0


def whole_gradient_stats(named_params: list[tuple[str, Any]], n_layers: int) -> tuple[dict[str, float],
                                                                                       dict[str, float]]:
    """One process or DDP (rank 0 alone, no collective): every gradient is whole and the same on every rank."""
    sums = GradientSums(n_layers)
    for name, p in named_params:
        if p.grad is not None:
            sums.add(name, p.grad)
    return sums.stats()


# -- FSDP2 --------------------------------------------------------------------------------------------------------


def _dtensor_weight(t: Any) -> float | None:
    """1 / (ranks holding a copy of this shard); None when a placement is Partial (not yet reduced: no measure)."""
    mesh = getattr(t, "device_mesh", None)
    placements = getattr(t, "placements", None)
    if mesh is None or placements is None:
        return 1.0
    copies = 1
    for dim, pl in enumerate(placements):
        if pl.is_partial():
            return None
        if pl.is_replicate():
            copies *= mesh.size(dim)
    return 1.0 / copies


def fsdp2_gradient_stats(named_params: list[tuple[str, Any]], n_layers: int) -> tuple[dict[str, float],
                                                                                       dict[str, float]]:
    """FSDP2 (every rank, same step): each rank's ``Shard(0)`` slice summed locally, one all_reduce."""
    sums = GradientSums(n_layers)
    sample = None
    try:
        for name, p in named_params:
            g = p.grad
            if g is None:
                continue
            if hasattr(g, "to_local"):
                weight = _dtensor_weight(g)
                if weight is None:
                    raise RuntimeError(f"{name}: gradient is a Partial DTensor (not reduced yet)")
                local = g.to_local()
            else:  # a parameter FSDP2 left whole (replicated on every rank)
                weight, local = _replicated_weight(), g
            sample = local if sample is None else sample
            sums.add(name, local, weight)
    except Exception as e:  # noqa: BLE001 - still enter the reduction: the other ranks are waiting in it
        logger.warning("rlcluster: reading this rank's FSDP2 gradient shards failed (%s: %s)", type(e).__name__, e)
        sums = GradientSums(n_layers, failed=1.0)
    full = _reduce(sums, device=_collective_device(sample))
    if full.failed:
        raise RuntimeError(f"{int(full.failed)} rank(s) could not read their gradient shards")
    return full.stats()


def _replicated_weight() -> float:
    import torch.distributed as dist

    return 1.0 / dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1.0


# -- DeepSpeed ZeRO -----------------------------------------------------------------------------------------------


def find_zero_optimizer(optimizer: Any) -> Any:
    """The DeepSpeed ZeRO optimizer inside accelerate's / the Trainer's wrappers, or None."""
    seen = 0
    while optimizer is not None and seen < 8:
        if type(optimizer).__module__.startswith("deepspeed.runtime.zero"):
            return optimizer
        optimizer = getattr(optimizer, "optimizer", None)
        seen += 1
    return None


def zero_stage(zero_opt: Any) -> int:
    if type(zero_opt).__name__.endswith("Stage3") or hasattr(zero_opt, "fp16_partitioned_groups_flat"):
        return 3
    return 2 if getattr(zero_opt, "partition_gradients", False) else 1


def _zero12_local(p: Any) -> torch.Tensor | None:
    """This rank's fragment of a ZeRO-1/2 parameter's averaged gradient (None: this rank owns none of it)."""
    mapping = getattr(p, "_hp_mapping", None)
    if mapping is None:
        return None
    frag = mapping.get_lp_grad_fragment(p._index_in_param_group)
    addr = mapping.lp_fragment_address
    flat = frag.reshape(-1)
    if flat.numel() == p.numel() and addr.numel != p.numel():  # a full-size accumulation buffer: our part only
        flat = flat.narrow(0, addr.start, addr.numel)
    return flat


def _zero3_local(p: Any, zero_opt: Any) -> torch.Tensor | None:
    """This rank's partition of a ZeRO-3 parameter's gradient, without the padding of the last partition."""
    import torch.distributed as dist

    if not p.requires_grad:
        return None
    local = zero_opt.get_local_fp32_grad_for_param(p)
    if local is None:
        return None
    local = local.reshape(-1)
    group = getattr(p, "ds_process_group", None) or getattr(zero_opt, "dp_process_group", None)
    rank = dist.get_rank(group=group)
    valid = max(0, min(local.numel(), int(p.ds_numel) - rank * local.numel()))
    return local.narrow(0, 0, valid)


def zero_gradient_stats(named_params: list[tuple[str, Any]], zero_opt: Any, stage: int,
                        n_layers: int) -> tuple[dict[str, float], dict[str, float]]:
    """ZeRO-1/2/3 (every rank, before the optimizer step): each rank's partition summed locally, one all_reduce
    over the data-parallel group (every gradient element lives on exactly one rank of it)."""
    sums = GradientSums(n_layers)
    sample = None
    try:
        for name, p in named_params:
            if not p.requires_grad:
                continue
            local = _zero3_local(p, zero_opt) if stage == 3 else _zero12_local(p)
            if local is None:
                continue
            sample = local if sample is None else sample
            sums.add(name, local)
    except Exception as e:  # noqa: BLE001 - still enter the reduction: the other ranks are waiting in it
        logger.warning("rlcluster: reading this rank's ZeRO-%d gradient partition failed (%s: %s)", stage,
                       type(e).__name__, e)
        sums = GradientSums(n_layers, failed=1.0)
    full = _reduce(sums, group=getattr(zero_opt, "dp_process_group", None), device=_collective_device(sample))
    if full.failed:
        raise RuntimeError(f"{int(full.failed)} rank(s) could not read their gradient partition")
    return full.stats()


# -- which engine, and how to read it -----------------------------------------------------------------------------


@dataclass
class ShardedGradients:
    """How this run's full gradients are read, decided once at ``on_train_begin`` (identically on every rank).

    ``engine``: ``single``, ``ddp``, ``fsdp2``, ``zero1``/``zero2``/``zero3``, or another name with ``unavailable``
    set to the reason. ``collective``: every rank must take part in each measurement. ``sharded_params``: no rank
    holds whole parameters (a forward pass on one rank would wait for the others' shards forever).
    """

    engine: str = "single"
    unavailable: str = ""
    collective: bool = False
    sharded_params: bool = False
    named_params: list[tuple[str, Any]] = field(default_factory=list)
    n_layers: int = 0
    zero_opt: Any = None
    stage: int = 0
    calls: int = 0  # measurements taken, and the seconds they took on this rank (benchmarks/bench_sharded.py)
    seconds: float = 0.0
    _original_step: Any = None
    _wrapper: Any = None
    _had_instance_step: bool = False
    _active: bool = False

    @property
    def label(self) -> str:
        return {"fsdp2": "FSDP2", "zero1": "DeepSpeed ZeRO-1", "zero2": "DeepSpeed ZeRO-2",
                "zero3": "DeepSpeed ZeRO-3", "ddp": "DDP", "single": "a single process"}.get(self.engine,
                                                                                            self.engine)

    @classmethod
    def detect(cls, args: Any, model: Any, optimizer: Any) -> ShardedGradients:
        import torch.distributed as dist

        from .probes import _unwrap

        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        base = _unwrap(model) if model is not None else None
        named = list(base.named_parameters()) if base is not None else []
        n_layers = _n_layers(n for n, _ in named)
        zero_opt = find_zero_optimizer(optimizer)
        if zero_opt is not None:
            stage = zero_stage(zero_opt)
            return cls(f"zero{stage}", collective=True, sharded_params=stage == 3, named_params=named,
                       n_layers=n_layers, zero_opt=zero_opt, stage=stage)
        if getattr(args, "deepspeed", None):
            inner = optimizer
            while getattr(inner, "optimizer", None) is not None:
                inner = inner.optimizer
            return cls("DeepSpeed without ZeRO", f"its optimizer ({type(inner).__name__}) is not a ZeRO optimizer, and "
                       "DeepSpeed reduces and clips the gradients inside its own step, where no callback runs")
        if any(hasattr(p, "placements") and hasattr(p, "to_local") for _, p in named):
            return cls("fsdp2", collective=True, sharded_params=True, named_params=named, n_layers=n_layers)
        if getattr(args, "fsdp", None) and world > 1 and _is_fsdp1(model):
            return cls("FSDP1", "FSDP version 1 keeps gradients in flat sharded buffers this probe does not read; "
                       "use FSDP2 (fsdp_config={'version': 2})", sharded_params=True)
        return cls("ddp" if world > 1 else "single", named_params=named, n_layers=n_layers)

    # -- DeepSpeed: measure inside the ZeRO optimizer's step ---------------------------------------------------
    def wrap_zero_step(self, due: Callable[[], bool], deliver: Callable[[dict[str, float], dict[str, float]], None],
                       on_error: Callable[[BaseException], None]) -> None:
        """Measure before the ZeRO optimizer's step on the steps ``due()`` says (the same on every rank)."""
        zero_opt = self.zero_opt
        original = zero_opt.step
        self._had_instance_step = "step" in vars(zero_opt)
        self._original_step = original
        self._active = True
        stats = self

        def step(*args: Any, **kwargs: Any) -> Any:
            measure = False
            if stats._active:
                try:
                    measure = due()
                except Exception as e:  # noqa: BLE001
                    on_error(e)
            if measure:
                t0 = time.perf_counter()
                try:
                    deliver(*zero_gradient_stats(stats.named_params, zero_opt, stats.stage, stats.n_layers))
                except Exception as e:  # noqa: BLE001 - never break the user's training
                    on_error(e)
                stats.calls += 1
                stats.seconds += time.perf_counter() - t0
            return original(*args, **kwargs)

        self._wrapper = step
        zero_opt.step = step

    def unwrap(self) -> None:
        """The ZeRO optimizer's own ``step`` back; if something wrapped it after us, ours only passes through."""
        self._active = False
        zero_opt = self.zero_opt
        if zero_opt is not None and self._original_step is not None and vars(zero_opt).get("step") is self._wrapper:
            if self._had_instance_step:
                zero_opt.step = self._original_step
            else:
                del zero_opt.step  # the class's step again
        self._original_step = None
        self._wrapper = None
        self.named_params = []
        self.zero_opt = None


def _is_fsdp1(model: Any) -> bool:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover
        return False
    seen = 0
    while model is not None and seen < 8:
        if isinstance(model, FullyShardedDataParallel):
            return True
        model = getattr(model, "module", None)
        seen += 1
    return False
