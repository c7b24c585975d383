"""Triton kernels for OCP MX and NVFP4 quantization, decided in the integer domain.

Every input is read as its bit pattern (fp32 as int32, bf16/fp16 as int16) and widened to fp32
bits with integer operations; scales and element codes are then chosen with integer compares,
shifts and (for NVFP4 and the float32-log2 RCEIL rule) int64 division. No float log2/exp2, no
float division and no FMA contraction can move a bit, so the same kernel is bit-exact on
NVIDIA, AMD and the Triton interpreter. The semantics are those of ``docs/semantics.md``;
format and profile knobs arrive as ``tl.constexpr`` parameters (see :func:`mx_constexprs`), so
each format x profile compiles to straight-line code without dead branches.

Kernels (one program = a tile of ``BLOCK_ROWS`` blocks of ``BLOCK`` elements):

* :func:`mx_quantize_kernel`: [rows, n] bits -> E8M0 scale bytes [rows, ceil(n/BLOCK)] and one
  unpacked uint8 element code per element; a ragged last block is zero padded.
* :func:`mx_dequantize_kernel`: codes + E8M0 bytes -> fp32 bits (code value x 2^(byte-127),
  one rounding: byte 0x00 is 2^-127, 0xFF is NaN, overflow is Inf).
* :func:`mx_convert_kernel`: element conversion alone at scale 2^0.
* :func:`nvfp4_amax_kernel`, :func:`nvfp4_tensor_scale_kernel`, :func:`nvfp4_quantize_kernel`:
  NVFP4 (E2M1, blocks of 16, E4M3 block scale, fp32 tensor scale), op orders ``exact``,
  ``te`` and ``torchao``.

The torch launchers below (``mx_quantize``, ``mx_dequantize``, ``mx_convert``,
``nvfp4_quantize``) take and return torch tensors; packing and scale layouts are torch code
(``pack_codes``, ``scale_layout``). Under ``TRITON_INTERPRET=1`` (set before this module is
imported: Triton decides at decoration time) the kernels run on CPU tensors in the interpreter.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from mxkernels._memo import memo_dict
from mxkernels.triton_common import (  # noqa: F401  (re-exported: kernel modules and tests import them from here)
    _bitlen32, _bitlen64, _block_poisoned, _e4m3_code_of_f32, _encode, _F32_2688, _F32_448,
    _f32_div, _F32_E4M3_TINY, _F32_INF, _F32_MAX, _f32_min_pos, _f32_mul, _F32_ONE, _f32_parts,
    _F32_QNAN, _F32_SIX, _false_like, _finish, _LN2_Q32, _max_along, _max_combine, _MAX_COMBINE,
    _mx_scale_byte, _mx_scale_finish, _normalize, _nvfp4_block_scales, _rceil_f32_log2,
    _mxt_amax, _mxt_element,
    _round_sig, _shared_exponent, _shared_exponent_normal, _widen_to_f32, element_constexprs,
    KernelUnsupported, profile_constexprs)

from mxref.formats import E4M3, FORMATS, get_format
from mxref.profiles import NVFP4_ORDERS, OVERFLOWS, ROUNDINGS, SIGNED_ZERO, get_profile

__all__ = ["mx_quantize", "mx_dequantize", "mx_convert", "nvfp4_quantize", "pack_codes",
           "scale_layout", "mx_constexprs", "element_constexprs", "profile_constexprs",
           "kernel_signature", "KernelUnsupported", "SRC_KINDS", "KERNELS", "ARG_TYPES"]

SRC_KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}


# =========================================================================================
# MX kernels
# =========================================================================================
@triton.jit
def _tile(n_rows, n_cols, n_blk, BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """This program's BLOCK_ROWS consecutive blocks of the flattened (row, block) order of a
    contiguous [n_rows, n_cols] array: block ids g (int32; the launchers keep n_rows * n_blk
    below 2^31), their validity, rows, element offsets (int64) and the element mask."""
    g = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    g_ok = g < n_rows * n_blk
    r = g // n_blk
    cols = ((g - r * n_blk) * BLOCK)[:, None] + tl.arange(0, BLOCK)[None, :]
    m = g_ok[:, None] & (cols < n_cols)
    offs = r.to(tl.int64)[:, None] * n_cols + cols
    return g, g_ok, r, offs, m


@triton.jit
def mx_quantize_kernel(
        x_ptr, scale_ptr, code_ptr, n_rows, n_cols, n_blk,
        SRC: tl.constexpr, BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_BIAS: tl.constexpr, EL_EMAX: tl.constexpr, EL_MAXCODE: tl.constexpr,
        EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
        NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr, SIGNED_ZERO: tl.constexpr,
        FLUSH: tl.constexpr, RCEIL_ANY_UP: tl.constexpr, SCALE_OVF_NAN: tl.constexpr,
        ZEXP: tl.constexpr, RCEIL_LOG2: tl.constexpr, INT8_FULL: tl.constexpr,
        AMAX_FLOOR: tl.constexpr, NAN_ELEM_MAX: tl.constexpr,
        LOG2_F32: tl.constexpr, ELEM_F32: tl.constexpr, ZERO_AMAX_MIN: tl.constexpr):
    """MX block quantization of a contiguous [n_rows, n_cols] bit-pattern array along axis 1.

    The program handles BLOCK_ROWS consecutive blocks of the flattened (row, block) order;
    scale bytes go to scale_ptr [n_rows, n_blk], element codes to code_ptr [n_rows, n_cols].
    """
    g, g_ok, _, offs, m = _tile(n_rows, n_cols, n_blk, BLOCK, BLOCK_ROWS)
    raw = tl.load(x_ptr + offs, mask=m, other=0)
    b = _widen_to_f32(raw, SRC)                   # masked lanes: +0 (zero padding)
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)

    # 1. classify: integer max over the finite magnitudes; NaN / Inf flags
    fin = a < _F32_INF
    amax = _max_along(tl.where(fin, a, 0), 1)
    if AMAX_FLOOR != 0:                           # amax_floor (DeepSeek-V4): max(amax, floor)
        amax = tl.maximum(amax, AMAX_FLOOR)
    has_nan = _max_along(tl.where(a > _F32_INF, 1, 0), 1) > 0
    has_inf = _max_along(tl.where(a == _F32_INF, 1, 0), 1) > 0
    if LOG2_F32 or ZERO_AMAX_MIN:                 # microxcaling torch: floor(fl32(log2 amax))
        amax = _mxt_amax(amax, LOG2_F32, ZERO_AMAX_MIN)
    # 2./3. the scale byte: NaN / Inf policy, scale rule, scale overflow
    byte, s, nan_scale = _mx_scale_byte(amax, has_nan, has_inf, EL_EMAX, EL_MAXSIG, EL_EVENTHR,
                                        EL_MAXF32, SCALE_RULE, RCEIL_ANY_UP, RCEIL_LOG2,
                                        NAN_POISON, INF_MODE, SCALE_OVF_NAN)
    tl.store(scale_ptr + g, byte.to(tl.uint8), mask=g_ok)

    # 4. elements at exponent s (byte 0x00: the profile's zero_scale_elem_exp)
    se = tl.where(s == -127, ZEXP, s)
    code = _encode(b, se[:, None], EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS, EL_MAXCODE,
                   EL_SIGNBIT, EL_NAN, EL_INF, ROUNDING, OVERFLOW, SIGNED_ZERO, FLUSH,
                   INT8_FULL)
    if ELEM_F32:                # microxcaling torch: floor(fl32(|A| * 2^k + 0.5)) on fl32(x / 2^s)
        code = _mxt_element(code, b, se[:, None], EL_IS_INT, EL_MBITS, EL_EMIN, EL_SIGNBIT)
    if NAN_ELEM_MAX:            # nan_element='signed_max' (AMD gfx950): +-max normal, sign kept
        code = tl.where(a > _F32_INF, EL_MAXCODE | (((b >> 31) & 1) << EL_SIGNBIT), code)
    if EL_NAN >= 0:
        fill = EL_NAN
    else:
        fill = 0
    code = tl.where(nan_scale[:, None], fill, code)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)


@triton.jit
def _element_value(c, EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
                   EL_BIAS: tl.constexpr, EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr,
                   EL_INF: tl.constexpr):
    """Decode element codes (int32): (neg, sig, exp2, is_nan, is_inf), value sig * 2^exp2."""
    if EL_IS_INT:
        k = tl.where(c >= 128, c - 256, c)
        neg = tl.where(k < 0, 1, 0)
        sig = tl.abs(k)
        exp2 = c * 0 - EL_MBITS
        is_nan = _false_like(c)
        is_inf = _false_like(c)
    else:
        neg = (c >> EL_SIGNBIT) & 1
        mag = c & ((1 << EL_SIGNBIT) - 1)
        e = mag >> EL_MBITS
        mant = mag & ((1 << EL_MBITS) - 1)
        sig = tl.where(e == 0, mant, mant | (1 << EL_MBITS))
        exp2 = tl.where(e == 0, EL_EMIN - EL_MBITS, e - (EL_BIAS + EL_MBITS))
        if EL_INF >= 0:
            is_inf = mag == EL_INF
            is_nan = mag > EL_INF
        elif EL_NAN >= 0:
            is_inf = _false_like(c)
            is_nan = mag == EL_NAN
        else:
            is_inf = _false_like(c)
            is_nan = _false_like(c)
    return neg, sig, exp2, is_nan, is_inf


@triton.jit
def _to_f32(neg, sig, exp2):
    """fp32 bits of (-1)^neg * sig * 2^exp2 for sig < 2^24 (RNE, overflow -> Inf)."""
    code, huge = _round_sig(tl.where(sig == 0, 1, sig), exp2, _false_like(sig), 23, -126, 127,
                            False, 0, False)
    code = tl.where(huge | (code >= _F32_INF), _F32_INF, code)
    code = tl.where(sig == 0, 0, code)
    return code | (neg << 31)


@triton.jit
def mx_dequantize_kernel(
        code_ptr, scale_ptr, out_ptr, n_rows, n_cols, n_blk,
        BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_BIAS: tl.constexpr, EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr,
        EL_INF: tl.constexpr):
    """codes [n_rows, n_cols] + E8M0 bytes [n_rows, n_blk] -> fp32 bits [n_rows, n_cols]."""
    g, g_ok, _, offs, m = _tile(n_rows, n_cols, n_blk, BLOCK, BLOCK_ROWS)
    c = tl.load(code_ptr + offs, mask=m, other=0).to(tl.int32)
    sb = tl.load(scale_ptr + g, mask=g_ok, other=0).to(tl.int32)
    neg, sig, exp2, is_nan, is_inf = _element_value(c, EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS,
                                                    EL_SIGNBIT, EL_NAN, EL_INF)
    bits = _to_f32(neg, sig, exp2 + (sb[:, None] - 127))
    bits = tl.where(is_inf, _F32_INF | (neg << 31), bits)
    bits = tl.where(is_nan | (sb[:, None] == 255), _F32_QNAN, bits)
    tl.store(out_ptr + offs, bits, mask=m)


@triton.jit
def mx_convert_kernel(
        x_ptr, code_ptr, n, SRC: tl.constexpr, BLOCK_N: tl.constexpr,
        EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_BIAS: tl.constexpr, EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr,
        EL_NAN: tl.constexpr, EL_INF: tl.constexpr, ROUNDING: tl.constexpr,
        OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr,
        INT8_FULL: tl.constexpr, NAN_ELEM_MAX: tl.constexpr):
    """Element conversion alone (scale 2^0) of n contiguous bit patterns."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = offs < n
    b = _widen_to_f32(tl.load(x_ptr + offs, mask=m, other=0), SRC)
    code = _encode(b, 0, EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS, EL_MAXCODE, EL_SIGNBIT,
                   EL_NAN, EL_INF, ROUNDING, OVERFLOW, SIGNED_ZERO, FLUSH, INT8_FULL)
    if NAN_ELEM_MAX:            # nan_element='signed_max' (AMD gfx950): +-max normal, sign kept
        code = tl.where((b & 0x7FFFFFFF) > _F32_INF, EL_MAXCODE | (((b >> 31) & 1) << EL_SIGNBIT),
                        code)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)


