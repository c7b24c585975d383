"""Memoised constexpr tables: launch-time Python that depends only on names (format, profile,
dtype, tile) is computed once per argument tuple instead of on every kernel launch (it was
~50-180 us a launch, a large share of an MXLinear step's host time on a GPU)."""
from __future__ import annotations

import functools


def memo_dict(fn):
    """Cache ``fn(*args, **kw) -> dict`` by its (hashable) arguments; every call gets its own
    copy (callers add launch keys to it). Unhashable arguments (a custom Profile object, say)
    and raised errors are not cached."""
    cached = functools.lru_cache(maxsize=1024)(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            hash((args, tuple(sorted(kw.items()))))
        except TypeError:
            return fn(*args, **kw)
        return dict(cached(*args, **kw))

    wrapper.cache_clear = cached.cache_clear
    return wrapper


def memo(fn):
    """Cache a function of hashable arguments whose result is immutable (a bool, say)."""
    cached = functools.lru_cache(maxsize=1024)(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return cached(*args, **kw)
        except TypeError as e:
            if "unhashable" not in str(e):
                raise
            return fn(*args, **kw)

    return wrapper


class DeviceConsts:
    """Small host constants (sign vectors, sign masks) kept on their device, keyed by content.

    ``torch.from_numpy(v).to("cuda")`` of a pageable host tensor makes the host wait for the
    GPU: one such copy per rotated GEMM operand was 379 synchronizations in one mxfp4-fdw-h16
    step on llama-30m. A hit returns the cached device tensor (callers must not modify it); a
    miss (a new random sign draw) copies from pinned memory without blocking. At most ``cap``
    entries; the table is emptied when full (random signs change every step)."""

    def __init__(self, cap: int = 4096):
        self.cap = cap
        self._d: dict = {}
        self.misses = 0

    def get(self, host, device):
        import torch
        device = torch.device(device)
        if device.type == "cpu":
            return host
        if device.index is None:
            device = torch.device(device.type, torch.cuda.current_device())
        key = (str(host.dtype), tuple(host.shape), host.numpy().tobytes(), device)
        v = self._d.get(key)
        if v is None:
            self.misses += 1
            if len(self._d) >= self.cap:
                self._d.clear()
            v = self._d[key] = host.pin_memory().to(device, non_blocking=True)
        return v
