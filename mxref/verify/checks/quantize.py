"""Checks of the quantize family: quantize_mx, quantize_mx_tensor, quantize_nvfp4, convert,
dequantize, pack (the core conversions).

Codes inside a poisoned MX block (scale 0xFF) are don't-care; everything else is bit for bit.
A mismatch record shows the input, the block's amax, and scale and code with their decoded
values and fields, for expected and actual.

A backend claiming the ``scale_step`` relaxation (fused kernels that derive the E8M0 scale from
an amax computed another way) has quantize_mx / quantize_mx_tensor blocks accepted whose scale
byte is exactly one step from the golden's (neither byte 0xFF) when every element code of the
block is what the golden's profile encodes at the backend's scale (mxref's own element
encoder on the source bits, :func:`_scale_step_blocks`). Such rows are ``relaxed``, not pass.
"""
from __future__ import annotations

import numpy as np

from ... import _kernels as K
from ...formats import FORMATS
from ...golden.store import column_numpy
from ...inputs import as_f32_bits
from ...profiles import get_profile
from .. import records as R
from ..compare import (Compare, as_array, call_backend, claimed_relaxations, logical_shape,
                       mark_relaxed)


# ---- mismatch records -------------------------------------------------------------------------
def _amax_record(block_bits, src_dtype):
    """The block element of largest magnitude (NaNs skipped), as bits and value."""
    blk = block_bits.astype(np.uint64)
    mag = blk & (0x7FFFFFFF if src_dtype == "float32" else 0x7FFF)
    k = int(np.argmax(np.where(_is_nan_src(blk, src_dtype), 0, mag)))
    return R.src_record(int(blk[k]), src_dtype)


def _is_nan_src(bits, src_dtype):
    if src_dtype == "float32":
        return (bits & 0x7FFFFFFF) > 0x7F800000
    if src_dtype == "bfloat16":
        return (bits & 0x7FFF) > 0x7F80
    return (bits & 0x7FFF) > 0x7C00


def _elem_record(el, gf, src_bits, amax, exp_scale, act_scale, exp_code, act_code, **where):
    sf = R.scale_format_name(gf.fmt)
    return {**where, "input": R.src_record(int(src_bits), gf.src_dtype), "block_amax": amax,
            "expected": R.element_side(el, sf, exp_scale, exp_code),
            "actual": R.element_side(el, sf, act_scale, act_code),
            "xor": f"0x{int(exp_code) ^ int(act_code):02x}",
            "code_distance": R.code_distance(el, exp_code, act_code)}


# ---- the scale_step relaxation -------------------------------------------------------------------
def _claims_step(backend, gf) -> bool:
    return "scale_step" in claimed_relaxations(backend) and not FORMATS[gf.fmt].is_nvfp4


def _encode_at(gf, src, scale) -> np.ndarray:
    """The golden profile's element codes of the source bits `src` (any shape) at E8M0 scale
    byte `scale` (not 0xFF): mxref's own element encoder."""
    fmt = FORMATS[gf.fmt]
    if gf.src_dtype == "float32":
        x32, _ = as_f32_bits(src.view(np.float32))
    else:
        x32, _ = as_f32_bits(src, source_dtype=gf.src_dtype)
    pp = get_profile(gf.profile).kernel_params()
    out = np.empty(x32.size, np.uint8)
    K.encode_elements(np.ascontiguousarray(x32).reshape(-1),
                      int(K.element_exponent(int(scale) - 127, pp)), fmt.element.kernel_params(),
                      pp, out)
    return out.reshape(x32.shape)


