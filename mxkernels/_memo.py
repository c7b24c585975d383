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
