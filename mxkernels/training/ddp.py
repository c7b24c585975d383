"""Data-parallel training under ``torchrun``: DistributedDataParallel, NCCL on CUDA, gloo on CPU.

The trainer calls :func:`init_distributed` once. Without ``WORLD_SIZE`` (or with 1) nothing
is initialized and every helper is a no-op, so single-process runs carry no dependency on
``torch.distributed``. Each rank takes a contiguous slice of the global batch (see
``BatchSampler.batch``); gradients are averaged by DDP, so the update equals the
single-process one up to the order of floating-point sums.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .errors import TrainingConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_type: str) -> DistInfo:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        if local >= torch.cuda.device_count():
            raise TrainingConfigError(f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return DistInfo(rank, world, local)


def device_for(info: DistInfo, device_type: str) -> torch.device:
    return torch.device(f"cuda:{info.local_rank}") if device_type == "cuda" else torch.device("cpu")


def wrap(model, info: DistInfo, device: torch.device):
    if not info.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def unwrap(model):
    return getattr(model, "module", model)


def all_reduce_mean(x: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if not info.enabled:
        return x
    import torch.distributed as dist

    x = x.clone()
    dist.all_reduce(x)
    return x / info.world_size


def any_rank(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every rank when any rank's flag is true (e.g. a failed check)."""
    if not info.enabled:
        return flag
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def barrier(info: DistInfo) -> None:
    if info.enabled:
        import torch.distributed as dist

        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
