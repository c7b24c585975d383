"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``) for ``mxref train --fsdp``.

Under ``torchrun`` with ``--fsdp`` the trainer shards the model instead of wrapping it in DDP:
every decoder layer (a module whose class name ends in ``DecoderLayer``) is one
``fully_shard`` unit and the root (embeddings, final norm, ``lm_head``) another, on a 1-D
device mesh over all ranks (NCCL on CUDA, gloo on CPU). Parameters stay fp32 (no
``MixedPrecisionPolicy``): the trainer's bf16 autocast does the casting exactly as in a
single-process run, so the only numerical difference from one process with
``--grad-accum WORLD_SIZE`` is the order of floating-point sums (the gradient reduce-scatter,
and the gradient-norm all-reduce of ``clip_grad_norm_``).

MXLinear needs nothing special: ``fully_shard`` all-gathers a decoder layer's parameters
before its forward (and again before its backward), so ``MXLinear.forward`` receives the full,
unsharded ``weight`` and quantizes the same operand as one process would. The in-run
validation therefore captures full operands; :func:`gathered_weight` gathers the checked
layer's sharded ``weight`` when a caller wants the parameter itself (the trainer records its
SHA-256 beside the check, so a check can be tied to the exact weights it saw).

Checkpoints keep the single-process format (``checkpoint.py``): :func:`full_model_state` and
:func:`full_optimizer_state` gather the sharded state into full CPU tensors (collectives: every
rank calls them, rank 0 writes), keyed exactly as ``model.state_dict()`` /
``optimizer.state_dict()`` of the unsharded model; :class:`FullStateModel` and
:class:`FullStateOptimizer` give ``checkpoint.load_checkpoint`` an object whose
``load_state_dict`` takes those full tensors and keeps each rank's shard
(``distribute_tensor`` on the parameter's mesh and placements).
"""
from __future__ import annotations

import contextlib

import torch

from .errors import TrainingConfigError


def _dtensor_cls():
    from torch.distributed.tensor import DTensor

    return DTensor


def is_fsdp(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, FSDPModule)


def shard_units(model: torch.nn.Module) -> list[str]:
    """Names of the modules that become their own ``fully_shard`` unit (decoder layers)."""
    return [n for n, m in model.named_modules() if n and type(m).__name__.endswith("DecoderLayer")]


def wrap(model: torch.nn.Module, info, device: torch.device) -> torch.nn.Module:
    """Shard ``model`` in place (decoder layers, then the root); returns the same object."""
    if not info.enabled:
        raise TrainingConfigError("--fsdp needs torchrun with WORLD_SIZE > 1")
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError as e:  # pragma: no cover - torch < 2.6
        raise TrainingConfigError(f"--fsdp needs torch.distributed.fsdp.fully_shard ({e})") from None
    mesh = init_device_mesh(device.type, (info.world_size,))
    units = shard_units(model)
    if not units:
        raise TrainingConfigError(f"--fsdp: {type(model).__name__} has no *DecoderLayer modules "
                                  "to shard")
    for name in units:
        fully_shard(model.get_submodule(name), mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


@contextlib.contextmanager
def gradient_sync(model, sync: bool):
    """FSDP2's ``no_sync``: skip the reduce-scatter of non-final micro-batches (the unsharded
    gradients accumulate locally and are reduce-scattered with the last one)."""
    model.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def to_full(t):
    """A DTensor's full value (collective), or ``t`` itself."""
    return t.full_tensor() if isinstance(t, _dtensor_cls()) else t


def full_model_state(model) -> dict:
    """``model.state_dict()`` with every sharded tensor gathered, on the CPU. Every rank must call."""
    return {k: to_full(v).detach().to("cpu").contiguous() for k, v in model.state_dict().items()}


def full_optimizer_state(optimizer) -> dict:
    """``optimizer.state_dict()`` (integer parameter ids, as one process writes it) with every
    sharded state tensor gathered, on the CPU. Every rank must call, in the same order."""
    sd = optimizer.state_dict()
    state = {}
    for pid in sorted(sd["state"]):
        state[pid] = {k: (to_full(v).detach().to("cpu").clone() if torch.is_tensor(v) else v)
                      for k, v in sd["state"][pid].items()}
    return {"state": state, "param_groups": sd["param_groups"]}


class _Static:
    """Something with ``state_dict()`` returning a precomputed dict (checkpoint.save_checkpoint)."""

    def __init__(self, sd: dict):
        self._sd = sd

    def state_dict(self) -> dict:
        return self._sd


def static(sd: dict) -> _Static:
    return _Static(sd)


def _distribute_like(full: torch.Tensor, like):
    """The shard of ``full`` that this rank holds for the (sharded) tensor ``like``."""
    if not isinstance(like, _dtensor_cls()):
        return full.to(device=like.device, dtype=like.dtype)
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(full.to(device=like.device, dtype=like.dtype), like.device_mesh,
                             like.placements)


class FullStateModel:
    """``checkpoint.load_checkpoint`` view of a sharded model: ``state_dict()`` gives full shapes
    (meta tensors, no communication), ``load_state_dict(full)`` keeps this rank's shards."""

    def __init__(self, model):
        self.model = model

    def state_dict(self) -> dict:
        return {k: torch.empty(v.shape, dtype=v.dtype, device="meta")
                for k, v in self.model.state_dict().items()}

    def load_state_dict(self, full: dict):
        own = self.model.state_dict()
        self.model.load_state_dict({k: _distribute_like(full[k], own[k]) for k in own})


class FullStateOptimizer:
    """``load_state_dict`` of a full (single-process format) optimizer state into the optimizer
    of a sharded model: each state tensor shaped like its parameter becomes the local shard."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def load_state_dict(self, full: dict):
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        state = {}
        for pid, st in full["state"].items():
            p = params[int(pid)]
            state[pid] = {k: (_distribute_like(v, p) if torch.is_tensor(v) and v.dim() > 0
                              and tuple(v.shape) == tuple(p.shape) else v)
                          for k, v in st.items()}
        self.optimizer.load_state_dict({"state": state, "param_groups": full["param_groups"]})


def gathered_weight(layer) -> torch.Tensor:
    """The full ``weight`` of ``layer`` (all-gathered when sharded; every rank must call)."""
    return to_full(layer.weight.detach())
