"""Verify runners for the ops built on the core (see mxref/golden/suites_ext.py).

Same rules as engine.py: whole files (or groups of rows sharing call parameters) per backend
call, every field compared bit for bit, codes inside a poisoned block (scale 0xFF) don't-care.
The GEMM op is the one place with a second check mode: a backend declares
``gemm_contract = "exact" | "block_sequential"`` (compared bit for bit with that golden
column) or ``"bound"`` (the default: |y - exact| <= the golden's proven bound, NaN exactly
where the exact result is NaN; ulp statistics are reported), or a callable taking the format
pair and returning one of these.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..backends.base import Unsupported
from ..formats import FORMATS
from ..golden.store import column_numpy
from . import records as R
from .engine import SKIPPED, _as_array, _call, _Compare, _logical_shape

ROTATE_VARIANTS = (("butterfly", "float32", "exp_butterfly"), ("exact", "float32", "exp_exact"),
                   ("butterfly", "bfloat16", "exp_butterfly_bf16"))


def _bits_detail(exp, act, width=8):
    def detail(i, j):
        e, a = int(exp[i].reshape(-1)[j]), int(act[i].reshape(-1)[j])
        rec = (R.f32_record if width == 8 else
               (lambda b: {"bits": f"0x{b:016x}", "value": repr(float(np.uint64(b).view(np.float64)))})
               if width == 16 else (lambda b: {"byte": f"0x{b:02x}"}))
        return {"block": None, "elem": j, "index": [j], "input": None, "block_amax": None,
                "expected": rec(e), "actual": rec(a), "xor": f"0x{e ^ a:0{width}x}",
                "code_distance": None}
    return detail


_SKIP = object()


def _soft_call(res, rows, fn, skipped_variants, name):
    """Like engine._call, but a variant the backend does not support is noted, not fatal."""
    def guarded():
        try:
            return fn()
        except Unsupported as e:
            skipped_variants.add(f"{name}: {e}")
            return _SKIP
    out = _call(res, rows, guarded)
    return None if out is _SKIP else out


def _groups(keys):
    """Row indices grouped by a hashable key, in first-seen order."""
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [(k, np.array(v)) for k, v in out.items()]


def _finish_soft(res, rows, checked_any, skipped_variants):
    if skipped_variants:
        res.notes = sorted(set(getattr(res, "notes", [])) | skipped_variants)
    if not checked_any:
        for r in rows:
            if res.status[r] == 0:
                res.status[r] = SKIPPED
                res.reasons[int(r)] = "unsupported: " + "; ".join(sorted(skipped_variants))


# ---- rotate ----------------------------------------------------------------------------------
def run_rotate(backend, t, res, rows, profile):
    gf = res.gf
    src = column_numpy(t, "src_bits")
    n = column_numpy(t, "n").astype(int)
    signs = column_numpy(t, "signs")
    kinds = column_numpy(t, "sign_kind")
    skipped, checked = set(), False
    keys = [(int(n[r]), signs[r, :n[r]].tobytes()) for r in rows]
    for (nn, _), idx in _groups(keys):
        rr = rows[idx]
        x = np.ascontiguousarray(src[rr])
        sv = signs[rr[0], :nn].copy()
        for method, round_to, col in ROTATE_VARIANTS:
            exp = column_numpy(t, col)[rr]

            def go(x=x, sv=sv, method=method, round_to=round_to):
                y = backend.rotate(x, src_dtype=gf.src_dtype, n=nn, signs=sv, method=method,
                                   round_to=round_to)
                return _as_array(y, f"rotate {method}/{round_to}", x.shape, np.uint32)
            y = _soft_call(res, rr, go, skipped, f"{method}/{round_to}")
            if y is None:
                continue
            checked = True
            res.put("actual_" + col[4:], rr, y)
            _Compare(res, rr).field(col[4:], exp, y, nan_any=True, detail=_bits_detail(exp, y))
    rand = [r for r in rows if kinds[r] == "random"]
    if rand and hasattr(backend, "random_signs"):
        seed, step, tid = (column_numpy(t, c) for c in ("seed", "step", "tensor_id"))
        for r in rand:
            nn = int(n[r])

            def go(r=r, nn=nn):
                s = backend.random_signs(nn, seed=int(seed[r]), step=int(step[r]),
                                         tensor_id=int(tid[r]))
                return _as_array(np.asarray(s, np.int8), "random_signs", (nn,), np.int8)
            got = _soft_call(res, np.array([r]), go, skipped, "random_signs")
            if got is not None:
                exp = signs[r, :nn][None].view(np.uint8)
                _Compare(res, np.array([r])).field("signs", exp, got[None].view(np.uint8),
                                                   detail=_bits_detail(exp, got[None].view(np.uint8), 2))
    _finish_soft(res, rows, checked, skipped)


# ---- quantize_rotated ------------------------------------------------------------------------
def run_quantize_rotated(backend, t, res, rows, profile):
    gf = res.gf
    fmt = FORMATS[gf.fmt]
    bs = fmt.block_size
    src = column_numpy(t, "src_bits")
    n = column_numpy(t, "n").astype(int)
    signs = column_numpy(t, "signs")
    round_to = column_numpy(t, "round_to")
    es, ec = column_numpy(t, "exp_scales"), column_numpy(t, "exp_codes")
    ets = column_numpy(t, "exp_tensor_scale")
    keys = [(int(n[r]), signs[r, :n[r]].tobytes(), str(round_to[r])) for r in rows]
    for (nn, _, rt), idx in _groups(keys):
        rr = rows[idx]
        x = np.ascontiguousarray(src[rr])
        sv = signs[rr[0], :nn].copy()

        def go(x=x, sv=sv, rt=rt, rr=rr):
            out = backend.quantize_rotated(x, src_dtype=gf.src_dtype, fmt=gf.fmt,
                                           profile=profile, n=nn, signs=sv, round_to=rt)
            s = _as_array(out[0], "quantize_rotated scales", es[rr].shape, np.uint8)
            c = _as_array(out[1], "quantize_rotated codes", ec[rr].shape, np.uint8)
            ts = (_as_array(out[2], "quantize_rotated tensor_scale", (len(rr),), np.uint32)
                  if fmt.is_nvfp4 else None)
            return s, c, ts
        out = _call(res, rr, go)
        if out is None:
            continue
        s, c, ts = out
        res.put("actual_scales", rr, s)
        res.put("actual_codes", rr, c)
        cmp = _Compare(res, rr)
        cmp.field("scale", es[rr], s, detail=_bits_detail(es[rr], s, 2))
        dc = None if fmt.is_nvfp4 else np.repeat(es[rr] == 0xFF, bs, axis=1)[:, :ec.shape[1]]
        cmp.field("elems", ec[rr], c, dont_care=dc, detail=_bits_detail(ec[rr], c, 2))
        if ts is not None:
            cmp.field("tensor_scale", ets[rr][:, None], ts[:, None],
                      detail=_bits_detail(ets[rr][:, None], ts[:, None]))


# ---- gemm ------------------------------------------------------------------------------------
def _gemm_within(act: np.ndarray, exp: np.ndarray, bound: np.ndarray):
    """(ok mask, ulp distance) of fp32 results against the exact fp32 value and the bound."""
    a = act.view(np.float32).astype(np.float64)
    e = exp.view(np.float32).astype(np.float64)
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    inf_b = np.isinf(bound)
    # NaN exactly where the exact result is NaN; where partial sums may overflow (bound = Inf)
    # any result is accepted, NaN included (Inf - Inf in some order is legitimate)
    ok = np.where(nan_e, nan_a, ~nan_a | inf_b)
    fin = ok & ~nan_e & ~inf_b
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a - e)
    same = (a == e)                                    # also covers equal infinities
    ok_fin = same | (np.isfinite(d) & (d <= bound))
    # at the boundary, decide exactly (float64 subtraction of two fp32 values can round)
    near = fin & ~same & np.isfinite(d) & (np.abs(d - bound) <= 2.0 ** -40 * bound)
    for i in zip(*np.nonzero(near)):
        ok_fin[i] = abs(Fraction(float(a[i])) - Fraction(float(e[i]))) <= Fraction(float(bound[i]))
    ok = np.where(fin, ok_fin, ok)
    ulp = np.zeros(a.shape, np.float64)
    ef = fin & np.isfinite(e)
    if ef.any():
        sp = np.abs(np.spacing(e[ef].astype(np.float32))).astype(np.float64)
        ulp[ef] = np.where(np.isfinite(d[ef]), d[ef] / sp, np.inf)
    return ok, ulp


def _gemm_contract(backend, res) -> str:
    """The backend's declared GEMM contract (default and fallback: bound); sets the check mode.

    ``gemm_contract`` is a string for every format pair, or a callable ``(fmt_a, fmt_b) ->
    str`` when the contract depends on the pair (a kernel bit-exact for MXFP4 x MXFP4 only)."""
    contract = getattr(backend, "gemm_contract", "bound")
    if callable(contract):
        fa, fb = res.gf.fmt.split("+")
        contract = contract(fa, fb)
    if contract not in ("exact", "block_sequential", "bound"):
        contract = "bound"
    res.check_mode = "bound" if contract == "bound" else "bitexact"
    return contract


def run_gemm(backend, t, res, rows, profile):
    gf = res.gf
    fa, fb = gf.fmt.split("+")
    contract = _gemm_contract(backend, res)
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
            return _as_array(y, "gemm", (M, N), np.uint32)
        y = _call(res, np.array([r]), go)
        if y is None:
            continue
        exact = np.array(cols["exp_exact"][r], np.uint32).reshape(M, N)
        seq = np.array(cols["exp_block_sequential"][r], np.uint32).reshape(M, N)
        bound = np.array(cols["exp_bound"][r], np.uint64).view(np.float64).reshape(M, N)
        _compare_gemm(res, r, y, exact, seq, bound, contract, ulps)
    _ulp_stats(res, ulps)


def _compare_gemm(res, r, y, exact, seq, bound, contract, ulps):
    """Row r: bit-exact against the contract's column, or within the bound of exact."""
    cmp = _Compare(res, np.array([r]))
    if contract != "bound":
        exp = (exact if contract == "exact" else seq).reshape(1, -1)
        cmp.field("y", exp, y.reshape(1, -1), nan_any=True,
                  detail=_bits_detail(exp, y.reshape(1, -1)))
        return
    ok, ulp = _gemm_within(y, exact, bound)
    ulps.append(ulp[ok].reshape(-1))
    ex1, y1 = exact.reshape(1, -1), y.reshape(1, -1)

    def detail(i, j):
        d = _bits_detail(ex1, y1)(i, j)
        d["bound"] = float(bound.reshape(-1)[j])
        return d
    # "y" mismatches where the result is outside the bound (or NaN-ness differs)
    cmp.field("y", np.zeros((1, ok.size), np.uint8), (~ok).reshape(1, -1).astype(np.uint8),
              detail=detail)