# =========================================================================================
# NVFP4
# =========================================================================================
@triton.jit
def nvfp4_amax_kernel(x_ptr, amax_ptr, n_per_tensor, SRC: tl.constexpr, BLOCK_N: tl.constexpr,
                      WITH_INF: tl.constexpr, FLUSH: tl.constexpr):
    """Per-tensor global amax (fp32 bits, finite values; Inf too when WITH_INF) by atomic max;
    x is [T, n_per_tensor] contiguous, 1-D grid T * cdiv(n_per_tensor, BLOCK_N), amax zeroed."""
    n_chunks = (n_per_tensor + (BLOCK_N - 1)) // BLOCK_N
    t = tl.program_id(0) // n_chunks
    offs = (tl.program_id(0) - t * n_chunks).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = offs < n_per_tensor
    b = _widen_to_f32(tl.load(x_ptr + t.to(tl.int64) * n_per_tensor + offs, mask=m, other=0),
                      SRC)
    tl.atomic_max(amax_ptr + t, _max_along(_nvfp4_amax_lanes(b & 0x7FFFFFFF, WITH_INF, FLUSH), 0))


@triton.jit
def _nvfp4_amax_lanes(a, WITH_INF: tl.constexpr, FLUSH: tl.constexpr):
    """The magnitudes ``a`` as the NVFP4 tensor amax takes them: finite values (and Inf with
    WITH_INF), flushed subnormals with FLUSH; the others 0."""
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    if WITH_INF:
        keep = a <= _F32_INF
    else:
        keep = a < _F32_INF
    return tl.where(keep, a, 0)


