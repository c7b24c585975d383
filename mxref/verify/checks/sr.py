"""Checks of the sr family: quantize_mx_sr and quantize_nvfp4_sr (stochastic rounding with the
random words stored in the file), and, for a backend with ``random_bits``, the Philox stream
of each SR1 row's (seed, offset).
"""
from __future__ import annotations

import numpy as np

from ...golden.store import column_numpy
from ..compare import Compare, as_array, bits_detail, call_backend, logical_shape, soft_call


def run_quantize_mx_sr(backend, t, res, rows, profile):
    gf = res.gf
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows])
    rb = np.ascontiguousarray(column_numpy(t, "rbits")[rows])
    es, ec = column_numpy(t, "exp_scale")[rows], column_numpy(t, "exp_codes")[rows]

    def go():
        s, c = backend.quantize_mx_sr(src, rb, src_dtype=gf.src_dtype, fmt=gf.fmt,
                                      profile=profile, axis=1)
        return (as_array(s, "quantize_mx_sr scales", (len(rows), 1), np.uint8),
                as_array(c, "quantize_mx_sr codes", src.shape, np.uint8))
    out = call_backend(res, rows, go)
    if out is not None:
        s, c = out
        res.put("actual_scale", rows, s[:, 0])
        res.put("actual_codes", rows, c)
        cmp = Compare(res, rows)
        cmp.field("scale", es, s[:, 0], detail=bits_detail(es[:, None], s, 2))
        cmp.field("elems", ec, c, dont_care=np.broadcast_to((es == 0xFF)[:, None], ec.shape),
                  detail=bits_detail(ec, c, 2))
    _check_sr_stream(backend, t, res, rows, rb)


def _check_sr_stream(backend, t, res, rows, rb):
    """SR1 rows store the Philox stream of (seed, offset): a backend with ``random_bits`` must
    reproduce each row's words (rb: [len(rows), n] uint32, the rows' stored words)."""
    if not hasattr(backend, "random_bits"):
        return
    cls = res.classes
    seed, off = column_numpy(t, "seed"), column_numpy(t, "offset")
    n = rb.shape[1]
    skipped = set()
    for i, r in enumerate(rows):
        if cls[r] != "SR1":
            continue

        def go(r=r):
            w = backend.random_bits(n, seed=int(seed[r]), offset=int(off[r]))
            return as_array(np.asarray(w), "random_bits", (n,), np.uint32)
        w = soft_call(res, np.array([r]), go, skipped, "random_bits")
        if w is not None:
            Compare(res, np.array([r])).field("rbits", rb[i][None], w[None],
                                              detail=bits_detail(rb[i][None], w[None]))
    if skipped:
        res.notes = sorted(set(res.notes) | skipped)


def run_quantize_nvfp4_sr(backend, t, res, rows, profile):
    """Each row is one [4, 16] tensor with its words: scales, codes and the tensor scale are
    compared bit for bit (a poisoned NVFP4 block is scale 0x7F and codes 0: nothing is
    don't-care)."""
    gf = res.gf
    shape = logical_shape(t, "src_bits")
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows]).reshape(len(rows), *shape)
    rb = np.ascontiguousarray(column_numpy(t, "rbits")[rows]).reshape(src.shape)
    es = column_numpy(t, "exp_scales")[rows]
    ec = column_numpy(t, "exp_codes")[rows]
    ets = column_numpy(t, "exp_tensor_scale")[rows]
    T, M, C = src.shape

    def go():
        s, c, ts = backend.quantize_nvfp4_sr(src, rb, src_dtype=gf.src_dtype, profile=profile)
        return (as_array(s, "quantize_nvfp4_sr scales", (T, M, C // 16), np.uint8),
                as_array(c, "quantize_nvfp4_sr codes", (T, M, C), np.uint8),
                as_array(ts, "quantize_nvfp4_sr tensor_scale", (T,), np.uint32))
    out = call_backend(res, rows, go)
    if out is not None:
        s, c, ts = out
        s, c = s.reshape(T, -1), c.reshape(T, -1)
        res.put("actual_scales", rows, s)
        res.put("actual_codes", rows, c)
        res.put("actual_tensor_scale", rows, ts)
        cmp = Compare(res, rows)
        cmp.field("scale", es, s, detail=bits_detail(es, s, 2))
        cmp.field("elems", ec, c, detail=bits_detail(ec, c, 2))
        cmp.field("tensor_scale", ets[:, None], ts[:, None],
                  detail=bits_detail(ets[:, None], ts[:, None]))
    _check_sr_stream(backend, t, res, rows, rb.reshape(T, -1))


RUNNERS = {"quantize_mx_sr": run_quantize_mx_sr, "quantize_nvfp4_sr": run_quantize_nvfp4_sr}
