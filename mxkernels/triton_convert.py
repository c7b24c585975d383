"""FP8 <-> MXFP4 conversion and MX re-blocking as Triton kernels, decided in the integer domain.

The contracts are those of :mod:`mxref.fp8fp4` (docs/fp8fp4.md), bit for bit:

* :func:`mxfp4_to_fp8`: MXFP4 (E2M1 codes, E8M0 bytes per 32) -> FP8 (E4M3 or E5M2) codes under
  one E8M0 byte per ``group`` elements: ``G = max(s_max - k, 0)`` over the group's live blocks
  (not 0xFF, a nonzero code), 0x00 when none is live, 0xFF when every block is NaN; element
  ``RNE_fp8(q * 2^(s_b - G))`` (a NaN block's elements -> the FP8 NaN code, +-0 -> +-0); a
  per-group flag says whether every element was exact (checked by re-decoding the FP8 code).
* :func:`fp8_to_mxfp4`: FP8 codes with their E8M0 group bytes -> MXFP4 under a profile, from
  the exact values ``c * 2^(G - 127)``: the block amax is an integer max over (binade,
  significand) keys, the shared exponent is the generic rule on the amax's fp32 bits (scaled
  by 2^-64 when it reaches 2^128, then 64 added back), elements are rounded once.
* :func:`reblock`: a 2-D MX tensor with blocks along axis 1 quantized again along ``axis``
  from its exactly decoded values (decode and requantize fused in one kernel; a decoded value
  >= 2^128 is refused as the reference refuses it).

No float is formed anywhere: codes are decoded to (sign, significand, exponent) integers and
every rounding is ``_round_sig`` of :mod:`mxkernels.triton_quant`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from mxkernels._memo import memo_dict

from mxkernels.triton_common import (_bitlen32, _block_poisoned, element_constexprs, _encode,
                                     _false_like, _finish, KernelUnsupported, _max_along,
                                     _mx_scale_byte, _mx_scale_finish, profile_constexprs,
                                     _round_sig, _shared_exponent)
from mxkernels.triton_quant import (_element_value, _to_f32)
from mxref.formats import E2M1, FORMATS, get_format
from mxref.fp8fp4 import (DecodedOverflowError, FP8TensorError, GroupSizeError,
                          ScaleRangeError, group_headroom)
from mxref.profiles import get_profile

__all__ = ["mxfp4_to_fp8", "fp8_to_mxfp4", "reblock", "convert_constexprs", "aot_specs",
           "KERNELS", "ARG_TYPES"]

_INF: tl.constexpr = tl.constexpr(0x7F800000)
_QNAN: tl.constexpr = tl.constexpr(0x7FC00000)
_KEY_OFF: tl.constexpr = tl.constexpr(1024)      # binade offset of the fp8_to_mxfp4 amax keys


# ---- errors: KernelUnsupported and the reference's own error type at once -------------------
class ConvertGroupError(KernelUnsupported, GroupSizeError):
    """A group length the conversion does not define."""


class ConvertInputError(KernelUnsupported, FP8TensorError):
    """Codes/scales that do not fit together or hold invalid codes."""


class ReblockOverflowError(KernelUnsupported, DecodedOverflowError):
    """An MX element whose exact value is >= 2^128 (not an fp32 number)."""


class ConvertScaleRangeError(KernelUnsupported, ScaleRangeError):
    """A block amax >= 2^128 under a profile whose scale rule is defined on an fp32 amax."""


# =========================================================================================
# MXFP4 -> FP8
# =========================================================================================
@triton.jit
def mxfp4_to_fp8_kernel(
        code_ptr, scale_ptr, out_ptr, gscale_ptr, exact_ptr, status_ptr,
        n_rows, n_cols, n_blk, n_groups, bpg, n_chunks,
        BLOCK: tl.constexpr, CB: tl.constexpr, BG: tl.constexpr, K: tl.constexpr,
        F8_MBITS: tl.constexpr, F8_EMIN: tl.constexpr, F8_BIAS: tl.constexpr,
        F8_SIGNBIT: tl.constexpr, F8_NAN: tl.constexpr, F8_INF: tl.constexpr,
        CHECK: tl.constexpr):
    """[n_rows, n_cols] E2M1 codes + [n_rows, n_blk] E8M0 bytes -> FP8 codes, one E8M0 byte
    and one exactness flag per group of ``bpg`` blocks. A program handles BG groups, each in
    n_chunks chunks of CB blocks (two passes: the group byte, then the elements)."""
    gid = tl.program_id(0) * BG + tl.arange(0, BG)
    g_ok = gid < n_rows * n_groups
    row = gid // n_groups
    gi = gid - row * n_groups
    row64 = row.to(tl.int64)
    jl = tl.arange(0, CB)
    el = tl.arange(0, BLOCK)

    # pass 1: largest live scale byte; whether any block is not NaN; code width
    smax = gid * 0 - 1
    any_ok = gid * 0
    bad = gid * 0
    for c in range(0, n_chunks):
        jb = c * CB + jl
        blk = gi[:, None] * bpg + jb[None, :]
        b_ok = g_ok[:, None] & (jb[None, :] < bpg) & (blk < n_blk)
        sb = tl.load(scale_ptr + row64[:, None] * n_blk + blk, mask=b_ok, other=255).to(tl.int32)
        cols = blk[:, :, None] * BLOCK + el[None, None, :]
        e_ok = b_ok[:, :, None] & (cols < n_cols)
        q = tl.load(code_ptr + row64[:, None, None] * n_cols + cols, mask=e_ok,
                    other=0).to(tl.int32)
        nz = _max_along(q & 7, 2) > 0
        live = b_ok & (sb != 255) & nz
        smax = tl.maximum(smax, _max_along(tl.where(live, sb, -1), 1))
        any_ok = tl.maximum(any_ok, _max_along(tl.where(b_ok & (sb != 255), 1, 0), 1))
        if CHECK:
            bad = tl.maximum(bad, _max_along(_max_along(q >> 4, 2), 1))
    G = tl.where(any_ok == 0, 255, tl.where(smax < 0, 0, tl.maximum(smax - K, 0)))
    if CHECK:
        flag = _max_along(tl.where(g_ok & (bad > 0), 1, 0), 0)
        tl.atomic_max(status_ptr, flag, mask=flag > 0)   # no same-address atomic per program

    # pass 2: elements c = RNE_fp8(q * 2^(s_b - G)), exact iff the FP8 code decodes to it
    inexact = gid * 0
    for c in range(0, n_chunks):
        jb = c * CB + jl
        blk = gi[:, None] * bpg + jb[None, :]
        b_ok = g_ok[:, None] & (jb[None, :] < bpg) & (blk < n_blk)
        sb = tl.load(scale_ptr + row64[:, None] * n_blk + blk, mask=b_ok, other=255).to(tl.int32)
        cols = blk[:, :, None] * BLOCK + el[None, None, :]
        e_ok = b_ok[:, :, None] & (cols < n_cols)
        offs = row64[:, None, None] * n_cols + cols
        q = tl.load(code_ptr + offs, mask=e_ok, other=0).to(tl.int32) & 15
        neg, sig, exp2, _, _ = _element_value(q, False, 1, 0, 1, 3, -1, -1)
        nan_blk = (sb == 255)[:, :, None]
        ee = exp2 + (sb[:, :, None] - G[:, None, None])
        ee = tl.where(nan_blk | (sig == 0), 0, ee)               # garbage lanes: any value
        code8, _ = _round_sig(tl.where(sig == 0, 1, sig), ee, _false_like(sig), F8_MBITS,
                              F8_EMIN, F8_BIAS, False, 0, False)
        _, sig8, exp8, _, _ = _element_value(code8, False, F8_MBITS, F8_EMIN, F8_BIAS,
                                             F8_SIGNBIT, F8_NAN, F8_INF)
        d = ee - exp8
        dl = tl.minimum(tl.maximum(d, 0), 8)
        dr = tl.minimum(tl.maximum(-d, 0), 8)
        same = ((sig << dl) == (sig8 << dr)) & (d <= 8) & (d >= -8) & (code8 != 0)
        miss = e_ok & ~nan_blk & (sig != 0) & ~same
        inexact = tl.maximum(inexact, _max_along(_max_along(tl.where(miss, 1, 0), 2), 1))
        out = tl.where(sig == 0, 0, code8) | (neg << F8_SIGNBIT)
        out = tl.where(nan_blk, F8_NAN, out)
        tl.store(out_ptr + offs, out.to(tl.uint8), mask=e_ok)
    gofs = row64 * n_groups + gi
    tl.store(gscale_ptr + gofs, G.to(tl.uint8), mask=g_ok)
    tl.store(exact_ptr + gofs, (1 - inexact).to(tl.uint8), mask=g_ok)


# =========================================================================================
# FP8 -> MXFP4
# =========================================================================================
@triton.jit
def fp8_to_mxfp4_kernel(
        code_ptr, gscale_ptr, scale_ptr, out_ptr, status_ptr,
        n_rows, n_cols, n_blk, n_groups, glen,
        BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr, WHOLE_BLOCKS: tl.constexpr,
        F8_MBITS: tl.constexpr, F8_EMIN: tl.constexpr, F8_BIAS: tl.constexpr,
        F8_SIGNBIT: tl.constexpr, F8_NAN: tl.constexpr, F8_INF: tl.constexpr,
        EL_EMAX: tl.constexpr, EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr,
        EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
        NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr, SIGNED_ZERO: tl.constexpr,
        FLUSH: tl.constexpr, RCEIL_ANY_UP: tl.constexpr, SCALE_OVF_NAN: tl.constexpr,
        ZEXP: tl.constexpr, RCEIL_LOG2: tl.constexpr, INT8_FULL: tl.constexpr,
        AMAX_FLOOR: tl.constexpr, NAN_ELEM_MAX: tl.constexpr):
    """[n_rows, n_cols] FP8 codes with [n_rows, n_groups] E8M0 group bytes (``glen`` elements
    per group) -> MXFP4: E8M0 bytes [n_rows, n_blk] and E2M1 codes, blocks of BLOCK along
    axis 1, BLOCK_ROWS blocks per program."""
    g = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    g_ok = g < n_rows * n_blk
    r = g // n_blk
    cols = ((g - r * n_blk) * BLOCK)[:, None] + tl.arange(0, BLOCK)[None, :]
    m = g_ok[:, None] & (cols < n_cols)
    r64 = r.to(tl.int64)[:, None]
    c = tl.load(code_ptr + r64 * n_cols + cols, mask=m, other=0).to(tl.int32)
    if WHOLE_BLOCKS:            # glen a multiple of 32: one group byte per block (one division
        blk0 = (g - r * n_blk) * BLOCK                   # per block, not per element)
        gsb = tl.load(gscale_ptr + r.to(tl.int64) * n_groups + blk0 // glen, mask=g_ok,
                      other=0).to(tl.int32)
        gs = gsb[:, None] + cols * 0
    else:
        gs = tl.load(gscale_ptr + r64 * n_groups + cols // glen, mask=m, other=0).to(tl.int32)
    neg, sig, exp2, is_nan, is_inf = _element_value(c, False, F8_MBITS, F8_EMIN, F8_BIAS,
                                                    F8_SIGNBIT, F8_NAN, F8_INF)
    nan = is_nan | (gs == 255)
    inf = is_inf & ~nan
    p = _bitlen32(sig) - 1
    top = p + exp2 + gs - 127                       # binade of the exact value
    fin = ~nan & ~inf & (sig != 0)
    if FLUSH:
        flushed = fin & (top < -126)
        fin = fin & ~flushed
    else:
        flushed = _false_like(fin)

    # block amax: integer max of (binade, normalized mantissa field) keys
    nf = (sig << tl.maximum(F8_MBITS - p, 0)) & ((1 << F8_MBITS) - 1)
    key = tl.where(fin, ((top + _KEY_OFF) << F8_MBITS) | nf, 0)
    kmax = _max_along(key, 1)
    has_nan = _max_along(tl.where(nan & m, 1, 0), 1) > 0
    has_inf = _max_along(tl.where(inf & m, 1, 0), 1) > 0
    atop = (kmax >> F8_MBITS) - _KEY_OFF
    frac23 = (kmax & ((1 << F8_MBITS) - 1)) << (23 - F8_MBITS)
    big = (kmax > 0) & (atop > 127)
    sub_sh = tl.minimum(tl.maximum(-126 - atop, 0), 31)
    amax = tl.where(atop < -126, (frac23 | 0x800000) >> sub_sh,
                    ((tl.where(big, atop - 64, atop) + 127) << 23) | frac23)
    amax = tl.where(kmax > 0, amax, 0)
    if AMAX_FLOOR != 0:        # amax_floor (DeepSeek-V4); a big amax (>= 2^128) is above it
        amax = tl.where(big, amax, tl.maximum(amax, AMAX_FLOOR))
    if INF_MODE == 2:
        amax = tl.where(has_inf, _INF, amax)
        big = big & ~has_inf
    s = _shared_exponent(amax, EL_EMAX, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, RCEIL_ANY_UP,
                         RCEIL_LOG2)
    s = s + tl.where(big, 64, 0)
    nan_scale = _block_poisoned(has_nan, has_inf, NAN_POISON, INF_MODE)
    if RCEIL_LOG2:             # float32-log2 RCEIL is not shift invariant: refuse >= 2^128
        bad = big & ~nan_scale
        flag = _max_along(tl.where(bad & g_ok, 1, 0), 0)
        tl.atomic_max(status_ptr, flag, mask=flag > 0)
        nan_scale = nan_scale | bad
    byte, s, nan_scale = _mx_scale_finish(s, nan_scale, has_inf, INF_MODE, SCALE_OVF_NAN)
    tl.store(scale_ptr + g, byte.to(tl.uint8), mask=g_ok)

    # elements: round sig * 2^(exp2 + G - 127 - s) once onto E2M1
    se = tl.where(s == -127, ZEXP, s)
    ee = tl.where(fin, exp2 + gs - 127 - se[:, None], 0)
    code, huge = _round_sig(tl.where(fin, sig, 1), ee, _false_like(sig), 1, 0, 1, False,
                            ROUNDING, False)
    code = tl.where(fin, code, 0)
    huge = huge & fin
    a_like = tl.where(nan, _INF + 1, tl.where(inf, _INF, tl.where(fin, 1, 0)))
    code = _finish(code, huge, neg, a_like, False, 7, 3, -1, -1, OVERFLOW, SIGNED_ZERO, False)
    if NAN_ELEM_MAX:            # nan_element='signed_max' (AMD gfx950): +-6 with the sign
        code = tl.where(nan, 7 | (neg << 3), code)
    code = tl.where(nan_scale[:, None], 0, code)
    tl.store(out_ptr + r64 * n_cols + cols, code.to(tl.uint8), mask=m)


# =========================================================================================
# re-blocking
# =========================================================================================
@triton.jit
def reblock_kernel(
        code_ptr, sscale_ptr, out_ptr, dscale_ptr, status_ptr,
        n_rows, n_cols, n_sblk, n_dblk,
        DST_AXIS: tl.constexpr, TR: tl.constexpr, TC: tl.constexpr, SBLOCK: tl.constexpr,
        CHECK: tl.constexpr, EL_BITS: tl.constexpr,
        EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_BIAS: tl.constexpr, EL_EMAX: tl.constexpr, EL_MAXCODE: tl.constexpr,
        EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
        NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr, SIGNED_ZERO: tl.constexpr,
        FLUSH: tl.constexpr, RCEIL_ANY_UP: tl.constexpr, SCALE_OVF_NAN: tl.constexpr,
        ZEXP: tl.constexpr, RCEIL_LOG2: tl.constexpr, INT8_FULL: tl.constexpr,
        AMAX_FLOOR: tl.constexpr, NAN_ELEM_MAX: tl.constexpr):
    """[n_rows, n_cols] codes with E8M0 bytes [n_rows, n_sblk] (blocks of SBLOCK along axis
    1) -> the same format quantized along DST_AXIS: codes [n_rows, n_cols] and bytes
    [n_dblk, n_cols] (DST_AXIS 0) or [n_rows, n_dblk] (DST_AXIS 1). A program is a [TR, TC]
    tile whose DST_AXIS extent is one destination block."""
    rows = tl.program_id(0) * TR + tl.arange(0, TR)
    cols = tl.program_id(1) * TC + tl.arange(0, TC)
    m = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    r64 = rows.to(tl.int64)[:, None]
    offs = r64 * n_cols + cols[None, :]
    c = tl.load(code_ptr + offs, mask=m, other=0).to(tl.int32)
    sb = tl.load(sscale_ptr + r64 * n_sblk + (cols // SBLOCK)[None, :], mask=m,
                 other=0).to(tl.int32)
    # exact decode (as mx_dequantize_kernel): value(code) * 2^(sb - 127), one rounding
    neg, sig, exp2, is_nan, is_inf = _element_value(c, EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS,
                                                    EL_SIGNBIT, EL_NAN, EL_INF)
    b = _to_f32(neg, sig, exp2 + (sb - 127))
    if CHECK:
        ovf = ((b & 0x7FFFFFFF) == _INF) & ~is_inf & ~is_nan & (sb != 255) & m
        wide = c >> EL_BITS
        flag = tl.where(ovf, 1, 0) | tl.where((wide != 0) & m, 2, 0)
        flag = _max_along(_max_along(flag, 1), 0)
        tl.atomic_max(status_ptr, flag, mask=flag > 0)   # on valid input: no atomic at all
    b = tl.where(is_inf, _INF | (neg << 31), b)
    b = tl.where(is_nan | (sb == 255), _QNAN, b)
    b = tl.where(m, b, 0)                               # zero padding of a ragged block

    # MX quantization along DST_AXIS (as mx_quantize_kernel)
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    amax = _max_along(tl.where(a < _INF, a, 0), DST_AXIS)
    if AMAX_FLOOR != 0:                           # amax_floor (DeepSeek-V4): max(amax, floor)
        amax = tl.maximum(amax, AMAX_FLOOR)
    has_nan = _max_along(tl.where(a > _INF, 1, 0), DST_AXIS) > 0
    has_inf = _max_along(tl.where(a == _INF, 1, 0), DST_AXIS) > 0
    byte, s, nan_scale = _mx_scale_byte(amax, has_nan, has_inf, EL_EMAX, EL_MAXSIG, EL_EVENTHR,
                                        EL_MAXF32, SCALE_RULE, RCEIL_ANY_UP, RCEIL_LOG2,
                                        NAN_POISON, INF_MODE, SCALE_OVF_NAN)
    byte = byte.to(tl.uint8)
    if DST_AXIS == 0:
        tl.store(dscale_ptr + tl.program_id(0).to(tl.int64) * n_cols + cols, byte,
                 mask=cols < n_cols)
    else:
        tl.store(dscale_ptr + rows.to(tl.int64) * n_dblk + tl.program_id(1), byte,
                 mask=rows < n_rows)
    se = tl.where(s == -127, ZEXP, s)
    code = _encode(b, tl.expand_dims(se, DST_AXIS), EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS,
                   EL_MAXCODE, EL_SIGNBIT, EL_NAN, EL_INF, ROUNDING, OVERFLOW, SIGNED_ZERO,
                   FLUSH, INT8_FULL)
    if NAN_ELEM_MAX:            # nan_element='signed_max' (AMD gfx950): +-max normal, sign kept
        code = tl.where((b & 0x7FFFFFFF) > _INF, EL_MAXCODE | (((b >> 31) & 1) << EL_SIGNBIT),
                        code)
    if EL_NAN >= 0:
        fill = EL_NAN
    else:
        fill = 0
    code = tl.where(tl.expand_dims(nan_scale, DST_AXIS), fill, code)
    tl.store(out_ptr + offs, code.to(tl.uint8), mask=m)


# =========================================================================================
# constexprs, signatures, AOT specs
# =========================================================================================
_FP8 = {"e4m3": "mxfp8_e4m3", "e5m2": "mxfp8_e5m2"}


def _fp8_constexprs(fp8: str) -> dict:
    if fp8 not in _FP8:
        raise KernelUnsupported(f"fp8 element format {fp8!r}: use one of {', '.join(_FP8)}")
    el = element_constexprs(_FP8[fp8])
    return {"F8_MBITS": el["EL_MBITS"], "F8_EMIN": el["EL_EMIN"], "F8_BIAS": el["EL_BIAS"],
            "F8_SIGNBIT": el["EL_SIGNBIT"], "F8_NAN": el["EL_NAN"], "F8_INF": el["EL_INF"]}


def _profile_knobs(profile, fmt) -> tuple:
    """(Profile, constexprs) of a deterministic profile for format ``fmt``."""
    pr = get_profile(profile)
    if pr.rounding == "stochastic":
        raise KernelUnsupported(f"profile {pr.name!r}: stochastic rounding is not implemented by "
                                "the conversion kernels")
    f = get_format(fmt)
    pr.check_format(f)
    if f.is_nvfp4:
        raise KernelUnsupported("the conversion kernels take MX formats, not nvfp4")
    bs = pr.block_size or f.block_size
    if bs != 32:
        raise KernelUnsupported(f"profile {pr.name!r} block size {bs}: the conversion kernels "
                                "use 32-element MX blocks")
    return pr, profile_constexprs(pr, amax_floor=True, nan_element=True)


@memo_dict
def convert_constexprs(kernel: str, *, fmt="mxfp4", profile="ocp", fp8="e4m3",
                       dst_axis: int = 0, check: bool = True, tile: tuple | None = None) -> dict:
    """Every constexpr of ``KERNELS[kernel]`` (launch-size ones at their GPU defaults unless
    ``tile`` gives them)."""
    if kernel == "mxfp4_to_fp8":
        cb, bg = tile or (4, 16)
        f8 = _fp8_constexprs(fp8)
        return {"BLOCK": 32, "CB": cb, "BG": bg, "K": group_headroom(fp8), **f8,
                "CHECK": bool(check)}
    if kernel == "fp8_to_mxfp4":
        _, pk = _profile_knobs(profile, "mxfp4")
        el = element_constexprs("mxfp4")
        return {"BLOCK": 32, "BLOCK_ROWS": (tile or (64,))[0], "WHOLE_BLOCKS": True,
                **_fp8_constexprs(fp8),
                **{k: el[k] for k in ("EL_EMAX", "EL_MAXSIG", "EL_EVENTHR", "EL_MAXF32")},
                **pk}
    if kernel == "reblock":
        _, pk = _profile_knobs(profile, fmt)
        f = get_format(fmt)
        tr, tc = tile or ((32, 128) if dst_axis == 0 else (64, 32))
        return {"DST_AXIS": int(dst_axis), "TR": tr, "TC": tc, "SBLOCK": f.block_size,
                "CHECK": bool(check), "EL_BITS": int(f.element.bits),
                **element_constexprs(f), **pk}
    raise KeyError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")


ARG_TYPES = {
    "mxfp4_to_fp8": {"code_ptr": "*u8", "scale_ptr": "*u8", "out_ptr": "*u8",
                     "gscale_ptr": "*u8", "exact_ptr": "*u8", "status_ptr": "*i32",
                     "n_rows": "i32", "n_cols": "i32", "n_blk": "i32", "n_groups": "i32",
                     "bpg": "i32", "n_chunks": "i32"},
    "fp8_to_mxfp4": {"code_ptr": "*u8", "gscale_ptr": "*u8", "scale_ptr": "*u8",
                     "out_ptr": "*u8", "status_ptr": "*i32", "n_rows": "i32", "n_cols": "i32",
                     "n_blk": "i32", "n_groups": "i32", "glen": "i32"},
    "reblock": {"code_ptr": "*u8", "sscale_ptr": "*u8", "out_ptr": "*u8", "dscale_ptr": "*u8",
                "status_ptr": "*i32", "n_rows": "i32", "n_cols": "i32", "n_sblk": "i32",
                "n_dblk": "i32"},
}


def kernel_signature(kernel: str, constexprs: dict) -> dict:
    types = dict(ARG_TYPES[kernel])
    types.update({k: "constexpr" for k in constexprs})
    names = KERNELS[kernel].arg_names
    if set(names) != set(types):
        raise KeyError(f"{kernel}: arguments {sorted(set(names) ^ set(types))} are not "
                       "described by ARG_TYPES / the constexprs")
    return {k: types[k] for k in names}


def aot_specs():
    """(id, jitfn, signature, constexprs) for ahead-of-time compilation of every kernel."""
    combos = [("mxfp4_to_fp8", {"fp8": "e4m3"}), ("mxfp4_to_fp8", {"fp8": "e5m2"}),
              ("fp8_to_mxfp4", {"profile": "ocp"}),
              ("fp8_to_mxfp4", {"profile": "torchao_rceil"}),
              ("fp8_to_mxfp4", {"profile": "triton_kernels_round_up", "fp8": "e5m2"}),
              ("reblock", {"fmt": "mxfp4", "profile": "ocp", "dst_axis": 0}),
              ("reblock", {"fmt": "mxfp8_e4m3", "profile": "rceil", "dst_axis": 1}),
              ("reblock", {"fmt": "mxfp6_e3m2", "profile": "torchao_rceil", "dst_axis": 0})]
    out = []
    for kernel, kw in combos:
        ce = convert_constexprs(kernel, **kw)
        tag = "-".join(f"{v}" for v in kw.values())
        out.append((f"{kernel}-{tag}", KERNELS[kernel], kernel_signature(kernel, ce), ce))
    return out


KERNELS = {"mxfp4_to_fp8": mxfp4_to_fp8_kernel, "fp8_to_mxfp4": fp8_to_mxfp4_kernel,
           "reblock": reblock_kernel}

INTERPRETED = type(reblock_kernel).__name__ == "InterpretedFunction"


# =========================================================================================
# launchers
# =========================================================================================
def _u8(t, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ConvertInputError(f"{what} must be a torch tensor, got {type(t).__name__}")
    if t.dtype != torch.uint8:
        raise ConvertInputError(f"{what} must be uint8, got {t.dtype}")
    return t.contiguous()


def _rows2(t: torch.Tensor, what: str) -> torch.Tensor:
    if t.ndim == 0:
        raise ConvertInputError(f"{what} must have at least one dimension")
    return t.reshape(-1, t.shape[-1]) if t.ndim != 2 else t


def _group_len(group, n: int, multiple: int) -> int:
    if isinstance(group, str):
        if group != "row":
            raise ConvertGroupError(f"group={group!r}: use an int or 'row'")
        return max(n, 1)
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ConvertGroupError(f"group={group!r} must be a positive int or 'row'")
    if group % multiple:
        raise ConvertGroupError(f"group={group} is not a multiple of the MX block size "
                                f"{multiple}: every FP8 group must hold whole blocks")
    if group >= 2**30:
        raise ConvertGroupError(f"group={group} is too long for the kernels (< 2^30)")
    return group


def _check_size(n_el: int):
    if n_el >= 2**31 - 2**20:
        raise KernelUnsupported(f"{n_el} elements in one call: split below 2^31")


def _status_check(status: torch.Tensor, what: str):
    v = int(status.max().item()) if status.numel() else 0
    return v


def mxfp4_to_fp8(scales: torch.Tensor, codes: torch.Tensor, *, group=128, fp8: str = "e4m3",
                 check: bool = True, num_warps: int = 4, tile: tuple | None = None):
    """MXFP4 -> FP8 under one E8M0 byte per ``group`` elements (mxref.fp8fp4.mxfp4_to_fp8).

    codes: uint8 [..., n] E2M1 codes (one per element), scales: uint8 [..., ceil(n/32)] E8M0,
    blocks along the last axis; group: a multiple of 32 or ``"row"``. Returns
    (group_scales uint8 [..., ngroups], fp8 codes uint8 [..., n], exact bool [..., ngroups]).
    ``check`` verifies every code fits 4 bits (one device sync); ``check=False`` skips it and
    reads only the low 4 bits of each code.
    """
    codes, scales = _u8(codes, "codes"), _u8(scales, "scales")
    c2, s2 = _rows2(codes, "codes"), _rows2(scales, "scales")
    rows, n = c2.shape
    nblk = -(-n // 32)
    if tuple(scales.shape) != tuple(codes.shape[:-1]) + (nblk,) or scales.device != codes.device:
        raise ConvertInputError(f"scales {tuple(scales.shape)} do not fit codes "
                                f"{tuple(codes.shape)} with 32-element blocks along the last axis")
    _check_size(c2.numel())
    glen = _group_len(group, n, 32)
    ngroups = -(-n // glen)
    bpg = glen // 32 if not isinstance(group, str) else max(nblk, 1)
    ce = convert_constexprs("mxfp4_to_fp8", fp8=fp8, check=check)
    if tile is None:
        cb = min(triton.next_power_of_2(bpg), 32 if not INTERPRETED else 512)
        per_prog = 16384 if INTERPRETED else 2048
        bg = min(max(1, per_prog // (cb * 32)), triton.next_power_of_2(max(rows * ngroups, 1)))
    else:
        cb, bg = tile
    if cb & (cb - 1) or bg & (bg - 1) or cb < 1 or bg < 1:
        raise KernelUnsupported(f"tile {(cb, bg)} must be powers of two")
    ce["CB"], ce["BG"] = cb, bg
    dev = codes.device
    out = torch.empty((rows, n), dtype=torch.uint8, device=dev)
    gs = torch.empty((rows, ngroups), dtype=torch.uint8, device=dev)
    ex = torch.empty((rows, ngroups), dtype=torch.uint8, device=dev)
    status = torch.zeros(1, dtype=torch.int32, device=dev)
    if rows * ngroups:
        mxfp4_to_fp8_kernel[(triton.cdiv(rows * ngroups, bg),)](
            c2, s2, out, gs, ex, status, rows, n, nblk, ngroups, bpg, triton.cdiv(bpg, cb),
            num_warps=num_warps, **ce)
        if check and _status_check(status, "mxfp4_to_fp8"):
            raise ConvertInputError("mxfp4_to_fp8: a code does not fit e2m1 (4 bits); codes "
                                    "must be unpacked E2M1 codes 0..15")
    lead = tuple(codes.shape[:-1])
    return (gs.reshape(lead + (ngroups,)), out.reshape(codes.shape),
            ex.reshape(lead + (ngroups,)).bool())


def fp8_to_mxfp4(group_scales: torch.Tensor, codes: torch.Tensor, *, group=128,
                 profile="ocp", fp8: str = "e4m3", block_rows: int | None = None,
                 num_warps: int = 4):
    """FP8 codes with one E8M0 byte per ``group`` elements -> MXFP4 under ``profile``
    (mxref.fp8fp4.fp8_to_mxfp4), blocks of 32 along the last axis.

    codes: uint8 [..., n] FP8 codes, group_scales: uint8 [..., ceil(n/group)] (``"row"``: one
    per row). Returns (scales uint8 [..., ceil(n/32)], E2M1 codes uint8 [..., n]).
    """
    codes, group_scales = _u8(codes, "codes"), _u8(group_scales, "group_scales")
    pr = get_profile(profile)
    ce = convert_constexprs("fp8_to_mxfp4", profile=pr, fp8=fp8)
    c2, g2 = _rows2(codes, "codes"), _rows2(group_scales, "group_scales")
    rows, n = c2.shape
    glen = _group_len(group, n, 1)
    ngroups = -(-n // glen)
    if tuple(group_scales.shape) != tuple(codes.shape[:-1]) + (ngroups,) or \
            group_scales.device != codes.device:
        raise ConvertInputError(f"group_scales {tuple(group_scales.shape)} do not fit codes "
                                f"{tuple(codes.shape)} with group {group!r} along the last axis")
    _check_size(c2.numel())
    nblk = -(-n // 32)
    if n % 32 and pr.ragged == "error":
        raise KernelUnsupported(f"length {n} is not a multiple of 32 and profile {pr.name!r} "
                                "refuses ragged blocks")
    if block_rows is None:
        block_rows = min(1024, max(16, triton.next_power_of_2(max(rows * nblk, 1)))) \
            if INTERPRETED else 64
    if block_rows & (block_rows - 1):
        raise KernelUnsupported(f"block_rows={block_rows} is not a power of two")
    ce["BLOCK_ROWS"] = block_rows
    ce["WHOLE_BLOCKS"] = glen % 32 == 0          # every 32-block inside one group
    dev = codes.device
    out = torch.empty((rows, n), dtype=torch.uint8, device=dev)
    sc = torch.empty((rows, nblk), dtype=torch.uint8, device=dev)
    status = torch.zeros(1, dtype=torch.int32, device=dev)
    if rows * nblk:
        fp8_to_mxfp4_kernel[(triton.cdiv(rows * nblk, block_rows),)](
            c2, g2, sc, out, status, rows, n, nblk, ngroups, glen, num_warps=num_warps, **ce)
        if ce["RCEIL_LOG2"] and _status_check(status, "fp8_to_mxfp4"):
            raise ConvertScaleRangeError(
                f"profile {pr.name!r} defines its scale from an fp32 amax (float32 log2), but a "
                "block has an exact amax >= 2^128")
    return sc.reshape(tuple(codes.shape[:-1]) + (nblk,)), out.reshape(codes.shape)


def reblock(scales: torch.Tensor, codes: torch.Tensor, *, fmt: str, profile="ocp",
            axis: int = 0, check: bool = True, num_warps: int = 4, tile: tuple | None = None):
    """Re-block a 2-D MX tensor (codes [R, C] uint8, E8M0 scales [R, ceil(C/32)], blocks along
    axis 1) along ``axis`` under ``profile`` (mxref.fp8fp4.reblock): the quantization of the
    exactly decoded values. Returns (scales uint8: [ceil(R/32), C] for axis 0, [R, ceil(C/32)]
    for axis 1; codes uint8 [R, C]).

    ``check`` (one device sync) refuses codes wider than the element format and decoded values
    >= 2^128 (ReblockOverflowError, as the reference's DecodedOverflowError); ``check=False``
    skips both (such values would then be requantized as Inf).
    """
    codes, scales = _u8(codes, "codes"), _u8(scales, "scales")
    if codes.ndim != 2:
        raise ConvertInputError(f"reblock takes a 2-D tensor (rows x cols), got shape "
                                f"{tuple(codes.shape)}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -2 <= axis < 2:
        raise KernelUnsupported(f"axis {axis!r} is out of range for a 2-D tensor")
    ax = axis % 2
    f = get_format(fmt)
    pr = get_profile(profile)
    ce = convert_constexprs("reblock", fmt=f, profile=pr, dst_axis=ax, check=check, tile=tile)
    R, C = codes.shape
    ns = -(-C // f.block_size)
    if tuple(scales.shape) != (R, ns) or scales.device != codes.device:
        raise ConvertInputError(f"scales {tuple(scales.shape)} do not fit codes {(R, C)} with "
                                f"{f.block_size}-element blocks along axis 1")
    _check_size(codes.numel())
    nd = (R, C)[ax]
    if nd % 32 and pr.ragged == "error":
        raise KernelUnsupported(f"length {nd} along axis {ax} is not a multiple of 32 and "
                                f"profile {pr.name!r} refuses ragged blocks")
    ndb = -(-nd // 32)
    if tile is None and INTERPRETED:
        if ax == 0:
            ce["TC"] = min(512, max(32, triton.next_power_of_2(max(C, 1))))
        else:
            ce["TR"] = min(512, max(16, triton.next_power_of_2(max(R, 1))))
    tr, tc = ce["TR"], ce["TC"]
    if (ax == 0 and tr != 32) or (ax == 1 and tc != 32) or tr & (tr - 1) or tc & (tc - 1):
        raise KernelUnsupported(f"tile {(tr, tc)}: powers of two with 32 along axis {ax}")
    dev = codes.device
    out = torch.empty((R, C), dtype=torch.uint8, device=dev)
    dsc = torch.empty((ndb, C) if ax == 0 else (R, ndb), dtype=torch.uint8, device=dev)
    status = torch.zeros(1, dtype=torch.int32, device=dev)
    if R * C:
        reblock_kernel[(triton.cdiv(R, tr), triton.cdiv(C, tc))](
            codes, scales, out, dsc, status, R, C, ns, ndb if ax == 1 else 1,
            num_warps=num_warps, **ce)
        if check:
            v = _status_check(status, "reblock")
            if v & 2:
                raise ConvertInputError(f"reblock: a code does not fit {f.element.name} "
                                        f"({f.element.bits} bits)")
            if v & 1:
                raise ReblockOverflowError(
                    "reblock: an element decodes to a value >= 2^128, which fp32 cannot hold; "
                    "reblock refuses rather than requantize an Inf")
    return dsc, out


# the kernels hard-code E2M1 (mbits 1, emin 0, bias 1, sign bit 3, max code 7) and 32-blocks
if (E2M1.mbits, E2M1.emin, E2M1.bias) != (1, 0, 1) or FORMATS["mxfp4"].block_size != 32 \
        or element_constexprs("mxfp4")["EL_MAXCODE"] != 7:
    raise ImportError("mxref E2M1 no longer matches the constants of the conversion kernels")