def _ulp_stats(res, ulps):
    if ulps:
        u = np.concatenate(ulps)
        u = u[np.isfinite(u)]
        edges = [0, 1, 2, 3, 4, 8, 16]
        hist = {}
        for lo, hi in zip(edges, edges[1:] + [np.inf]):
            label = f"{lo}" if hi == lo + 1 else (f"{lo}+" if hi == np.inf else f"{lo}-{hi - 1}")
            hist[label] = int(((u >= lo) & (u < hi)).sum()) if u.size else 0
        res.ulp = {"max_ulp": float(u.max()) if u.size else 0.0,
                   "mean_ulp": float(u.mean()) if u.size else 0.0, "hist": hist}


def run_rotated_gemm(backend, t, res, rows, profile):
    gf = res.gf
    fa, fb = gf.fmt.split("+")
    contract = _gemm_contract(backend, res)
    x, w = column_numpy(t, "x_bits"), column_numpy(t, "w_bits")
    m, k = _logical_shape(t, "x_bits")
    nrows = _logical_shape(t, "w_bits")[0]
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
            return _as_array(y, "rotated_gemm", (m, nrows), np.uint32)
        y = _call(res, np.array([r]), go)
        if y is None:
            continue
        _compare_gemm(res, r, y, ex[r].reshape(m, nrows), seq[r].reshape(m, nrows),
                      bound[r].reshape(m, nrows), contract, ulps)
    _ulp_stats(res, ulps)



