"""Physical layouts: element packing and the scale layouts fast GEMMs read.

The OCP spec fixes none of these; the conventions below are the de facto ones (mx_anchors B29,
B30; perf_anchors E).

* FP4: two codes per byte along the block axis, element ``2i`` in the low nibble
  (torchao ``pack_uint4``, Triton ``dot_scaled``, TE, triton_kernels). An odd count is padded
  with a zero nibble.
* FP6: four codes per three bytes along the block axis, as a little-endian 24-bit word
  ``c0 | c1 << 6 | c2 << 12 | c3 << 18`` (element 0 in the lowest bits of byte 0). A count that
  is not a multiple of 4 is padded with zero codes.
* FP8 / INT8: one code per byte.
* cuBLAS 1D block-scaling layout: scales ``[rows, cols]`` padded with 0x00 to
  ``(ceil(rows/128)*128, ceil(cols/4)*4)``; each 128x4 tile is 512 contiguous bytes with byte
  offset ``(r % 32) * 16 + (r // 32) * 4 + c``; tiles in row-major tile order.
* AMD AITER ``e8m0_shuffle``: pad with 0x00 to ``(ceil(rows/256)*256, ceil(cols/8)*8)``, view as
  ``(rows/32, 2, 16, cols/8, 2, 4)`` and permute to ``(0, 3, 5, 2, 4, 1)``.
"""
from __future__ import annotations

import numpy as np

from .errors import ShapeError

__all__ = ["pack_codes", "unpack_codes", "to_cublas_blocked", "from_cublas_blocked",
           "to_amd_shuffle", "from_amd_shuffle"]


def pack_codes(codes: np.ndarray, element_bits: int) -> np.ndarray:
    """Pack codes along the last axis (already moved there by the caller)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    n = codes.shape[-1]
    if element_bits == 8:
        return codes.copy()
    if element_bits == 4:
        padded = _pad_last(codes, (n + 1) // 2 * 2)
        return (padded[..., 0::2] & 0xF) | ((padded[..., 1::2] & 0xF) << 4)
    if element_bits == 6:
        padded = _pad_last(codes, (n + 3) // 4 * 4).astype(np.uint32) & 0x3F
        word = (padded[..., 0::4] | padded[..., 1::4] << 6 | padded[..., 2::4] << 12
                | padded[..., 3::4] << 18)
        out = np.empty(word.shape[:-1] + (word.shape[-1] * 3,), dtype=np.uint8)
        out[..., 0::3] = word & 0xFF
        out[..., 1::3] = (word >> 8) & 0xFF
        out[..., 2::3] = (word >> 16) & 0xFF
        return out
    raise ShapeError(f"no packing defined for {element_bits}-bit elements")


def unpack_codes(packed: np.ndarray, element_bits: int, n: int) -> np.ndarray:
    """Inverse of :func:`pack_codes`: the first ``n`` codes along the last axis."""
    packed = np.ascontiguousarray(packed, dtype=np.uint8)
    if element_bits == 8:
        out = packed
    elif element_bits == 4:
        out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
        out[..., 0::2] = packed & 0xF
        out[..., 1::2] = packed >> 4
    elif element_bits == 6:
        if packed.shape[-1] % 3:
            raise ShapeError(f"FP6 packed length {packed.shape[-1]} is not a multiple of 3")
        b = packed.astype(np.uint32)
        word = b[..., 0::3] | b[..., 1::3] << 8 | b[..., 2::3] << 16
        out = np.empty(word.shape[:-1] + (word.shape[-1] * 4,), dtype=np.uint8)
        for j in range(4):
            out[..., j::4] = (word >> (6 * j)) & 0x3F
    else:
        raise ShapeError(f"no packing defined for {element_bits}-bit elements")
    if out.shape[-1] < n:
        raise ShapeError(f"packed data holds {out.shape[-1]} codes, {n} requested")
    return np.ascontiguousarray(out[..., :n])


def _pad_last(a: np.ndarray, n: int) -> np.ndarray:
    if a.shape[-1] == n:
        return a
    out = np.zeros(a.shape[:-1] + (n,), dtype=a.dtype)
    out[..., : a.shape[-1]] = a
    return out


def _pad2d(s: np.ndarray, rows: int, cols: int) -> np.ndarray:
    if s.ndim != 2:
        raise ShapeError(f"scale layouts take a 2-D [rows, cols] array, got shape {s.shape}")
    out = np.zeros((rows, cols), dtype=np.uint8)
    out[: s.shape[0], : s.shape[1]] = s
    return out


def to_cublas_blocked(scales: np.ndarray) -> np.ndarray:
    """cuBLAS/CUTLASS 128x4 swizzled scales, flattened (1-D uint8)."""
    rows, cols = scales.shape if scales.ndim == 2 else (None, None)
    pr, pc = -(-scales.shape[0] // 128) * 128, -(-scales.shape[-1] // 4) * 4
    p = _pad2d(scales, pr, pc)
    # (row_tile, 4 groups of 32 rows, 32 rows, col_tile, 4 cols) -> (row_tile, col_tile, r%32, r//32, c)
    t = p.reshape(pr // 128, 4, 32, pc // 4, 4).transpose(0, 3, 2, 1, 4)
    del rows, cols
    return np.ascontiguousarray(t).reshape(-1)


def from_cublas_blocked(blocked: np.ndarray, rows: int, cols: int) -> np.ndarray:
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    if blocked.size != pr * pc:
        raise ShapeError(f"blocked scales hold {blocked.size} bytes, expected {pr * pc}")
    t = blocked.reshape(pr // 128, pc // 4, 32, 4, 4).transpose(0, 3, 2, 1, 4)
    return np.ascontiguousarray(t.reshape(pr, pc)[:rows, :cols])


def to_amd_shuffle(scales: np.ndarray) -> np.ndarray:
    """AITER e8m0_shuffle layout, returned as a [padded_rows, padded_cols] uint8 array."""
    pr, pc = -(-scales.shape[0] // 256) * 256, -(-scales.shape[-1] // 8) * 8
    p = _pad2d(scales, pr, pc)
    t = p.reshape(pr // 32, 2, 16, pc // 8, 2, 4).transpose(0, 3, 5, 2, 4, 1)
    return np.ascontiguousarray(t).reshape(pr, pc)


def from_amd_shuffle(shuffled: np.ndarray, rows: int, cols: int) -> np.ndarray:
    pr, pc = shuffled.shape
    if pr % 256 or pc % 8 or pr < rows or pc < cols:
        raise ShapeError(f"shuffled scales of shape {shuffled.shape} cannot hold [{rows}, {cols}]")
    t = shuffled.reshape(pr // 32, pc // 8, 4, 16, 2, 2).transpose(0, 5, 3, 1, 4, 2)
    return np.ascontiguousarray(t.reshape(pr, pc)[:rows, :cols])
