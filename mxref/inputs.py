"""Turn what a user passes into fp32 bit patterns (uint32), exactly.

fp16 and bf16 widen to fp32 without rounding, so every accepted source is represented exactly.
float64 is refused unless the caller names the rounding into fp32 (a silent float64 -> float32
cast is a double-rounding trap). Raw integer arrays need ``source_dtype``.
"""
from __future__ import annotations

import numpy as np

from .errors import AmbiguousInputError, AxisError, UnsupportedDtypeError

try:  # ml_dtypes is a declared dependency; keep the import soft so the message is ours
    import ml_dtypes
    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    _BF16 = None

SOURCE_DTYPES = ("float32", "float16", "bfloat16")
FLOAT64_ROUNDINGS = ("rne",)


def _torch_to_numpy(x):
    import torch  # only reached when the caller passed a torch tensor

    t = x.detach()
    if t.dtype == torch.bfloat16:
        return t.cpu().contiguous().view(torch.int16).numpy().view(np.uint16), "bfloat16"
    if t.dtype in (torch.float32, torch.float16, torch.float64):
        return t.cpu().numpy(), None
    raise UnsupportedDtypeError(
        f"torch dtype {t.dtype} is not supported; pass float32, float16 or bfloat16")


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def as_f32_bits(x, source_dtype: str | None = None, from_float64: str | None = None):
    """Return ``(bits, source_dtype_name)`` with ``bits`` a uint32 ndarray of x's shape."""
    declared = source_dtype
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if _is_torch(x):
        x, implied = _torch_to_numpy(x)
        if implied is not None:
            declared = declared or implied
            if declared != implied:
                raise AmbiguousInputError(
                    f"torch bfloat16 tensor passed with source_dtype={source_dtype!r}")
    elif not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple, float, int)):
            raise UnsupportedDtypeError(
                "Python lists/scalars carry float64 values; pass a numpy/torch array of "
                "float32, float16 or bfloat16 (or float64 with from_float64='rne')")
        raise UnsupportedDtypeError(f"unsupported input type {type(x).__name__}")
    if x.ndim == 0:
        raise AxisError("cannot block a 0-d input; pass at least a 1-d array")
    if declared is not None and declared not in SOURCE_DTYPES:
        raise UnsupportedDtypeError(
            f"source_dtype={declared!r} is not one of {SOURCE_DTYPES}")
    dt = x.dtype
    if dt == np.float32:
        _check_declared(declared, "float32", dt)
        return np.ascontiguousarray(x).view(np.uint32), "float32"
    if dt == np.float16:
        _check_declared(declared, "float16", dt)
        return np.ascontiguousarray(x).astype(np.float32).view(np.uint32), "float16"
    if _BF16 is not None and dt == _BF16:
        _check_declared(declared, "bfloat16", dt)
        return np.ascontiguousarray(x).view(np.uint16).astype(np.uint32) << np.uint32(16), "bfloat16"
    if dt == np.float64:
        if from_float64 is None:
            raise UnsupportedDtypeError(
                "float64 input refused: name the rounding into fp32 with from_float64='rne' "
                "(a silent float64 -> float32 cast is a double-rounding trap)")
        if from_float64 not in FLOAT64_ROUNDINGS:
            raise UnsupportedDtypeError(
                f"from_float64={from_float64!r} is not one of {FLOAT64_ROUNDINGS}")
        # IEEE-754 conversion, round to nearest even: numpy's cast is exactly that.
        with np.errstate(over="ignore"):   # out of fp32 range -> Inf is the IEEE answer
            return np.ascontiguousarray(x).astype(np.float32).view(np.uint32), "float32"
    if dt in (np.uint16, np.int16):
        if declared == "bfloat16":
            return x.view(np.uint16).astype(np.uint32) << np.uint32(16), "bfloat16"
        if declared == "float16":
            return x.view(np.uint16).view(np.float16).astype(np.float32).view(np.uint32), "float16"
        raise AmbiguousInputError(
            f"{dt} array of bit patterns needs source_dtype='bfloat16' or 'float16' "
            f"(got {declared!r}): 16-bit patterns are ambiguous")
    if dt in (np.uint32, np.int32):
        if declared == "float32":
            return np.ascontiguousarray(x).view(np.uint32), "float32"
        raise AmbiguousInputError(
            f"{dt} array of bit patterns needs source_dtype='float32' (got {declared!r})")
    raise UnsupportedDtypeError(
        f"dtype {dt} is not supported; pass float32, float16, bfloat16, raw bit patterns with "
        "source_dtype, or float64 with from_float64='rne'")


def _check_declared(declared, actual, dt):
    if declared is not None and declared != actual:
        raise AmbiguousInputError(
            f"array of dtype {dt} passed with source_dtype={declared!r}; source_dtype is only "
            "for raw integer bit patterns")
