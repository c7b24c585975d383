"""Checks of the rotate family: rotate (the Hadamard rotation, three variants, and the random
sign vectors), quantize_rotated, rotated_gemm.

Rows sharing the call parameters (length, signs, rounding) share one backend call. A rotation
variant the backend does not support is noted on the file, not failed; a file none of whose
variants ran is skipped.
"""
from __future__ import annotations

import numpy as np

from ...formats import FORMATS
from ...golden.store import column_numpy
from ..compare import (Compare, as_array, bits_detail, call_backend, compare_gemm, finish_soft,
                       gemm_contract, groups, logical_shape, soft_call, ulp_stats)

#: (method, round_to, golden column) of each rotation variant a rotate row holds
ROTATE_VARIANTS = (("butterfly", "float32", "exp_butterfly"), ("exact", "float32", "exp_exact"),
                   ("butterfly", "bfloat16", "exp_butterfly_bf16"))


# ---- rotate -----------------------------------------------------------------------------------
def run_rotate(backend, t, res, rows, profile):
    src = column_numpy(t, "src_bits")
    n = column_numpy(t, "n").astype(int)
    signs = column_numpy(t, "signs")
    kinds = column_numpy(t, "sign_kind")
    skipped, checked = set(), False
    keys = [(int(n[r]), signs[r, :n[r]].tobytes()) for r in rows]
    for (nn, _), idx in groups(keys):
        rr = rows[idx]
        x = np.ascontiguousarray(src[rr])
        sv = signs[rr[0], :nn].copy()
        for method, round_to, col in ROTATE_VARIANTS:
            checked |= _check_rotation(backend, t, res, rr, x, nn, sv, method, round_to, col,
                                       skipped)
    rand = [r for r in rows if kinds[r] == "random"]
    if rand and hasattr(backend, "random_signs"):
        seed, step, tid = (column_numpy(t, c) for c in ("seed", "step", "tensor_id"))
        for r in rand:
            nn = int(n[r])

            def go(r=r, nn=nn):
                s = backend.random_signs(nn, seed=int(seed[r]), step=int(step[r]),
                                         tensor_id=int(tid[r]))
                return as_array(np.asarray(s, np.int8), "random_signs", (nn,), np.int8)
            got = soft_call(res, np.array([r]), go, skipped, "random_signs")
            if got is not None:
                exp = signs[r, :nn][None].view(np.uint8)
                act = got[None].view(np.uint8)
                Compare(res, np.array([r])).field("signs", exp, act,
                                                  detail=bits_detail(exp, act, 2))
    finish_soft(res, rows, checked, skipped)


def _check_rotation(backend, t, res, rr, x, nn, sv, method, round_to, col, skipped) -> bool:
    """One rotation variant on rows `rr`; False when the backend does not support it."""
    gf = res.gf
    exp = column_numpy(t, col)[rr]

    def go():
        y = backend.rotate(x, src_dtype=gf.src_dtype, n=nn, signs=sv, method=method,
                           round_to=round_to)
        return as_array(y, f"rotate {method}/{round_to}", x.shape, np.uint32)
    y = soft_call(res, rr, go, skipped, f"{method}/{round_to}")
    if y is None:
        return False
    res.put("actual_" + col[4:], rr, y)
    Compare(res, rr).field(col[4:], exp, y, nan_any=True, detail=bits_detail(exp, y))
    return True


# ---- quantize_rotated -------------------------------------------------------------------------
def run_quantize_rotated(backend, t, res, rows, profile):
    src = column_numpy(t, "src_bits")
    n = column_numpy(t, "n").astype(int)
    signs = column_numpy(t, "signs")
    round_to = column_numpy(t, "round_to")
    keys = [(int(n[r]), signs[r, :n[r]].tobytes(), str(round_to[r])) for r in rows]
    for (nn, _, rt), idx in groups(keys):
        rr = rows[idx]
        _check_quantize_rotated(backend, t, res, rr, np.ascontiguousarray(src[rr]), nn,
                                signs[rr[0], :nn].copy(), rt, profile)


def _check_quantize_rotated(backend, t, res, rr, x, nn, sv, rt, profile):
    gf = res.gf
    fmt = FORMATS[gf.fmt]
    es, ec = column_numpy(t, "exp_scales")[rr], column_numpy(t, "exp_codes")[rr]
    ets = column_numpy(t, "exp_tensor_scale")[rr]

    def go():
        out = backend.quantize_rotated(x, src_dtype=gf.src_dtype, fmt=gf.fmt,
                                       profile=profile, n=nn, signs=sv, round_to=rt)
        s = as_array(out[0], "quantize_rotated scales", es.shape, np.uint8)
        c = as_array(out[1], "quantize_rotated codes", ec.shape, np.uint8)
        ts = (as_array(out[2], "quantize_rotated tensor_scale", (len(rr),), np.uint32)
              if fmt.is_nvfp4 else None)
        return s, c, ts
    out = call_backend(res, rr, go)
    if out is None:
        return
    s, c, ts = out
    res.put("actual_scales", rr, s)
    res.put("actual_codes", rr, c)
    cmp = Compare(res, rr)
    cmp.field("scale", es, s, detail=bits_detail(es, s, 2))
    dc = None if fmt.is_nvfp4 else np.repeat(es == 0xFF, fmt.block_size, axis=1)[:, :ec.shape[1]]
    cmp.field("elems", ec, c, dont_care=dc, detail=bits_detail(ec, c, 2))
    if ts is not None:
        cmp.field("tensor_scale", ets[:, None], ts[:, None],
                  detail=bits_detail(ets[:, None], ts[:, None]))


# ---- rotated_gemm -----------------------------------------------------------------------------
def run_rotated_gemm(backend, t, res, rows, profile):
    """Bit for bit or within the bound, as the backend's GEMM contract says (compare.gemm_contract)."""
    gf = res.gf
    fa, fb = gf.fmt.split("+")
    contract = gemm_contract(backend, res)
    x, w = column_numpy(t, "x_bits"), column_numpy(t, "w_bits")
    m, k = logical_shape(t, "x_bits")
    nrows = logical_shape(t, "w_bits")[0]
    n = column_numpy(t, "n").astype(int)
    signs, rt = column_numpy(t, "signs"), column_numpy(t, "round_to")
    ex, seq = column_numpy(t, "exp_exact"), column_numpy(t, "exp_block_sequential")
    bound = column_numpy(t, "exp_bound").view(np.float64)
    ulps = []
    for r in rows:
        r = int(r)
        hn = int(n[r])

        def go(r=r, hn=hn):
            y = backend.rotated_gemm(np.ascontiguousarray(x[r].reshape(m, k)),
                                     np.ascontiguousarray(w[r].reshape(nrows, k)),
                                     src_dtype=gf.src_dtype, fmt_x=fa, fmt_w=fb,
                                     profile=profile, n=hn, signs=signs[r, :hn].copy(),
                                     round_to=str(rt[r]))
            return as_array(y, "rotated_gemm", (m, nrows), np.uint32)
        y = call_backend(res, np.array([r]), go)
        if y is None:
            continue
        compare_gemm(res, r, y, ex[r].reshape(m, nrows), seq[r].reshape(m, nrows),
                     bound[r].reshape(m, nrows), contract, ulps)
    ulp_stats(res, ulps)


RUNNERS = {"rotate": run_rotate, "quantize_rotated": run_quantize_rotated,
           "rotated_gemm": run_rotated_gemm}
