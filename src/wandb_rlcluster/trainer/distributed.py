"""Rank helpers: every process must take the same stop decision at the same step.

A stop decided on one rank only leaves the others waiting in the next
collective forever. The decision is therefore reduced across ranks (logical
OR via ``all_reduce(MAX)``) on every ``on_log`` call, which every rank reaches
at the same global step.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("wandb_rlcluster")


def _dist():
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is always there with transformers
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def world() -> tuple[int, int]:
    """(rank, world_size); (0, 1) outside distributed training."""
    dist = _dist()
    if dist is None:
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def any_rank(flag: bool) -> bool:
    """True on every rank if ``flag`` is True on any rank. A no-op on a single process."""
    dist = _dist()
    if dist is None or dist.get_world_size() == 1:
        return flag
    import torch

    device = torch.device("cpu")
    if dist.get_backend() == "nccl" and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