# ---- quantize_mx_sr --------------------------------------------------------------------------
def run_quantize_mx_sr(backend, t, res, rows, profile):
    gf = res.gf
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows])
    rb = np.ascontiguousarray(column_numpy(t, "rbits")[rows])
    es, ec = column_numpy(t, "exp_scale")[rows], column_numpy(t, "exp_codes")[rows]

    def go():
        s, c = backend.quantize_mx_sr(src, rb, src_dtype=gf.src_dtype, fmt=gf.fmt,
                                      profile=profile, axis=1)
        return (_as_array(s, "quantize_mx_sr scales", (len(rows), 1), np.uint8),
                _as_array(c, "quantize_mx_sr codes", src.shape, np.uint8))
    out = _call(res, rows, go)
    if out is not None:
        s, c = out
        res.put("actual_scale", rows, s[:, 0])
        res.put("actual_codes", rows, c)
        cmp = _Compare(res, rows)
        cmp.field("scale", es, s[:, 0], detail=_bits_detail(es[:, None], s, 2))
        cmp.field("elems", ec, c, dont_care=np.broadcast_to((es == 0xFF)[:, None], ec.shape),
                  detail=_bits_detail(ec, c, 2))
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

        def go2(r=r):
            w = backend.random_bits(n, seed=int(seed[r]), offset=int(off[r]))
            return _as_array(np.asarray(w), "random_bits", (n,), np.uint32)
        w = _soft_call(res, np.array([r]), go2, skipped, "random_bits")
        if w is not None:
            _Compare(res, np.array([r])).field("rbits", rb[i][None], w[None],
                                               detail=_bits_detail(rb[i][None], w[None]))
    if skipped:
        res.notes = sorted(set(getattr(res, "notes", [])) | skipped)