@triton.jit
def nvfp4_tensor_scale_kernel(amax_ptr, consts_ptr, n_t, ORDER: tl.constexpr,
                              TWO_LEVEL: tl.constexpr, BLOCK_T: tl.constexpr):
    """Per tensor, fp32 bits (T, S_enc, S_enc/6) -> consts [n_t, 3]; T is the decode-side
    tensor scale (dequant = e2m1 * e4m3 * T); S_enc and S_enc/6 only for the te order."""
    offs = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    m = offs < n_t
    amax = tl.load(amax_ptr + offs, mask=m, other=0)
    t, s_enc, sc6 = _nvfp4_tensor_consts(amax, ORDER, TWO_LEVEL)
    tl.store(consts_ptr + offs * 3, t, mask=m)
    tl.store(consts_ptr + offs * 3 + 1, s_enc, mask=m)
    tl.store(consts_ptr + offs * 3 + 2, sc6, mask=m)


@triton.jit
def _nvfp4_tensor_consts(amax, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr):
    """(T, S_enc, S_enc / 6) as fp32 bits of the tensor amaxes ``amax`` (fp32 bits): T is the
    decode-side tensor scale; S_enc and S_enc / 6 only for the te order (0 otherwise)."""
    one = tl.full(amax.shape, _F32_ONE, tl.int32)
    sixth = _f32_div(one, tl.full(amax.shape, _F32_SIX, tl.int32))
    if not TWO_LEVEL:
        t = one
        s_enc = one
        sc6 = sixth
    elif ORDER == 1:       # te: S_enc = min(2688 / amax, FLT_MAX); 1 if amax or S_enc is 0
        s_enc = _f32_min_pos(_f32_div(tl.full(amax.shape, _F32_2688, tl.int32), amax),
                             tl.full(amax.shape, _F32_MAX, tl.int32))
        s_enc = tl.where((amax == 0) | (s_enc == 0), one, s_enc)
        t = _f32_div(one, s_enc)
        sc6 = _f32_mul(s_enc, sixth)
    else:                  # exact / torchao: T = fl(amax / 2688)
        t = _f32_div(amax, tl.full(amax.shape, _F32_2688, tl.int32))
        if ORDER == 0:
            t = tl.where(amax == 0, one, tl.where(t == 0, 1, t))
        s_enc = t * 0
        sc6 = t * 0
    return t, s_enc, sc6


