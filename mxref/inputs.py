"""Turn what a user passes into fp32 bit patterns (uint32), exactly.

fp16 and bf16 widen to fp32 without rounding, so every accepted source is represented exactly.
float64 is refused unless the caller names the rounding into fp32 (a silent float64 -> float32
cast is a double-rounding trap). Raw integer arrays need ``source_dtype``.

The other arguments every public function shares are checked here too, once per kind: element
code arrays (:func:`as_code_array`, :func:`check_code_range`), generator integers
(:func:`check_int`: seed, offset, step, tensor_id), shapes (:func:`as_shape`) and NVFP4
tensor-level scalars (:func:`f32_scale_bits`: tensor scale, global amax).
"""
from __future__ import annotations

import numpy as np

from .errors import (
    AmbiguousInputError,
    AxisError,
    CodeRangeError,
    GeneratorArgumentError,
    ScaleValueError,
    ShapeError,
    UnsupportedDtypeError,
)

try:  # ml_dtypes is a declared dependency; keep the import soft so the message is ours
    import ml_dtypes
    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    _BF16 = None

SOURCE_DTYPES = ("float32", "float16", "bfloat16")
FLOAT64_ROUNDINGS = ("rne",)


def _torch_data(x, what: str):
    """``x`` detached, refused (naming ``what`` and the kind) when it holds no dense data."""
    import torch  # only reached when the caller passed a torch tensor

    t = x.detach()
    if t.is_meta:
        raise UnsupportedDtypeError(f"{what} is a meta tensor: it holds no data to read")
    if t.is_nested or t.layout != torch.strided:
        kind = "nested" if t.is_nested else str(t.layout)
        raise UnsupportedDtypeError(f"{what} is a {kind} tensor; pass a dense (strided) one, "
                                    "e.g. t.to_dense()")
    return t


def _torch_to_numpy(x):
    import torch

    t = _torch_data(x, "x")
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
    elif isinstance(x, np.ma.MaskedArray):
        raise UnsupportedDtypeError(
            "x is a numpy masked array; its mask would be ignored: pass x.filled(value) or "
            "np.asarray(x)")
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


# ---- the other shared argument kinds -------------------------------------------------------
def check_int(name: str, value, *, minimum: int | None = None,
              error: type[Exception] = GeneratorArgumentError) -> int:
    """``value`` as a Python int: an int or numpy integer (bool and float refused, no silent
    truncation), at least ``minimum`` if given. Generator seeds, offsets, steps and tensor ids
    are reduced modulo their word size by the functions that take them, so any integer works."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise error(f"{name}={value!r} must be an integer, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise error(f"{name}={value!r} must be >= {minimum}")
    return int(value)


def as_shape(shape) -> tuple:
    """A shape as a tuple of non-negative ints (one int is a 1-d shape); ShapeError otherwise."""
    try:
        shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    except TypeError:
        shp = ()
    if not shp or not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
                          and d >= 0 for d in shp):
        raise ShapeError(f"shape must be a non-negative int or a tuple of them, got {shape!r}")
    return tuple(int(d) for d in shp)


def as_code_array(name: str, x) -> np.ndarray:
    """Element codes or scale bytes as a uint8 ndarray (numpy, a dense torch tensor, or
    anything np.asarray turns into uint8); ShapeError naming ``name`` otherwise."""
    if _is_torch(x):
        x = _torch_data(x, name).cpu().numpy()
    if isinstance(x, np.ma.MaskedArray):
        raise ShapeError(f"{name} is a numpy masked array; its mask would be ignored")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:     # ragged nested lists and the like
        raise ShapeError(f"{name} is not an array: {e}") from None
    if arr.dtype != np.uint8:
        raise ShapeError(f"{name} must be a uint8 array (one code byte per element), got "
                         f"{type(x).__name__} of dtype {arr.dtype}")
    return arr


def check_code_range(name: str, codes: np.ndarray, bits: int, fmt_name: str) -> None:
    """Refuse codes above the 2^bits - 1 of a sub-byte element format (FP4 > 0x0F, FP6 > 0x3F),
    naming the first bad index in C order. One vectorised max; the search runs only on error."""
    top = (1 << bits) - 1
    if bits >= 8 or not codes.size or int(codes.max()) <= top:
        return
    first = int(np.argmax(np.ravel(codes) > top))
    idx = tuple(int(i) for i in np.unravel_index(first, codes.shape))
    raise CodeRangeError(
        f"{name}{list(idx)} = {int(codes[idx]):#04x} is above {top:#04x}, the largest "
        f"{bits}-bit {fmt_name} element code (unpacked codes hold one code per byte)")


def f32_scale_bits(name: str, value, *, inf_ok: bool, why_inf: str = "") -> int:
    """fp32 bits of one NVFP4 tensor-level value (tensor scale, global amax): a float32 array
    of one element, or a number rounded to fp32. NaN and negative values are refused, Inf
    unless ``inf_ok`` (``why_inf`` says why not); -0 reads as +0."""
    if isinstance(value, (str, bytes, bool, np.bool_)):
        raise ScaleValueError(f"{name}={value!r} is not a number")
    if _is_torch(value):
        value = _torch_data(value, name).cpu().numpy()
    try:
        g = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ScaleValueError(f"{name}={value!r} is not a number") from None
    if g.dtype != np.float32 or g.size != 1:
        raise ShapeError(f"{name} must be one float32 value, got {g.dtype} of size {g.size}")
    bits = int(g.reshape(()).view(np.uint32))
    mag = bits & 0x7FFFFFFF
    if mag > 0x7F800000:
        raise ScaleValueError(f"{name} is NaN")
    if bits >> 31 and mag:
        raise ScaleValueError(f"{name}={float(g.reshape(()))!r} is negative")
    if mag == 0x7F800000 and not inf_ok:
        raise ScaleValueError(f"{name} is infinite{why_inf}")
    return mag