# ---- quantize_nvfp4_sr -----------------------------------------------------------------------
def run_quantize_nvfp4_sr(backend, t, res, rows, profile):
    """Each row is one [4, 16] tensor with its words: scales, codes and the tensor scale are
    compared bit for bit (a poisoned NVFP4 block is scale 0x7F and codes 0: nothing is
    don't-care)."""
    gf = res.gf
    shape = _logical_shape(t, "src_bits")
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows]).reshape(len(rows), *shape)
    rb = np.ascontiguousarray(column_numpy(t, "rbits")[rows]).reshape(src.shape)
    es = column_numpy(t, "exp_scales")[rows]
    ec = column_numpy(t, "exp_codes")[rows]
    ets = column_numpy(t, "exp_tensor_scale")[rows]
    T, M, C = src.shape

    def go():
        s, c, ts = backend.quantize_nvfp4_sr(src, rb, src_dtype=gf.src_dtype, profile=profile)
        return (_as_array(s, "quantize_nvfp4_sr scales", (T, M, C // 16), np.uint8),
                _as_array(c, "quantize_nvfp4_sr codes", (T, M, C), np.uint8),
                _as_array(ts, "quantize_nvfp4_sr tensor_scale", (T,), np.uint32))
    out = _call(res, rows, go)
    if out is not None:
        s, c, ts = out
        s, c = s.reshape(T, -1), c.reshape(T, -1)
        res.put("actual_scales", rows, s)
        res.put("actual_codes", rows, c)
        res.put("actual_tensor_scale", rows, ts)
        cmp = _Compare(res, rows)
        cmp.field("scale", es, s, detail=_bits_detail(es, s, 2))
        cmp.field("elems", ec, c, detail=_bits_detail(ec, c, 2))
        cmp.field("tensor_scale", ets[:, None], ts[:, None],
                  detail=_bits_detail(ets[:, None], ts[:, None]))
    _check_sr_stream(backend, t, res, rows, rb.reshape(T, -1))


# ---- FP8 <-> MXFP4, reblock ------------------------------------------------------------------
def run_mxfp4_to_fp8(backend, t, res, rows, profile):
    group = column_numpy(t, "group").astype(int)
    codes, scales = column_numpy(t, "codes"), column_numpy(t, "scales")
    ng = column_numpy(t, "n_groups").astype(int)
    ec, es, ee = (column_numpy(t, c) for c in ("exp_codes", "exp_scales", "exp_exact"))
    for g, idx in _groups([int(group[r]) for r in rows]):
        rr = rows[idx]
        k = int(ng[rr[0]])

        def go(rr=rr, g=g, k=k):
            gs, c, ex = backend.mxfp4_to_fp8(np.ascontiguousarray(scales[rr]),
                                             np.ascontiguousarray(codes[rr]),
                                             group=g if g else "row")
            return (_as_array(gs, "mxfp4_to_fp8 group scales", (len(rr), k), np.uint8),
                    _as_array(c, "mxfp4_to_fp8 codes", (len(rr), codes.shape[1]), np.uint8),
                    _as_array(np.asarray(ex).astype(np.uint8), "mxfp4_to_fp8 exact",
                              (len(rr), k), np.uint8))
        out = _call(res, rr, go)
        if out is None:
            continue
        gs, c, ex = out
        cmp = _Compare(res, rr)
        cmp.field("scale", es[rr, :k], gs, detail=_bits_detail(es[rr, :k], gs, 2))
        cmp.field("elems", ec[rr], c, detail=_bits_detail(ec[rr], c, 2))
        cmp.field("exact", ee[rr, :k], ex, detail=_bits_detail(ee[rr, :k], ex, 2))


def run_fp8_to_mxfp4(backend, t, res, rows, profile):
    codes, gsc = column_numpy(t, "codes")[rows], column_numpy(t, "group_scales")[rows]
    es, ec = column_numpy(t, "exp_scales")[rows], column_numpy(t, "exp_codes")[rows]

    def go():
        s, c = backend.fp8_to_mxfp4(np.ascontiguousarray(gsc), np.ascontiguousarray(codes),
                                    group=128, profile=profile)
        return (_as_array(s, "fp8_to_mxfp4 scales", es.shape, np.uint8),
                _as_array(c, "fp8_to_mxfp4 codes", ec.shape, np.uint8))
    out = _call(res, rows, go)
    if out is None:
        return
    s, c = out
    res.put("actual_scales", rows, s)
    res.put("actual_codes", rows, c)
    cmp = _Compare(res, rows)
    cmp.field("scale", es, s, detail=_bits_detail(es, s, 2))
    cmp.field("elems", ec, c, dont_care=np.repeat(es == 0xFF, 32, axis=1),
              detail=_bits_detail(ec, c, 2))


def run_reblock(backend, t, res, rows, profile):
    gf = res.gf
    ci, si = column_numpy(t, "codes_axis1"), column_numpy(t, "scales_axis1")
    ec, es = column_numpy(t, "exp_codes_axis0"), column_numpy(t, "exp_scales_axis0")
    for r in rows:
        r = int(r)

        def go(r=r):
            s, c = backend.reblock(np.ascontiguousarray(si[r]), np.ascontiguousarray(ci[r]),
                                   fmt=gf.fmt, profile=profile, axis=0)
            return (_as_array(s, "reblock scales", es[r].shape, np.uint8),
                    _as_array(c, "reblock codes", ec[r].shape, np.uint8))
        out = _call(res, np.array([r]), go)
        if out is None:
            continue
        s, c = out
        cmp = _Compare(res, np.array([r]))
        cmp.field("scale", es[r][None], s[None], detail=_bits_detail(es[r][None], s[None], 2))
        dc = np.repeat(es[r] == 0xFF, 32, axis=0)[: ec.shape[1]][None]
        cmp.field("elems", ec[r][None], c[None], dont_care=dc,
                  detail=_bits_detail(ec[r][None].reshape(1, -1), c[None].reshape(1, -1), 2))


# ---- decompose -------------------------------------------------------------------------------
def run_decompose(backend, t, res, rows, profile):
    gf = res.gf
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows])
    exp = np.stack([column_numpy(t, c)[rows] for c in ("exp_scale", "exp_dead", "exp_grid")], 1)
    flags = column_numpy(t, "exp_flags")[rows]

    def go():
        comps, fl = backend.decompose(src, src_dtype=gf.src_dtype, fmt=gf.fmt, profile=profile)
        return (_as_array(comps, "decompose components", exp.shape, np.uint64),
                _as_array(fl, "decompose flags", flags.shape, np.uint8))
    out = _call(res, rows, go)
    if out is None:
        return
    comps, fl = out
    res.put("actual_components", rows, comps)
    cmp = _Compare(res, rows)
    cmp.field("components", exp, comps, detail=_bits_detail(exp, comps, 16))
    cmp.field("flags", flags, fl, detail=_bits_detail(flags, fl, 2))


