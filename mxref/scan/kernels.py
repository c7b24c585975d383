"""Streaming block statistics: one pass fills ``hist[scale_byte, block_max_magnitude]``.

Everything a scan reports about scales and the fingerprint comes from this joint histogram, so
a tensor is read once. Numba, because numpy's reshape-max over 16-byte blocks ran at 0.16-0.19
GB/s here against 1-3 GB/s for a compiled loop (bench/results/scan_speed.md).
"""
from __future__ import annotations

import numpy as np

from .._kernels.f32 import _JIT, njit


def _pair_max_table() -> np.ndarray:
    """uint8[65536]: the largest E2M1 magnitude (code & 7) among the four nibbles of a uint16."""
    v = np.arange(1 << 16)
    return np.max([(v >> (4 * k)) & 7 for k in range(4)], axis=0).astype(np.uint8)


PAIR_MAX = _pair_max_table()


@njit(**_JIT)
def packed_fp4_hist(halves, scales, table, hist):
    """Packed E2M1 blocks, whole blocks only: ``halves`` uint16 [n_blocks, block/4] (four codes
    each), ``scales`` uint8 [n_blocks], ``table`` = PAIR_MAX. One 64 KiB table lookup per four
    codes (2.9 GB/s here, against 1.8 for an eight-bytes-at-a-time SWAR max and 1.0 for a
    nibble loop); ``hist[scale, block max] += 1``."""
    for i in range(halves.shape[0]):
        m = table[halves[i, 0]]
        for j in range(1, halves.shape[1]):
            v = table[halves[i, j]]
            m = max(m, v)
        hist[scales[i], m] += 1


@njit(**_JIT)
def codes_hist(codes, scales, block, magtab, hist, bad):
    """Unpacked codes [rows, n] (one per byte) with scales [rows, ceil(n/block)]: per block the
    largest magnitude ``magtab[code]`` (-1: code out of range -> bad[0]; -2: NaN/Inf code ->
    bad[1]; neither enters the max); ``hist[scale, max] += 1``."""
    rows, n = codes.shape
    for r in range(rows):
        for b in range((n + block - 1) // block):
            m = 0
            for k in range(b * block, min(n, (b + 1) * block)):
                v = magtab[codes[r, k]]
                if v < 0:
                    bad[-v - 1] += 1
                elif v > m:
                    m = v
            hist[scales[r, b], m] += 1
