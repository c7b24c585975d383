"""Rotation classes H1-H6: rows of ROW fp32 values for the Hadamard-rotation files (and the
correction files built on the same rows), from exact constructions and raw PCG64 words."""
from __future__ import annotations

import numpy as np

from .base import _Rng, f32_bits

#: row length of the rotation files (every Hadamard size divides it)
ROW = 256
#: Hadamard sizes the rotation files cover
HAD_SIZES = (16, 32, 64, 128, 256)


def rotation_rows(level: int, key: str, classes=("H1", "H2", "H3", "H4", "H5", "H6")):
    """(class, fp32 bits [ROW], n, sign kind, seed, step, tensor_id) rows for rotation files."""
    rows = []
    combos = [(n, k) for n in HAD_SIZES for k in ("none", "random")] + [(16, "te16")]
    if level == 0:
        combos = [(32, "random")]
    for cls in classes:
        rng = _Rng("rotate", key, cls)
        for i, (n, kind) in enumerate(combos):
            if cls == "H1":        # basis vectors (times 2^e): columns of H, exact +-2^e/sqrt(n)
                v = np.zeros(ROW)
                for b in range(ROW // n):
                    v[b * n + (i + 3 * b) % n] = 2.0 ** ((i % 7) - 3)
            elif cls == "H2":      # LLM-like Gaussian rows
                v = rng.normal(ROW) * 2.0 ** rng.int(-8, 8)
            elif cls == "H3":      # specials: NaN, +-Inf, -0 in some blocks, finite elsewhere
                v = rng.normal(ROW)
                v[rng.int(0, ROW)] = np.nan
                v[rng.int(0, ROW)] = np.inf
                v[rng.int(0, ROW)] = -np.inf
                v[rng.ints(0, ROW, 8)] = -0.0
            elif cls == "H4":      # near fp32 max: butterfly sums overflow to Inf
                v = (rng.uniform(ROW) * 0.5 + 0.5) * 3.0e38 * np.where(rng.uniform(ROW) < 0.5, -1, 1)
            elif cls == "H5":      # subnormal inputs and results (no flush anywhere)
                v = rng.normal(ROW) * 2.0 ** -140
            else:                  # H6 heavy tails: one outlier per block dominates
                v = rng.student_t3(ROW)
            rows.append((cls, f32_bits(v), n, kind, 0 if kind != "random" else 1234 + i, i, 7 * i))
    return rows
