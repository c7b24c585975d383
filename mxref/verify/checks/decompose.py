"""Checks of the decompose family: the exact error decomposition and the three corrections
built on it (macroblock scales, outlier fallback, 4-over-6 NVFP4). Every field bit for bit.
"""
from __future__ import annotations

import numpy as np

from ...golden.store import column_numpy
from ..compare import Compare, as_array, bits_detail, call_backend, check_fields, groups


def run_decompose(backend, t, res, rows, profile):
    gf = res.gf
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows])
    exp = np.stack([column_numpy(t, c)[rows] for c in ("exp_scale", "exp_dead", "exp_grid")], 1)
    flags = column_numpy(t, "exp_flags")[rows]

    def go():
        comps, fl = backend.decompose(src, src_dtype=gf.src_dtype, fmt=gf.fmt, profile=profile)
        return (as_array(comps, "decompose components", exp.shape, np.uint64),
                as_array(fl, "decompose flags", flags.shape, np.uint8))
    out = call_backend(res, rows, go)
    if out is None:
        return
    comps, fl = out
    res.put("actual_components", rows, comps)
    cmp = Compare(res, rows)
    cmp.field("components", exp, comps, detail=bits_detail(exp, comps, 16))
    cmp.field("flags", flags, fl, detail=bits_detail(flags, fl, 2))


def run_macroblock(backend, t, res, rows, profile):
    """Rows with the same (macro size, macro scale dtype) share a call."""
    gf = res.gf
    src = column_numpy(t, "src_bits")
    macro, dt = column_numpy(t, "macro").astype(int), column_numpy(t, "macro_scale_dtype")
    nm = column_numpy(t, "n_macro").astype(int)
    ems, es, ec = (column_numpy(t, c) for c in ("exp_macro_scales", "exp_scales", "exp_codes"))
    for (m, d), idx in groups([(int(macro[r]), str(dt[r])) for r in rows]):
        rr = rows[idx]
        k = int(nm[rr[0]])

        def go(rr=rr, m=m, d=d, k=k):
            ms, s, c = backend.macroblock(np.ascontiguousarray(src[rr]), src_dtype=gf.src_dtype,
                                          fmt=gf.fmt, profile=profile, macro=m,
                                          macro_scale_dtype=d)
            return (as_array(np.asarray(ms).astype(np.uint32), "macro scales", (len(rr), k),
                             np.uint32),
                    as_array(s, "scales", es[rr].shape, np.uint8),
                    as_array(c, "codes", ec[rr].shape, np.uint8))
        out = call_backend(res, rr, go)
        if out is not None:
            ms, s, c = out
            check_fields(res, rr, [("macro_scale", ems[rr, :k], ms), ("scale", es[rr], s),
                                   ("elems", ec[rr], c)])


def run_outlier_fallback(backend, t, res, rows, profile):
    """Rows with the same outlier rule share a call."""
    gf = res.gf
    src, rule = column_numpy(t, "src_bits"), column_numpy(t, "rule")
    ef, es, ec, er = (column_numpy(t, c) for c in ("exp_flagged", "exp_scales", "exp_codes",
                                                   "exp_residual"))
    for rl, idx in groups([str(rule[r]) for r in rows]):
        rr = rows[idx]

        def go(rr=rr, rl=rl):
            f, s, c, r = backend.outlier_fallback(np.ascontiguousarray(src[rr]),
                                                  src_dtype=gf.src_dtype, fmt=gf.fmt,
                                                  profile=profile, rule=rl)
            return (as_array(np.asarray(f).astype(np.uint8), "flagged", ef[rr].shape, np.uint8),
                    as_array(s, "scales", es[rr].shape, np.uint8),
                    as_array(c, "codes", ec[rr].shape, np.uint8),
                    as_array(r, "residual", er[rr].shape, np.uint16))
        out = call_backend(res, rr, go)
        if out is not None:
            f, s, c, r = out
            check_fields(res, rr, [("flagged", ef[rr], f), ("scale", es[rr], s),
                                   ("elems", ec[rr], c), ("residual", er[rr], r)])


def run_quantize_4over6(backend, t, res, rows, profile):
    gf = res.gf
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows]).reshape(len(rows), 4, 16)
    es, ec, et, ech = (column_numpy(t, c)[rows] for c in ("exp_scales", "exp_codes",
                                                          "exp_tensor_scale", "exp_choice"))

    def go():
        s, c, ts, ch = backend.quantize_4over6(src, src_dtype=gf.src_dtype, profile=profile)
        return (as_array(s, "scales", (len(rows), 4, 1), np.uint8),
                as_array(c, "codes", src.shape, np.uint8),
                as_array(ts, "tensor_scale", (len(rows),), np.uint32),
                as_array(np.asarray(ch).astype(np.uint8), "choice", (len(rows), 4, 1), np.uint8))
    out = call_backend(res, rows, go)
    if out is not None:
        s, c, ts, ch = out
        check_fields(res, rows, [("scale", es, s), ("elems", ec, c),
                                 ("tensor_scale", et, ts), ("choice", ech, ch)])


RUNNERS = {"decompose": run_decompose, "macroblock": run_macroblock,
           "outlier_fallback": run_outlier_fallback, "quantize_4over6": run_quantize_4over6}