@triton.jit
def _nvfp4_exact_quotient(a, sc, t, SHIFT: tl.constexpr):
    """Exact order: |x| / (S T) for the magnitudes ``a`` [BLOCK_ROWS, 16] and their blocks'
    E4M3 codes ``sc``, as (q int64, exp2, sticky): x's normalized 24-bit significand shifted
    left by SHIFT over the E4M3 x fp32 significands (< 2^28). SHIFT 36 leaves >= 31 bits in q
    (enough for nearest rounding with the sticky bit); 38 leaves >= 34, so >= 32 lie below
    the E2M1 quantum, as stochastic rounding's f needs (mxref._kernels.element_quotient).
    Elements with a == 0 or S == 0 give q = 1: the caller writes zeros there."""
    _, ss, es, _, _ = _element_value(sc, False, 3, -6, 7, 7, 0x7F, -1)
    sx, ex = _normalize(a)
    st, et = _f32_parts(t)
    den = (ss * st).to(tl.int64)[:, None]
    num = sx.to(tl.int64) << SHIFT
    q = num // tl.where(den == 0, 1, den)
    sticky = (num - q * den) != 0
    return tl.where(a == 0, 1, q), ex - SHIFT - 23 - (es + et)[:, None], sticky


@triton.jit
def _nvfp4_cast_input(b, sc, t, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr):
    """te and torchao orders: the fp32 bits entering the E2M1 cast of the elements ``b``
    [BLOCK_ROWS, 16] (their blocks' E4M3 codes ``sc``, tensor scales ``t``):
    fl(x * min(fl(1 / fl(S T)), FLT_MAX)) (te) or clamp(fl(x * fl(fl(1 / T) / S)), -6, 6)
    (torchao 0.18, the reciprocal of the combined scale)."""
    s_neg, ss, es, s_nan, _ = _element_value(sc, False, 3, -6, 7, 7, 0x7F, -1)
    sval = tl.where(s_nan, _F32_QNAN, _to_f32(s_neg, ss, es))
    if ORDER == 1:
        inv = _f32_min_pos(_f32_div(tl.full(sval.shape, _F32_ONE, tl.int32),
                                    _f32_mul(sval, t)),
                           tl.full(sval.shape, _F32_MAX, tl.int32))
        y = _f32_mul(b, inv[:, None])
    else:
        one = tl.full(sval.shape, _F32_ONE, tl.int32)
        if TWO_LEVEL:
            recip = _f32_div(_f32_div(one, t), sval)
        else:
            recip = _f32_div(one, sval)
        if ORDER == 3:     # triton_kernels: quant_scale = where(S == 0, 0, fl(1 / S))
            recip = tl.where(sc == 0, 0, recip)
        y = _f32_mul(b, recip[:, None])
        ay = y & 0x7FFFFFFF
        y = tl.where((ay <= _F32_INF) & (ay > _F32_SIX), (y & -2147483648) | _F32_SIX, y)
    return y


@triton.jit
def nvfp4_quantize_kernel(
        x_ptr, consts_ptr, scale_ptr, code_ptr, n_rows, n_cols, n_blk, rows_per_tensor,
        SRC: tl.constexpr, BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr, SCALE_MIN_TINY: tl.constexpr,
        ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr, NAN_POISON: tl.constexpr,
        INF_POISON: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr):
    """NVFP4 blocks of a contiguous [n_rows, n_cols] array (tensor t = row // rows_per_tensor,
    its constants at consts[t]): E4M3 block scales [n_rows, n_blk] and E2M1 codes.
    (Stochastic rounding: triton_sr.nvfp4_quantize_sr_kernel, the same helpers.)"""
    g, g_ok, r, offs, m = _tile(n_rows, n_cols, n_blk, BLOCK, BLOCK_ROWS)
    b = _widen_to_f32(tl.load(x_ptr + offs, mask=m, other=0), SRC)
    a = b & 0x7FFFFFFF
    if FLUSH:                        # amax and the exact order see flushed inputs
        a = tl.where(a < 0x800000, 0, a)
    tix = r // rows_per_tensor
    t = tl.load(consts_ptr + tix * 3, mask=g_ok, other=_F32_ONE)
    sc6 = tl.load(consts_ptr + tix * 3 + 2, mask=g_ok, other=0)

    sc, poison = _nvfp4_block_scales(a, t, sc6, NAN_POISON, INF_POISON, ORDER, TWO_LEVEL,
                                     SCALE_MIN_TINY)
    tl.store(scale_ptr + g, tl.where(poison, 0x7F, sc).to(tl.uint8), mask=g_ok)

    code = _nvfp4_codes(b, a, sc, t, ORDER, TWO_LEVEL, ROUNDING, OVERFLOW, SIGNED_ZERO, FLUSH)
    code = tl.where(poison[:, None], 0, code)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)


@triton.jit
def _nvfp4_codes(b, a, sc, t, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr,
                 ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr,
                 FLUSH: tl.constexpr):
    """E2M1 codes (before poisoning) of the fp32 bits b / magnitudes a [BLOCK_ROWS, 16] of
    blocks with E4M3 codes sc and tensor scales t, by the profile's op order (RNE or another
    deterministic rounding)."""
    if ORDER == 0:     # E2M1_round(x / (S T)), one rounding
        q, e, sticky = _nvfp4_exact_quotient(a, sc, t, 36)
        code, huge = _round_sig(q, e, sticky, 1, 0, 1, False, ROUNDING, False)
        code = tl.where((a == 0) | (sc[:, None] == 0), 0, code)
        code = _finish(code, huge, (b >> 31) & 1, a, False, 7, 3, -1, -1, OVERFLOW,
                       SIGNED_ZERO, False)
    else:
        y = _nvfp4_cast_input(b, sc, t, ORDER, TWO_LEVEL)
        code = _encode(y, 0, False, 1, 0, 1, 7, 3, -1, -1, ROUNDING, OVERFLOW, SIGNED_ZERO,
                       FLUSH, False)
    return code


