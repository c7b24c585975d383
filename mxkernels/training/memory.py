"""What a training forward keeps alive for the backward, counted tensor by tensor.

``saved_bytes`` runs one forward (and the loss) under ``torch.autograd.graph.saved_tensors_hooks``
and adds up the storages of every tensor autograd saves: activations, autocast's low-precision
weight copies, MXLinear's quantized forward copies and FP4-stored layer inputs (which
``_MXLinearFn`` saves through ``save_for_backward`` like everything else). Parameters are not
counted (they are resident whatever the recipe), and a storage saved twice (a view, or the
same tensor saved by two ops) counts once. This is the activation memory the FP4-storage
recipe (``fp4-activations``, the Hopper MoE paper's trick) is about; a CUDA peak also holds the
optimizer state, gradients and the transient buffers of whatever kernel runs at the peak.
"""
from __future__ import annotations

import collections
import contextlib

import torch


def count_saved(fn, exclude=()) -> dict:
    """Run ``fn()`` under saved-tensor hooks; the storages autograd saved, not counting those of
    the tensors in ``exclude`` (parameters). Returns ``{"total_bytes", "by_dtype",
    "n_storages"}``; ``fn``'s result is dropped before returning, which frees its graph."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, tuple[int, str]] = {}

    def pack(t: torch.Tensor):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr and ptr not in skip:
            nb = st.nbytes()
            if nb > seen.get(ptr, (0, ""))[0]:
                seen[ptr] = (nb, str(t.dtype).replace("torch.", ""))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out      # the numbers were taken while the graph was alive
    by_dtype: dict[str, int] = collections.defaultdict(int)
    for nb, dt in seen.values():
        by_dtype[dt] += nb
    return {"total_bytes": sum(by_dtype.values()), "by_dtype": dict(sorted(by_dtype.items())),
            "n_storages": len(seen)}


def saved_bytes(model: torch.nn.Module, input_ids: torch.Tensor, *,
                autocast_dtype: torch.dtype | None = torch.bfloat16) -> dict:
    """Bytes saved for the backward by one forward of ``model`` on ``input_ids`` (with labels).

    ``count_saved``'s dict plus ``"tokens"`` and ``"bytes_per_token"``. The forward runs under
    autocast to ``autocast_dtype`` on the input's device type (None: no autocast), as the
    trainer runs it; parameters are not counted.
    """
    def fwd():
        ac = torch.autocast(input_ids.device.type, dtype=autocast_dtype) \
            if autocast_dtype is not None else contextlib.nullcontext()
        with ac:
            return model(input_ids=input_ids, labels=input_ids)

    r = count_saved(fwd, exclude=list(model.parameters()))
    r["tokens"] = int(input_ids.numel())
    r["bytes_per_token"] = r["total_bytes"] / max(1, input_ids.numel())
    return r