def _scale_step_blocks(backend, gf, src, es, s, c, axis):
    """Blocks (bool, shaped like the scales `es`) the claimed ``scale_step`` relaxation accepts:
    scale byte `s` one step from the golden `es`, neither 0xFF, and every code of the block in
    `c` equal to the golden profile's encoding of the source bits `src` at scale `s`. Blocks
    run along `axis` of `src`/`c` (a ragged last block is cut short); all False without the
    claim or for NVFP4."""
    step = np.abs(es.astype(np.int16) - s.astype(np.int16)) == 1
    cand = step & (es != 0xFF) & (s != 0xFF)
    if not _claims_step(backend, gf) or not cand.any():
        return np.zeros(es.shape, bool)
    bs, n = FORMATS[gf.fmt].block_size, src.shape[axis]

    def per_elem(b):
        return np.take(np.repeat(b, bs, axis=axis), np.arange(n), axis=axis)
    s_el, cand_el = per_elem(s), per_elem(cand)
    ref = c.copy()
    for v in np.unique(s_el[cand_el]):
        m = cand_el & (s_el == v)
        ref[m] = _encode_at(gf, src[m], v)
    inconsistent = np.logical_or.reduceat(ref != c, np.arange(0, n, bs), axis=axis)
    return cand & ~inconsistent


def _step_note(backend, gf, exp, act, src, codes) -> dict:
    """For a scale record under a scale_step claim: {"relaxation": why the claim does not
    cover the block} (`src`/`codes`: its source bits and the backend's codes, 1-D); {}
    without the claim."""
    if not _claims_step(backend, gf):
        return {}
    d = abs(int(exp) - int(act))
    if 0xFF in (int(exp), int(act)):
        why = "a 0xFF (NaN) scale must match exactly"
    elif d != 1:
        why = f"the scale is {d} steps off"
    else:
        ref = _encode_at(gf, src, act)
        j = int(np.argmax(ref != codes))
        why = (f"elem {j} code 0x{int(codes[j]):02x} is not 0x{int(ref[j]):02x}, the "
               "profile's encoding at the backend's scale")
    return {"relaxation": f"scale_step claimed, but {why}"}


# ---- quantize_mx --------------------------------------------------------------------------------
def run_quantize_mx(backend, t, res, rows, profile):
    """One backend call per ragged length (n_valid): rows of one length share a call."""
    src = column_numpy(t, "src_bits")
    nvalid = column_numpy(t, "n_valid").astype(np.int64)
    exp_s = column_numpy(t, "exp_scale")
    exp_c = column_numpy(t, "exp_codes")
    for nv in np.unique(nvalid[rows]):
        _check_mx_length(backend, res, rows[nvalid[rows] == nv], int(nv), src, exp_s, exp_c,
                         profile)


def _check_mx_length(backend, res, rr, nv, src, exp_s, exp_c, profile):
    """The rows `rr`, all of valid length `nv` (a function of its own, so that the records'
    builders see this group's arrays, not the last group's)."""
    gf = res.gf
    el = FORMATS[gf.fmt].element
    x = np.ascontiguousarray(src[rr, :nv])

    def go():
        s, c = backend.quantize_mx(x, src_dtype=gf.src_dtype, fmt=gf.fmt, profile=profile, axis=1)
        return (as_array(s, "quantize_mx scales", (len(rr), 1), np.uint8),
                as_array(c, "quantize_mx codes", (len(rr), nv), np.uint8))
    out = call_backend(res, rr, go)
    if out is None:
        return
    s, c = out
    res.put("actual_scale", rr, s[:, 0])
    if "actual_codes" not in res.actual:
        res.actual["actual_codes"] = np.zeros(exp_c.shape, np.uint8)
    res.actual["actual_codes"][rr, :nv] = c
    es, ec = exp_s[rr], exp_c[rr, :nv]

    def amax_of(i):
        return _amax_record(x[i], gf.src_dtype)

    def scale_detail(i, j):
        sf = R.scale_format_name(gf.fmt)
        return {"block": 0, "elem": None, "index": [], "input": None, "block_amax": amax_of(i),
                "expected": R.element_side(el, sf, es[i], None),
                "actual": R.element_side(el, sf, s[i, 0], None),
                "xor": f"0x{int(es[i]) ^ int(s[i, 0]):02x}", "code_distance": None,
                **_step_note(backend, gf, es[i], s[i, 0], x[i], c[i])}

    def elem_detail(i, j):
        return _elem_record(el, gf, x[i, j], amax_of(i), es[i], s[i, 0], ec[i, j], c[i, j],
                            block=0, elem=j, index=[j])
    ok = _scale_step_blocks(backend, gf, x, es[:, None], s, c, 1)[:, 0]
    cmp = Compare(res, rr)
    cmp.field("scale", es, s[:, 0], dont_care=ok, detail=scale_detail)
    cmp.field("elems", ec, c, dont_care=np.broadcast_to(((es == 0xFF) | ok)[:, None], ec.shape),
              detail=elem_detail)
    mark_relaxed(res, rr, ok)