# ---- corrections -----------------------------------------------------------------------------
def _check_fields(res, rows, pairs):
    cmp = _Compare(res, rows)
    for name, exp, act in pairs:
        e, a = exp.reshape(len(rows), -1), act.reshape(len(rows), -1)
        w = {1: 2, 2: 4}.get(e.dtype.itemsize, 8)
        cmp.field(name, e, a, detail=_bits_detail(e, a, w))


def run_macroblock(backend, t, res, rows, profile):
    gf = res.gf
    src = column_numpy(t, "src_bits")
    macro, dt = column_numpy(t, "macro").astype(int), column_numpy(t, "macro_scale_dtype")
    nm = column_numpy(t, "n_macro").astype(int)
    ems, es, ec = (column_numpy(t, c) for c in ("exp_macro_scales", "exp_scales", "exp_codes"))
    for (m, d), idx in _groups([(int(macro[r]), str(dt[r])) for r in rows]):
        rr = rows[idx]
        k = int(nm[rr[0]])

        def go(rr=rr, m=m, d=d, k=k):
            ms, s, c = backend.macroblock(np.ascontiguousarray(src[rr]), src_dtype=gf.src_dtype,
                                          fmt=gf.fmt, profile=profile, macro=m,
                                          macro_scale_dtype=d)
            return (_as_array(np.asarray(ms).astype(np.uint32), "macro scales", (len(rr), k),
                              np.uint32),
                    _as_array(s, "scales", es[rr].shape, np.uint8),
                    _as_array(c, "codes", ec[rr].shape, np.uint8))
        out = _call(res, rr, go)
        if out is not None:
            ms, s, c = out
            _check_fields(res, rr, [("macro_scale", ems[rr, :k], ms), ("scale", es[rr], s),
                                    ("elems", ec[rr], c)])