# Runtime (non-constexpr) arguments of each kernel as Triton signature types, for ahead-of-time
# compilation (tests/test_triton_aot.py); "SRC" is the source bit-pattern pointer, *i32 for
# float32 and *i16 for bfloat16/float16.
ARG_TYPES = {
    "mx_quantize": {"x_ptr": "SRC", "scale_ptr": "*u8", "code_ptr": "*u8", "n_rows": "i32",
                    "n_cols": "i32", "n_blk": "i32"},
    "mx_dequantize": {"code_ptr": "*u8", "scale_ptr": "*u8", "out_ptr": "*i32", "n_rows": "i32",
                      "n_cols": "i32", "n_blk": "i32"},
    "mx_convert": {"x_ptr": "SRC", "code_ptr": "*u8", "n": "i32"},
    "nvfp4_amax": {"x_ptr": "SRC", "amax_ptr": "*i32", "n_per_tensor": "i32"},
    "nvfp4_tensor_scale": {"amax_ptr": "*i32", "consts_ptr": "*i32", "n_t": "i32"},
    "nvfp4_quantize": {"x_ptr": "SRC", "consts_ptr": "*i32", "scale_ptr": "*u8",
                       "code_ptr": "*u8", "n_rows": "i32", "n_cols": "i32", "n_blk": "i32",
                       "rows_per_tensor": "i32"},
}


def kernel_signature(kernel: str, src_dtype: str = "float32", constexprs: dict | None = None):
    """(signature, constexprs) for ``triton.compiler.ASTSource``: every argument of the
    kernel in order, runtime ones typed, constexpr ones as "constexpr"."""
    ce = mx_constexprs(kernel, "nvfp4" if kernel.startswith("nvfp4") else "mxfp8_e4m3",
                       "ocp", src_dtype) if constexprs is None else constexprs
    src = "*i32" if src_dtype == "float32" else "*i16"
    types = {k: (src if v == "SRC" else v) for k, v in ARG_TYPES[kernel].items()}
    types.update({k: "constexpr" for k in ce})
    names = KERNELS[kernel].arg_names
    if set(names) != set(types):
        raise KeyError(f"{kernel}: arguments {sorted(set(names) ^ set(types))} are not "
                       "described by ARG_TYPES / the constexprs")
    return {k: types[k] for k in names}, ce


KERNELS = {
    "mx_quantize": mx_quantize_kernel,
    "mx_dequantize": mx_dequantize_kernel,
    "mx_convert": mx_convert_kernel,
    "nvfp4_amax": nvfp4_amax_kernel,
    "nvfp4_tensor_scale": nvfp4_tensor_scale_kernel,
    "nvfp4_quantize": nvfp4_quantize_kernel,
}


_ENCODE_KEYS = ("EL_IS_INT", "EL_MBITS", "EL_EMIN", "EL_BIAS", "EL_MAXCODE", "EL_SIGNBIT",
                "EL_NAN", "EL_INF", "ROUNDING", "OVERFLOW", "SIGNED_ZERO", "FLUSH", "INT8_FULL")
_DEQUANT_KEYS = ("EL_IS_INT", "EL_MBITS", "EL_EMIN", "EL_BIAS", "EL_SIGNBIT", "EL_NAN",
                 "EL_INF")