# ---- quantize_mx_tensor -----------------------------------------------------------------------
def run_quantize_mx_tensor(backend, t, res, rows, profile):
    """Each row is one 2-D tensor, quantized along axis 0 and along axis 1."""
    src = column_numpy(t, "src_bits")[rows]
    for ax in (0, 1):
        es = column_numpy(t, f"exp_scales_axis{ax}")[rows]
        ec = column_numpy(t, f"exp_codes_axis{ax}")[rows]
        if not _check_mx_axis(backend, res, rows, ax, src, es, ec, profile):
            return


def _check_mx_axis(backend, res, rows, ax, src, es, ec, profile) -> bool:
    """One axis of quantize_mx_tensor; False when the backend call failed."""
    gf = res.gf
    el = FORMATS[gf.fmt].element
    bs = FORMATS[gf.fmt].block_size
    n_r, n_c = src.shape[1:]

    def go():
        s, c = backend.quantize_mx(np.ascontiguousarray(src), src_dtype=gf.src_dtype,
                                   fmt=gf.fmt, profile=profile, axis=ax + 1)
        return (as_array(s, f"quantize_mx(axis={ax}) scales", es.shape, np.uint8),
                as_array(c, f"quantize_mx(axis={ax}) codes", src.shape, np.uint8))
    out = call_backend(res, rows, go)
    if out is None:
        return False
    s, c = out
    res.put(f"actual_scales_axis{ax}", rows, s)
    res.put(f"actual_codes_axis{ax}", rows, c)
    es_full = np.repeat(es, bs, axis=ax + 1)[:, :n_r, :n_c]
    as_full = np.repeat(s, bs, axis=ax + 1)[:, :n_r, :n_c]

    def _block_of(i, r, col):
        """(source bits, codes) of the block holding element (r, col) of row i."""
        sl = (i, slice(r, r + bs), col) if ax == 0 else (i, r, slice(col, col + bs))
        return src[sl], c[sl]

    def amax_of(i, r, col):
        line = src[i, :, col] if ax == 0 else src[i, r, :]
        k = (r if ax == 0 else col) // bs
        return _amax_record(line[k * bs:(k + 1) * bs], gf.src_dtype)

    def scale_detail(i, j):
        idx = np.unravel_index(j, es.shape[1:])
        r, col = (idx[0] * bs, idx[1]) if ax == 0 else (idx[0], idx[1] * bs)
        return {"axis": ax, "block": [int(v) for v in idx], "elem": None, "index": [],
                "input": None, "block_amax": amax_of(i, r, col),
                "expected": R.element_side(el, "e8m0", es[i][idx], None),
                "actual": R.element_side(el, "e8m0", s[i][idx], None),
                "xor": f"0x{int(es[i][idx]) ^ int(s[i][idx]):02x}", "code_distance": None,
                **_step_note(backend, gf, es[i][idx], s[i][idx], *_block_of(i, r, col))}

    def elem_detail(i, j):
        r, col = divmod(j, n_c)
        blk = [r // bs, col] if ax == 0 else [r, col // bs]
        return _elem_record(el, gf, src[i, r, col], amax_of(i, r, col), es_full[i, r, col],
                            as_full[i, r, col], ec[i, r, col], c[i, r, col], axis=ax,
                            block=blk, elem=(r if ax == 0 else col) % bs, index=[r, col])
    ok = _scale_step_blocks(backend, gf, src, es, s, c, ax + 1)
    ok_full = np.repeat(ok, bs, axis=ax + 1)[:, :n_r, :n_c]
    Compare(res, rows).field("scale", es, s, dont_care=ok, detail=scale_detail)
    Compare(res, rows).field("elems", ec, c, dont_care=(es_full == 0xFF) | ok_full,
                             detail=elem_detail)
    mark_relaxed(res, rows, ok)
    return True


# ---- quantize_nvfp4 ---------------------------------------------------------------------------
def run_quantize_nvfp4(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS["nvfp4"].element
    shape = logical_shape(t, "src_bits")
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows]).reshape(len(rows), *shape)
    es = column_numpy(t, "exp_scales")[rows]
    ec = column_numpy(t, "exp_codes")[rows].reshape(src.shape)
    ets = column_numpy(t, "exp_tensor_scale")[rows]
    T, M, C = src.shape
    # nvfp4_amax_scope='row' files hold one tensor scale per tensor row ([T, R]); the backend
    # then returns tensor_scale [T, R] (a backend without the knob raises Unsupported)
    ts_shape = (T, M) if ets.ndim == 2 else (T,)

    def go():
        s, c, ts = backend.quantize_nvfp4(src, src_dtype=gf.src_dtype, profile=profile)
        return (as_array(s, "quantize_nvfp4 scales", (T, M, C // 16), np.uint8),
                as_array(c, "quantize_nvfp4 codes", (T, M, C), np.uint8),
                as_array(ts, "quantize_nvfp4 tensor_scale", ts_shape, np.uint32))
    out = call_backend(res, rows, go)
    if out is None:
        return
    s, c, ts = out
    s = s.reshape(T, M * (C // 16))
    res.put("actual_scales", rows, s)
    res.put("actual_codes", rows, c.reshape(T, -1))
    res.put("actual_tensor_scale", rows, ts)
    es = es.reshape(T, -1)
    es_full = np.repeat(es.reshape(T, M, -1), 16, axis=2)
    as_full = np.repeat(s.reshape(T, M, -1), 16, axis=2)

    def amax_of(i, r, b):
        return _amax_record(src[i, r, b * 16:(b + 1) * 16], gf.src_dtype)

    def scale_detail(i, j):
        r, b = divmod(j, C // 16)
        return {"block": [r, b], "elem": None, "index": [], "input": None,
                "block_amax": amax_of(i, r, b),
                "expected": R.element_side(el, "e4m3", es[i, j], None),
                "actual": R.element_side(el, "e4m3", s[i, j], None),
                "xor": f"0x{int(es[i, j]) ^ int(s[i, j]):02x}", "code_distance": None}

    def elem_detail(i, j):
        r, col = divmod(j, C)
        return _elem_record(el, gf, src[i, r, col], amax_of(i, r, col // 16), es_full[i, r, col],
                            as_full[i, r, col], ec[i, r, col], c[i, r, col],
                            block=[r, col // 16], elem=col % 16, index=[r, col])

    def ts_detail(i, j):
        e_, a_ = (ets[i], ts[i]) if ets.ndim == 1 else (ets[i, j], ts[i, j])
        return {"block": None, "elem": None, "index": [] if ets.ndim == 1 else [j],
                "input": None, "block_amax": None,
                "expected": R.f32_record(e_), "actual": R.f32_record(a_),
                "xor": f"0x{int(e_) ^ int(a_):08x}", "code_distance": None}
    cmp = Compare(res, rows)
    cmp.field("scale", es, s, detail=scale_detail)
    cmp.field("elems", ec, c, detail=elem_detail)
    cmp.field("tensor_scale", ets, ts, detail=ts_detail)


# ---- convert, dequantize ------------------------------------------------------------------------
def run_convert(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS[gf.fmt].element
    src = np.ascontiguousarray(column_numpy(t, "src_bits")[rows])
    ec = column_numpy(t, "exp_codes")[rows]

    def go():
        c = backend.convert(src, src_dtype=gf.src_dtype, fmt=gf.fmt, profile=profile)
        return as_array(c, "convert codes", src.shape, np.uint8)
    c = call_backend(res, rows, go)
    if c is None:
        return
    res.put("actual_codes", rows, c)

    def detail(i, j):
        return _elem_record(el, gf, src[i, j], None, None, None, ec[i, j], c[i, j],
                            block=None, elem=j, index=[j])
    Compare(res, rows).field("elems", ec, c, detail=detail)


def run_dequantize(backend, t, res, rows, profile):
    gf = res.gf
    el = FORMATS[gf.fmt].element
    scales = np.ascontiguousarray(column_numpy(t, "scale")[rows])
    codes = np.ascontiguousarray(column_numpy(t, "codes")[rows])
    exp = column_numpy(t, "exp_dequant")[rows]

    def go():
        d = backend.dequantize(scales[:, None].copy(), codes, fmt=gf.fmt, profile=profile)
        return as_array(d, "dequantize", codes.shape, np.uint32)
    d = call_backend(res, rows, go)
    if d is None:
        return
    res.put("actual_dequant", rows, d)

    def detail(i, j):
        side = R.element_side(el, "e8m0", scales[i], codes[i, j])
        return {"block": 0, "elem": j, "index": [j], "input": side, "block_amax": None,
                "expected": R.f32_record(exp[i, j]), "actual": R.f32_record(d[i, j]),
                "xor": f"0x{int(exp[i, j]) ^ int(d[i, j]):08x}", "code_distance": None}
    Compare(res, rows).field("dequant", exp, d, nan_any=True, detail=detail)


# ---- pack (and the scale layouts) ---------------------------------------------------------------
def run_pack(backend, t, res, rows, profile):
    """Rows differ in shape: one call each (the files are tiny). A ``pack`` row checks the
    packed bytes; a scale-layout row checks both the cuBLAS and the AMD layout."""
    gf = res.gf
    kind = column_numpy(t, "kind")
    shape = t.column("shape").to_pylist()
    inp = t.column("input").to_pylist()
    cols = {name: t.column("exp_" + name).to_pylist() for name in ("packed", "cublas", "amd")}
    for r in rows:
        r = int(r)
        x = np.array(inp[r], np.uint8)
        if kind[r] == "pack":
            _check_bytes(res, r, "packed", np.array(cols["packed"][r], np.uint8),
                         lambda: backend.pack(x, fmt=gf.fmt))
        else:
            for lay in ("cublas", "amd"):
                _check_bytes(res, r, lay, np.array(cols[lay][r], np.uint8),
                             lambda lay=lay: backend.scale_layout(x.reshape(shape[r]), layout=lay))


def _check_bytes(res, r, name, exp, fn):
    got = call_backend(res, np.array([r]), lambda: as_array(fn(), name, exp.shape, np.uint8))
    if got is None:
        return

    def detail(i, j):
        return {"block": None, "elem": j, "index": [j], "input": None, "block_amax": None,
                "expected": {"byte": f"0x{int(exp[j]):02x}"},
                "actual": {"byte": f"0x{int(got[j]):02x}"},
                "xor": f"0x{int(exp[j]) ^ int(got[j]):02x}", "code_distance": None}
    Compare(res, np.array([r])).field(name, exp[None], got[None], detail=detail)


RUNNERS = {"quantize_mx": run_quantize_mx, "quantize_mx_tensor": run_quantize_mx_tensor,
           "quantize_nvfp4": run_quantize_nvfp4, "convert": run_convert,
           "dequantize": run_dequantize, "pack": run_pack}