def run_outlier_fallback(backend, t, res, rows, profile):
    gf = res.gf
    src, rule = column_numpy(t, "src_bits"), column_numpy(t, "rule")
    ef, es, ec, er = (column_numpy(t, c) for c in ("exp_flagged", "exp_scales", "exp_codes",
                                                   "exp_residual"))
    for rl, idx in _groups([str(rule[r]) for r in rows]):
        rr = rows[idx]

        def go(rr=rr, rl=rl):
            f, s, c, r = backend.outlier_fallback(np.ascontiguousarray(src[rr]),
                                                  src_dtype=gf.src_dtype, fmt=gf.fmt,
                                                  profile=profile, rule=rl)
            return (_as_array(np.asarray(f).astype(np.uint8), "flagged", ef[rr].shape, np.uint8),
                    _as_array(s, "scales", es[rr].shape, np.uint8),
                    _as_array(c, "codes", ec[rr].shape, np.uint8),
                    _as_array(r, "residual", er[rr].shape, np.uint16))
        out = _call(res, rr, go)
        if out is not None:
            f, s, c, r = out
            _check_fields(res, rr, [("flagged", ef[rr], f), ("scale", es[rr], s),
                                    ("elems", ec[rr], c), ("residual", er[rr], r)])


def run_quantize_4over6(backend, t, res, rows, profile):
    gf = res.gf
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows]).reshape(len(rows), 4, 16)
    es, ec, et, ech = (column_numpy(t, c)[rows] for c in ("exp_scales", "exp_codes",
                                                          "exp_tensor_scale", "exp_choice"))

    def go():
        s, c, ts, ch = backend.quantize_4over6(src, src_dtype=gf.src_dtype, profile=profile)
        return (_as_array(s, "scales", (len(rows), 4, 1), np.uint8),
                _as_array(c, "codes", src.shape, np.uint8),
                _as_array(ts, "tensor_scale", (len(rows),), np.uint32),
                _as_array(np.asarray(ch).astype(np.uint8), "choice", (len(rows), 4, 1), np.uint8))
    out = _call(res, rows, go)
    if out is not None:
        s, c, ts, ch = out
        _check_fields(res, rows, [("scale", es, s), ("elems", ec, c),
                                  ("tensor_scale", et, ts), ("choice", ech, ch)])


EXT_RUNNERS = {"rotate": run_rotate, "quantize_rotated": run_quantize_rotated, "gemm": run_gemm,
               "quantize_mx_sr": run_quantize_mx_sr, "quantize_nvfp4_sr": run_quantize_nvfp4_sr,
               "mxfp4_to_fp8": run_mxfp4_to_fp8,
               "fp8_to_mxfp4": run_fp8_to_mxfp4, "reblock": run_reblock,
               "decompose": run_decompose, "rotated_gemm": run_rotated_gemm,
               "macroblock": run_macroblock, "outlier_fallback": run_outlier_fallback,
               "quantize_4over6": run_quantize_4over6}