@memo_dict
def mx_constexprs(kernel: str, fmt, profile="ocp", src_dtype="float32",
                  block_rows: int | None = None) -> dict:
    """Every constexpr of ``KERNELS[kernel]`` for one format/profile/source dtype."""
    f = get_format(fmt)
    pr = get_profile(profile)
    if kernel.startswith("nvfp4"):
        if not f.is_nvfp4:
            raise KernelUnsupported(f"{kernel} is for nvfp4, not {f.name}")
        if pr.rounding == "stochastic":
            raise KernelUnsupported(f"profile {pr.name!r}: stochastic rounding is not "
                                    "implemented by the Triton kernels")
        if pr.nvfp4_amax_scope != "tensor" or pr.nvfp4_tile_2d:
            raise KernelUnsupported(
                f"profile {pr.name!r}: the Triton NVFP4 kernels implement one tensor scale "
                "per tensor and 1x16 blocks; nvfp4_amax_scope='row' / nvfp4_tile_2d are not "
                "implemented")
        if kernel == "nvfp4_amax":
            return {"SRC": _src_kind(src_dtype), "BLOCK_N": 1024,
                    "WITH_INF": pr.inf_in_block != "poison",
                    "FLUSH": bool(pr.flush_fp32_subnormals)}
        if kernel == "nvfp4_tensor_scale":
            return {"ORDER": NVFP4_ORDERS.index(pr.nvfp4_order),
                    "TWO_LEVEL": bool(pr.nvfp4_tensor_scale), "BLOCK_T": 64}
        return {"SRC": _src_kind(src_dtype), "BLOCK": 16, "BLOCK_ROWS": block_rows or 64,
                "ORDER": NVFP4_ORDERS.index(pr.nvfp4_order),
                "TWO_LEVEL": bool(pr.nvfp4_tensor_scale),
                "SCALE_MIN_TINY": pr.nvfp4_scale_min == "tiny",
                "ROUNDING": ROUNDINGS.index(pr.rounding), "OVERFLOW": OVERFLOWS.index(pr.overflow),
                "NAN_POISON": pr.nan_in_block == "poison",
                "INF_POISON": pr.inf_in_block == "poison",
                "SIGNED_ZERO": SIGNED_ZERO.index(pr.signed_zero),
                "FLUSH": bool(pr.flush_fp32_subnormals)}
    if f.is_nvfp4:
        raise KernelUnsupported(f"{kernel} is for MX formats; nvfp4 has its own kernels")
    el = element_constexprs(f)
    pk = profile_constexprs(pr, amax_floor=True, nan_element=True,
                            mxt=kernel in ("mx_quantize", "mx_dequantize"))
    if kernel == "mx_quantize":
        if pr.source_dtypes is not None and src_dtype not in pr.source_dtypes:
            raise KernelUnsupported(f"profile {pr.name!r} is defined only for "
                                    f"{', '.join(pr.source_dtypes)} sources, not {src_dtype}")
        return {"SRC": _src_kind(src_dtype), "BLOCK": _block_size(f, pr),
                "BLOCK_ROWS": block_rows or 64, **el, **pk}
    if kernel == "mx_convert":
        both = {**el, **pk}
        return {"SRC": _src_kind(src_dtype), "BLOCK_N": 1024,
                **{k: both[k] for k in _ENCODE_KEYS}, "NAN_ELEM_MAX": both["NAN_ELEM_MAX"]}
    if kernel == "mx_dequantize":
        return {"BLOCK": _block_size(f, pr), "BLOCK_ROWS": block_rows or 64,
                **{k: el[k] for k in _DEQUANT_KEYS}}
    raise KeyError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")


def _src_kind(src_dtype) -> int:
    if src_dtype not in SRC_KINDS:
        raise KernelUnsupported(f"source dtype {src_dtype!r} is not one of {tuple(SRC_KINDS)}")
    return SRC_KINDS[src_dtype]


def _block_size(f, pr) -> int:
    bs = pr.block_size or f.block_size
    if bs & (bs - 1) or not 2 <= bs <= 1024:
        raise KernelUnsupported(f"block size {bs} is not a power of two in [2, 1024]")
    return bs


# =========================================================================================
# torch launchers
# =========================================================================================
# Interpreted kernels cost per program, not per element: give each program many blocks.
INTERPRETED = type(mx_quantize_kernel).__name__ == "InterpretedFunction"
GPU_BLOCK_ROWS = 64


def _auto_block_rows(n_blocks: int, block_rows: int | None) -> int:
    if n_blocks >= 2**31 - 2**20:
        raise KernelUnsupported(f"{n_blocks} blocks in one call: split the tensor below 2^31 "
                                "blocks")
    if block_rows is not None:
        if block_rows < 1 or block_rows & (block_rows - 1):
            raise KernelUnsupported(f"block_rows={block_rows} is not a power of two")
        return block_rows
    if not INTERPRETED:
        return GPU_BLOCK_ROWS
    return min(1024, max(16, triton.next_power_of_2(max(n_blocks, 1))))

_TORCH_SRC = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _as_bits(x: torch.Tensor, src_dtype: str | None):
    """(int32/int16 bit-pattern tensor, src_dtype name) of a float or bit-pattern tensor."""
    if x.dtype in _TORCH_SRC:
        name = _TORCH_SRC[x.dtype]
        if src_dtype is not None and src_dtype != name:
            raise KernelUnsupported(f"{x.dtype} tensor passed with src_dtype={src_dtype!r}")
        return x.view(torch.int32 if name == "float32" else torch.int16), name
    if src_dtype not in SRC_KINDS:
        raise KernelUnsupported(
            f"tensor of dtype {x.dtype}: pass float32/bfloat16/float16, or bit patterns "
            f"(int32/uint32 for float32, int16/uint16 for bfloat16/float16) with src_dtype")
    width = 4 if src_dtype == "float32" else 2
    if x.element_size() != width or x.is_floating_point() or x.is_complex():
        raise KernelUnsupported(f"{x.dtype} is not a {8 * width}-bit pattern of {src_dtype}")
    return x.view(torch.int32 if width == 4 else torch.int16), src_dtype


def _rows_view(x: torch.Tensor, axis: int):
    """Contiguous [rows, n] view with ``axis`` moved last, and the moved shape."""
    moved = x.movedim(axis, -1)
    shape = tuple(moved.shape)
    n = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return moved.contiguous().reshape(rows, n), shape


