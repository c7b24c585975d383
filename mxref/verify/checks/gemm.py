"""Checks of the gemm family: the scaled GEMM of two block-quantized operands.

The one op with a second check mode: a backend declares ``gemm_contract = "exact" |
"block_sequential"`` (compared bit for bit with that golden column) or ``"bound"`` (the
default: |y - exact| <= the golden's proven bound, NaN exactly where the exact result is NaN;
ulp statistics are reported), or a callable taking the format pair and returning one of these
(see :func:`mxref.verify.compare.gemm_contract`).
"""
from __future__ import annotations

import numpy as np

from ...formats import FORMATS
from ...golden.store import column_numpy
from ..compare import as_array, call_backend, compare_gemm, gemm_contract, ulp_stats


def run_gemm(backend, t, res, rows, profile):
    """Rows differ in shape: one call each."""
    gf = res.gf
    fa, fb = gf.fmt.split("+")
    contract = gemm_contract(backend, res)
    m, n, k = (column_numpy(t, c).astype(int) for c in ("m", "n", "k"))
    cols = {c: t.column(c).to_pylist() for c in ("a_codes", "a_scales", "b_codes", "b_scales",
                                                  "exp_exact", "exp_block_sequential",
                                                  "exp_bound")}
    ats, bts = column_numpy(t, "a_tensor_scale"), column_numpy(t, "b_tensor_scale")
    bs_a, bs_b = FORMATS[fa].block_size, FORMATS[fb].block_size
    ulps = []
    for r in rows:
        r = int(r)
        M, N, K = m[r], n[r], k[r]
        ac = np.array(cols["a_codes"][r], np.uint8).reshape(M, K)
        asc = np.array(cols["a_scales"][r], np.uint8).reshape(M, -(-K // bs_a))
        bc = np.array(cols["b_codes"][r], np.uint8).reshape(N, K)
        bsc = np.array(cols["b_scales"][r], np.uint8).reshape(N, -(-K // bs_b))
        kw = {}
        if FORMATS[fa].is_nvfp4:
            kw = {"a_tensor_scale": np.uint32(ats[r]), "b_tensor_scale": np.uint32(bts[r])}

        def go(ac=ac, asc=asc, bc=bc, bsc=bsc, kw=kw, M=M, N=N):
            y = backend.gemm(asc, ac, bsc, bc, fmt_a=fa, fmt_b=fb, **kw)
            return as_array(y, "gemm", (M, N), np.uint32)
        y = call_backend(res, np.array([r]), go)
        if y is None:
            continue
        exact = np.array(cols["exp_exact"][r], np.uint32).reshape(M, N)
        seq = np.array(cols["exp_block_sequential"][r], np.uint32).reshape(M, N)
        bound = np.array(cols["exp_bound"][r], np.uint64).view(np.float64).reshape(M, N)
        compare_gemm(res, r, y, exact, seq, bound, contract, ulps)
    ulp_stats(res, ulps)


RUNNERS = {"gemm": run_gemm}
