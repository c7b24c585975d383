"""Checks of the fp8fp4 family: mxfp4_to_fp8, fp8_to_mxfp4, reblock (axis-1 blocks to axis-0).

Codes inside a poisoned MX block (scale 0xFF) are don't-care in the MXFP4 outputs.
"""
from __future__ import annotations

import numpy as np

from ...golden.store import column_numpy
from ..compare import Compare, as_array, bits_detail, call_backend, groups


def run_mxfp4_to_fp8(backend, t, res, rows, profile):
    """Rows with the same group size share a call."""
    group = column_numpy(t, "group").astype(int)
    codes, scales = column_numpy(t, "codes"), column_numpy(t, "scales")
    ng = column_numpy(t, "n_groups").astype(int)
    ec, es, ee = (column_numpy(t, c) for c in ("exp_codes", "exp_scales", "exp_exact"))
    for g, idx in groups([int(group[r]) for r in rows]):
        rr = rows[idx]
        k = int(ng[rr[0]])

        def go(rr=rr, g=g, k=k):
            gs, c, ex = backend.mxfp4_to_fp8(np.ascontiguousarray(scales[rr]),
                                             np.ascontiguousarray(codes[rr]),
                                             group=g if g else "row")
            return (as_array(gs, "mxfp4_to_fp8 group scales", (len(rr), k), np.uint8),
                    as_array(c, "mxfp4_to_fp8 codes", (len(rr), codes.shape[1]), np.uint8),
                    as_array(np.asarray(ex).astype(np.uint8), "mxfp4_to_fp8 exact",
                             (len(rr), k), np.uint8))
        out = call_backend(res, rr, go)
        if out is None:
            continue
        gs, c, ex = out
        cmp = Compare(res, rr)
        cmp.field("scale", es[rr, :k], gs, detail=bits_detail(es[rr, :k], gs, 2))
        cmp.field("elems", ec[rr], c, detail=bits_detail(ec[rr], c, 2))
        cmp.field("exact", ee[rr, :k], ex, detail=bits_detail(ee[rr, :k], ex, 2))


def run_fp8_to_mxfp4(backend, t, res, rows, profile):
    codes, gsc = column_numpy(t, "codes")[rows], column_numpy(t, "group_scales")[rows]
    es, ec = column_numpy(t, "exp_scales")[rows], column_numpy(t, "exp_codes")[rows]

    def go():
        s, c = backend.fp8_to_mxfp4(np.ascontiguousarray(gsc), np.ascontiguousarray(codes),
                                    group=128, profile=profile)
        return (as_array(s, "fp8_to_mxfp4 scales", es.shape, np.uint8),
                as_array(c, "fp8_to_mxfp4 codes", ec.shape, np.uint8))
    out = call_backend(res, rows, go)
    if out is None:
        return
    s, c = out
    res.put("actual_scales", rows, s)
    res.put("actual_codes", rows, c)
    cmp = Compare(res, rows)
    cmp.field("scale", es, s, detail=bits_detail(es, s, 2))
    cmp.field("elems", ec, c, dont_care=np.repeat(es == 0xFF, 32, axis=1),
              detail=bits_detail(ec, c, 2))


def run_reblock(backend, t, res, rows, profile):
    """One call per row (each row is one tensor)."""
    gf = res.gf
    ci, si = column_numpy(t, "codes_axis1"), column_numpy(t, "scales_axis1")
    ec, es = column_numpy(t, "exp_codes_axis0"), column_numpy(t, "exp_scales_axis0")
    for r in rows:
        r = int(r)

        def go(r=r):
            s, c = backend.reblock(np.ascontiguousarray(si[r]), np.ascontiguousarray(ci[r]),
                                   fmt=gf.fmt, profile=profile, axis=0)
            return (as_array(s, "reblock scales", es[r].shape, np.uint8),
                    as_array(c, "reblock codes", ec[r].shape, np.uint8))
        out = call_backend(res, np.array([r]), go)
        if out is None:
            continue
        s, c = out
        cmp = Compare(res, np.array([r]))
        cmp.field("scale", es[r][None], s[None], detail=bits_detail(es[r][None], s[None], 2))
        dc = np.repeat(es[r] == 0xFF, 32, axis=0)[: ec.shape[1]][None]
        cmp.field("elems", ec[r][None], c[None], dont_care=dc,
                  detail=bits_detail(ec[r][None].reshape(1, -1), c[None].reshape(1, -1), 2))


RUNNERS = {"mxfp4_to_fp8": run_mxfp4_to_fp8, "fp8_to_mxfp4": run_fp8_to_mxfp4,
           "reblock": run_reblock}
