"""The "kernels": OCP MX v1.0 quantization written directly from the spec, in float64 numpy.

Every fp32/bf16/fp16 input is exact in float64 and so is each division by a power of two, so
one np.rint (round half to even) is the only rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 32


@dataclass(frozen=True)
class Element:
    bits: int
    mbits: int       # mantissa bits
    bias: int
    emax: int        # exponent of the largest normal
    max_normal: float
    nan_code: int | None   # magnitude code of NaN (E4M3: 0x7F), None when there is none


FORMATS = {
    "mxfp4": Element(bits=4, mbits=1, bias=1, emax=2, max_normal=6.0, nan_code=None),
    "mxfp8_e4m3": Element(bits=8, mbits=3, bias=7, emax=8, max_normal=448.0, nan_code=0x7F),
}


def _floor_log2(x):
    """floor(log2(x)) for finite x > 0, exactly (frexp: x = m * 2**e, 0.5 <= m < 1)."""
    return np.frexp(x)[1] - 1


def _encode(q, el: Element):
    """Round q (already divided by the block scale) to the element grid: RNE, saturating."""
    mag = np.abs(q)
    emin = 1 - el.bias
    e = np.maximum(_floor_log2(np.where(mag > 0, mag, 1.0)), emin)
    quantum = np.ldexp(1.0, e - el.mbits)
    r = np.minimum(np.rint(mag / quantum) * quantum, el.max_normal)
    e = _floor_log2(np.where(r > 0, r, 1.0))
    normal = (r > 0) & (e >= emin)
    exp_field = np.where(normal, e + el.bias, 0)
    mant = np.where(normal, r / np.ldexp(1.0, e - el.mbits) - (1 << el.mbits),
                    r / np.ldexp(1.0, emin - el.mbits))
    code = (exp_field.astype(np.int64) << el.mbits) | mant.astype(np.int64)
    return (code | (np.signbit(q).astype(np.int64) << (el.bits - 1))).astype(np.uint8)


def _decode(codes, el: Element):
    c = codes.astype(np.int64)
    sign = np.where((c >> (el.bits - 1)) & 1, -1.0, 1.0)
    mag = c & ((1 << (el.bits - 1)) - 1)
    exp_field, mant = mag >> el.mbits, mag & ((1 << el.mbits) - 1)
    v = np.where(exp_field > 0,
                 np.ldexp(1.0 + mant / (1 << el.mbits), exp_field - el.bias),
                 np.ldexp(mant / (1 << el.mbits), 1 - el.bias))
    if el.nan_code is not None:
        v = np.where(mag == el.nan_code, np.nan, v)
    return sign * v


def quantize_mx(x: np.ndarray, fmt: str, axis: int = -1):
    """float array -> (scales uint8 E8M0, codes uint8), blocks of 32 along axis, zero-padded."""
    el = FORMATS[fmt]
    with np.errstate(invalid="ignore"):                   # NaN inputs are expected here
        x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    n = x.shape[-1]
    nb = -(-n // BLOCK)
    xp = np.zeros(x.shape[:-1] + (nb * BLOCK,))
    xp[..., :n] = x
    blocks = xp.reshape(x.shape[:-1] + (nb, BLOCK))
    poison = ~np.isfinite(blocks).all(axis=-1)            # any NaN or Inf -> scale NaN (0xFF)
    amax = np.abs(np.where(np.isfinite(blocks), blocks, 0.0)).max(axis=-1)
    shared = np.where(amax > 0, _floor_log2(np.where(amax > 0, amax, 1.0)) - el.emax, -127)
    shared = np.clip(shared, -127, 127)
    scales = np.where(poison, 0xFF, shared + 127).astype(np.uint8)
    q = np.where(np.isfinite(blocks), blocks, 0.0) / np.ldexp(1.0, shared)[..., None]
    codes = _encode(q, el)
    codes = codes.reshape(xp.shape)[..., :n]
    return np.moveaxis(scales, -1, axis), np.moveaxis(codes, -1, axis)


def dequantize_mx(scales: np.ndarray, codes: np.ndarray, fmt: str) -> np.ndarray:
    """(scales [..., nb], codes [..., nb*32]) -> float32 values (blocks along the last axis)."""
    el = FORMATS[fmt]
    v = _decode(codes, el).reshape(scales.shape + (BLOCK,))
    s = scales.astype(np.int64)[..., None]
    out = np.where(s == 0xFF, np.nan, v * np.ldexp(1.0, s - 127))
    with np.errstate(over="ignore"):        # beyond fp32 range decodes to +-inf, as it should
        return out.reshape(codes.shape).astype(np.float32)