def _norm_axis(axis: int, ndim: int) -> int:
    if ndim == 0:
        raise KernelUnsupported("cannot block a 0-d tensor")
    if not -ndim <= axis < ndim:
        raise KernelUnsupported(f"axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def mx_quantize(x: torch.Tensor, fmt: str, profile="ocp", axis: int = -1,
                src_dtype: str | None = None, block_rows: int | None = None):
    """MX quantization along ``axis``: returns (scales uint8, codes uint8) on x's device.

    ``scales`` has x's shape with ``axis`` reduced to ceil(n / 32); ``codes`` has x's shape
    (one unpacked code per element). x: float32/bfloat16/float16, or bit patterns with
    ``src_dtype``.
    """
    bits, src = _as_bits(x, src_dtype)
    ce = mx_constexprs("mx_quantize", fmt, profile, src)
    ax = _norm_axis(axis, bits.ndim)
    x2, moved = _rows_view(bits, ax)
    rows, n = x2.shape
    bs = ce["BLOCK"]
    nblk = -(-n // bs)
    if n % bs and get_profile(profile).ragged == "error":
        raise KernelUnsupported(f"length {n} is not a multiple of block size {bs} and profile "
                                f"{get_profile(profile).name!r} refuses ragged blocks")
    ce["BLOCK_ROWS"] = _auto_block_rows(rows * nblk, block_rows)
    codes = torch.empty((rows, n), dtype=torch.uint8, device=x.device)
    scales = torch.empty((rows, nblk), dtype=torch.uint8, device=x.device)
    if rows * nblk:
        grid = (triton.cdiv(rows * nblk, ce["BLOCK_ROWS"]),)
        mx_quantize_kernel[grid](x2, scales, codes, rows, n, nblk, **ce)
    codes = codes.reshape(moved).movedim(-1, ax).contiguous()
    scales = scales.reshape(moved[:-1] + (nblk,)).movedim(-1, ax).contiguous()
    return scales, codes


def mx_dequantize(scales: torch.Tensor, codes: torch.Tensor, fmt: str, profile="ocp",
                  axis: int = -1, block_rows: int | None = None) -> torch.Tensor:
    """Decode codes x 2^(scale - 127) to float32 (one rounding; 0xFF -> NaN)."""
    if codes.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise KernelUnsupported("codes and scales must be uint8 tensors")
    ce = mx_constexprs("mx_dequantize", fmt, profile)
    ax = _norm_axis(axis, codes.ndim)
    c2, moved = _rows_view(codes, ax)
    rows, n = c2.shape
    bs = ce["BLOCK"]
    nblk = -(-n // bs)
    ce["BLOCK_ROWS"] = _auto_block_rows(rows * nblk, block_rows)
    s2, smoved = _rows_view(scales, ax)
    if tuple(smoved) != tuple(moved[:-1]) + (nblk,):
        raise KernelUnsupported(f"scales shape {tuple(scales.shape)} does not fit codes "
                                f"{tuple(codes.shape)} with block {bs} along axis {ax}")
    out = torch.empty((rows, n), dtype=torch.int32, device=codes.device)
    if rows * nblk:
        grid = (triton.cdiv(rows * nblk, ce["BLOCK_ROWS"]),)
        mx_dequantize_kernel[grid](c2, s2, out, rows, n, nblk, **ce)
    return out.reshape(moved).movedim(-1, ax).contiguous().view(torch.float32)


def mx_convert(x: torch.Tensor, fmt: str, profile="ocp", src_dtype: str | None = None):
    """Element codes of x at scale 2^0 (uint8, x's shape)."""
    bits, src = _as_bits(x, src_dtype)
    ce = mx_constexprs("mx_convert", fmt, profile, src)
    flat = bits.contiguous().reshape(-1)
    out = torch.empty(flat.shape, dtype=torch.uint8, device=x.device)
    if INTERPRETED:
        ce["BLOCK_N"] = min(32768, max(1024, triton.next_power_of_2(flat.numel())))
    if flat.numel():
        mx_convert_kernel[(triton.cdiv(flat.numel(), ce["BLOCK_N"]),)](
            flat, out, flat.numel(), **ce)
    return out.reshape(bits.shape)


# triton_train_nvfp4 puts its one-tensor launcher here when it is imported (the copy of each
# kind binds its own): nvfp4_quantize takes it for one tensor whose C is a multiple of 16
NVFP4_ROWS: list = [None]


def nvfp4_quantize(x: torch.Tensor, profile="ocp", src_dtype: str | None = None,
                   block_rows: int | None = None):
    """NVFP4 of a [T, ..., C] tensor: T independent tensors (each with its own global amax),
    blocks of 16 along the last axis. Returns (scales uint8 [T, ..., ceil(C/16)] E4M3 codes,
    codes uint8 like x, tensor_scale float32 [T]: dequant = e2m1 * e4m3 * tensor_scale).

    One tensor (T = 1) with C a multiple of 16 and no block_rows goes through
    ``triton_train_nvfp4.nvfp4_quantize_rows`` (the training launch: an amax pass over tiles,
    then the rows with codes and no values) where its profile is supported there; otherwise
    (and for T > 1) the amax, tensor-scale and block kernels below."""
    bits, src = _as_bits(x, src_dtype)
    pr = get_profile(profile)
    pr.check_format(FORMATS["nvfp4"])
    if pr.nvfp4_amax_scope != "tensor" or pr.nvfp4_tile_2d:
        raise KernelUnsupported(
            f"profile {pr.name!r}: the Triton NVFP4 kernels implement one tensor scale per "
            "tensor and 1x16 blocks; nvfp4_amax_scope='row' / nvfp4_tile_2d are not implemented")
    if bits.ndim < 2:
        raise KernelUnsupported("nvfp4_quantize takes [T, ..., C]: T tensors, blocks along C")
    if NVFP4_ROWS[0] is not None and block_rows is None and bits.shape[0] == 1 and \
            bits.numel() and bits.shape[-1] % 16 == 0:
        out = NVFP4_ROWS[0](bits, src, profile)
        if out is not None:
            return out
    ce_amax = mx_constexprs("nvfp4_amax", "nvfp4", pr, src)
    ce_ts = mx_constexprs("nvfp4_tensor_scale", "nvfp4", pr, src)
    ce = mx_constexprs("nvfp4_quantize", "nvfp4", pr, src)
    n_t = bits.shape[0]
    xc = bits.contiguous()
    per_tensor = xc.numel() // n_t if n_t else 0
    n = bits.shape[-1]
    rows = xc.numel() // n if n else 0
    rows_per_tensor = rows // n_t if n_t else 0
    nblk = -(-n // 16)
    ce["BLOCK_ROWS"] = _auto_block_rows(rows * nblk, block_rows)
    consts, scales, codes, ready = nvfp4_outputs(xc, n_t, per_tensor, nblk, ce_amax, ce_ts)
    if ready and rows * nblk:
        nvfp4_quantize_kernel[(triton.cdiv(rows * nblk, ce["BLOCK_ROWS"]),)](
            xc.reshape(rows, n), consts, scales, codes, rows, n, nblk, rows_per_tensor, **ce)
    return scales, codes, consts[:, 0].contiguous().view(torch.float32)


def nvfp4_outputs(xc: torch.Tensor, n_t: int, per_tensor: int, nblk: int, ce_amax: dict,
                  ce_ts: dict):
    """The per-tensor stage shared by the NVFP4 launchers (RNE and SR): allocates
    (consts int32 [n_t, 3], scales, codes) for xc [T, ..., C] and runs the amax and
    tensor-scale kernels. ``ready``: the quantize kernel has tensors to run on."""
    dev = xc.device
    consts = torch.zeros((n_t, 3), dtype=torch.int32, device=dev)
    codes = torch.empty(tuple(xc.shape), dtype=torch.uint8, device=dev)
    scales = torch.empty(tuple(xc.shape[:-1]) + (nblk,), dtype=torch.uint8, device=dev)
    if n_t and not per_tensor:
        consts[:, 0] = 0x3F800000     # empty tensors: T = 1 (mxref.quantize), any op order
        return consts, scales, codes, False
    if n_t:
        amax = torch.zeros(n_t, dtype=torch.int32, device=dev)
        nvfp4_amax_kernel[(n_t * triton.cdiv(per_tensor, ce_amax["BLOCK_N"]),)](
            xc.reshape(n_t, per_tensor), amax, per_tensor, **ce_amax)
        nvfp4_tensor_scale_kernel[(triton.cdiv(n_t, ce_ts["BLOCK_T"]),)](
            amax, consts, n_t, **ce_ts)
    return consts, scales, codes, bool(n_t)


# ---- packing and scale layouts (torch; see mxref/layouts.py for the conventions) ----------
def pack_codes(codes: torch.Tensor, fmt: str) -> torch.Tensor:
    """Pack uint8 codes along the last axis: FP4 two per byte (element 0 in the low nibble),
    FP6 four per three bytes (little-endian 24-bit words), FP8/INT8 unchanged."""
    bits = get_format(fmt).element.bits
    c = codes.to(torch.uint8)
    n = c.shape[-1]
    if bits == 8:
        return c.clone()
    if bits == 4:
        c = torch.nn.functional.pad(c, (0, (-n) % 2)) & 0xF
        return c[..., 0::2] | (c[..., 1::2] << 4)
    if bits == 6:
        c = (torch.nn.functional.pad(c, (0, (-n) % 4)) & 0x3F).to(torch.int32)
        w = c[..., 0::4] | (c[..., 1::4] << 6) | (c[..., 2::4] << 12) | (c[..., 3::4] << 18)
        out = torch.stack([w & 0xFF, (w >> 8) & 0xFF, (w >> 16) & 0xFF], dim=-1)
        return out.reshape(*w.shape[:-1], w.shape[-1] * 3).to(torch.uint8)
    raise KernelUnsupported(f"no packing for {bits}-bit elements")


def scale_layout(scales: torch.Tensor, layout: str) -> torch.Tensor:
    """[R, C] uint8 scales -> 1-D bytes in ``cublas`` (128x4 tiles, offset
    (r%32)*16 + (r//32)*4 + c inside each 512-byte tile) or ``amd`` (AITER e8m0_shuffle) order."""
    if scales.ndim != 2:
        raise KernelUnsupported(f"scale layouts take [rows, cols], got {tuple(scales.shape)}")
    rows, cols = scales.shape
    if layout == "cublas":
        pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
        p = torch.nn.functional.pad(scales, (0, pc - cols, 0, pr - rows))
        t = p.reshape(pr // 128, 4, 32, pc // 4, 4).permute(0, 3, 2, 1, 4)
    elif layout == "amd":
        pr, pc = -(-rows // 256) * 256, -(-cols // 8) * 8
        p = torch.nn.functional.pad(scales, (0, pc - cols, 0, pr - rows))
        t = p.reshape(pr // 32, 2, 16, pc // 8, 2, 4).permute(0, 3, 5, 2, 4, 1)
    else:
        raise KernelUnsupported(f"unknown scale layout {layout!r}; use cublas or amd")
    return t.contiguous().reshape(-1)


# the NVFP4 kernels hard-code E4M3 (mbits 3, emin -6, bias 7, max 0x7E, NaN 0x7F) and E2M1
if (E4M3.mbits, E4M3.emin, E4M3.bias, E4M3.max_code, E4M3.nan_code) != (3, -6, 7, 0x7E, 0x7F) \
        or element_constexprs("nvfp4")["EL_MAXCODE"] != 7:
    raise ImportError("mxref.formats E4M3/E2M1 no longer match the NVFP4 kernel constants")
