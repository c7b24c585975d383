"""Stochastic-rounding MX quantization and the documented Philox stream, as Triton kernels.

The rule (docs/semantics.md): an element whose exact scaled magnitude is ``n`` quanta rounds up
iff ``f + r >= 2^32``, with ``f = floor(frac(n) * 2^32)`` (the fraction truncated to 32 bits)
and ``r`` a uint32 word. The words come either from the caller (``rbits``, one per element) or
from the stream of :func:`mxref.quantize.random_bits`: element ``i`` of the input in C order
gets the first word of Philox4x32-10 with counter ``((offset + i) mod 2^32, 0, 0, 0)`` and key
``(seed_lo, seed_hi)``, i.e. ``triton.language.randint(seed, offset + i)``. The Philox rounds
are written out here (:func:`_philox_word0`), not taken from ``triton.language.random``, so
the kernels run in the private interpreter copies the verify backend loads.

Everything else (classification, shared exponent, NaN/Inf policies, overflow, signed zeros)
is the generic MX quantization of :mod:`mxkernels.triton_quant`, whose helpers are reused;
only the rounding step differs (:func:`_round_sig_sr`, integers only, as
``mxref._kernels.round_magnitude`` in its stochastic branch).

NVFP4 (:func:`nvfp4_quantize_sr_kernel`) reuses triton_quant's NVFP4 helpers the same way:
block scales (never rounding-dependent), the exact order's quotient (taken with 38 bits of
shift, so >= 32 of its bits lie below the E2M1 quantum) and the te / torchao orders' fp32
cast input; only the E2M1 rounding is stochastic. The tensor scale comes from
triton_quant's amax and tensor-scale kernels.

Kernels: :func:`random_bits_kernel`, :func:`mx_quantize_sr_kernel`,
:func:`nvfp4_quantize_sr_kernel` (RB_MODE 0: rbits from memory; 1: Philox in-kernel).
Launchers: :func:`random_bits`, :func:`quantize_sr` (MX), :func:`quantize_nvfp4_sr`.
Bad input raises :class:`SRWordsError` / :class:`SRProfileError` (both KernelUnsupported and
the reference's ShapeError / ProfileConflictError).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from mxkernels._memo import memo_dict

from mxkernels.triton_common import (_bitlen64, element_constexprs, _finish, KernelUnsupported,
                                     _max_along, _mx_scale_byte, _normalize,
                                     _nvfp4_block_scales, profile_constexprs, _widen_to_f32)
from mxkernels.triton_quant import (_as_bits, _auto_block_rows, _block_size, mx_constexprs,
                                    _norm_axis, _nvfp4_cast_input, _nvfp4_exact_quotient,
                                    nvfp4_outputs, _rows_view, _src_kind, _tile)
from mxref.errors import ProfileConflictError, ShapeError
from mxref.formats import FORMATS, get_format
from mxref.profiles import get_profile

__all__ = ["random_bits", "quantize_sr", "quantize_nvfp4_sr", "sr_constexprs",
           "nvfp4_sr_constexprs", "SRWordsError", "SRProfileError", "aot_specs", "KERNELS",
           "ARG_TYPES"]


class SRWordsError(KernelUnsupported, ShapeError):
    """Random words the SR kernels cannot take: rbits of another shape, dtype or device, or
    not exactly one of rbits / seed."""


class SRProfileError(KernelUnsupported, ProfileConflictError):
    """A format / profile pair the SR kernels do not take (an MX profile for NVFP4, ...)."""

_INF: tl.constexpr = tl.constexpr(0x7F800000)
_TWO32: tl.constexpr = tl.constexpr(4294967296)
# Philox4x32 constants (Salmon et al. 2011; triton/language/random.py)
_PHILOX_A: tl.constexpr = tl.constexpr(0xD2511F53)
_PHILOX_B: tl.constexpr = tl.constexpr(0xCD9E8D57)
_PHILOX_KA: tl.constexpr = tl.constexpr(0x9E3779B9)
_PHILOX_KB: tl.constexpr = tl.constexpr(0xBB67AE85)


# =========================================================================================
# Philox4x32-10
# =========================================================================================
@triton.jit
def _philox_rounds(c0, c1, c2, c3, k0, k1):
    """The four words of Philox4x32-10 on counter (c0, c1, c2, c3) with key (k0, k1): c0 a
    uint32 tensor; the others uint32 scalars or tensors. Same rounds as
    triton.language.philox_impl (round constants 0xD2511F53 / 0xCD9E8D57, key increments
    0x9E3779B9 / 0xBB67AE85); words a caller drops are dead code to the compiler."""
    z = c0 * 0
    c1 = z + c1                       # everything as tensors: wrap-around uint32 arithmetic
    c2 = z + c2
    c3 = z + c3
    k0 = z + k0
    k1 = z + k1
    for _ in tl.static_range(10):
        _c0 = c0
        _c2 = c2
        c0 = tl.umulhi(_c2, _PHILOX_B) ^ c1 ^ k0
        c2 = tl.umulhi(_c0, _PHILOX_A) ^ c3 ^ k1
        c1 = _c2 * _PHILOX_B
        c3 = _c0 * _PHILOX_A
        k0 = k0 + _PHILOX_KA
        k1 = k1 + _PHILOX_KB
    return c0, c1, c2, c3


@triton.jit
def _philox4(c0, c1, c2, c3, k0, k1):
    """Word 0 of Philox4x32-10 on counter (c0, c1, c2, c3) with key (k0, k1) (see
    _philox_rounds). Shared with triton_rotate (random sign vectors)."""
    w, _, _, _ = _philox_rounds(c0, c1, c2, c3, k0, k1)
    return w


@triton.jit
def _philox4x(c0, k0, k1):
    """All four words of Philox4x32-10 on counter (c0, 0, 0, 0) with key (k0, k1), as
    triton.language.randint4x: the stream ``mxref.random_bits(..., words=4)`` draws."""
    return _philox_rounds(c0, 0, 0, 0, k0, k1)


@triton.jit
def _philox_word0(c0, k0, k1):
    """First word of Philox4x32-10 on counter (c0, 0, 0, 0) with key (k0, k1)."""
    return _philox4(c0, 0, 0, 0, k0, k1)


@triton.jit
def _u32(v):
    """A scalar int32 argument as uint32 (bit cast). Added to a 0-d tensor first: Triton
    specializes an int argument equal to 1 into a constexpr, which has no .to()."""
    return (tl.full([], 0, tl.int32) + v).to(tl.uint32, bitcast=True)


@triton.jit
def _join4(w0, w1, w2, w3):
    """The four Philox words as one tensor with two trailing dimensions of 2 whose flattened
    order is w0, w1, w2, w3 (reshape it to put each element's four words side by side)."""
    return tl.join(tl.join(w0, w2), tl.join(w1, w3))


@triton.jit
def _pick4(w0, w1, w2, w3, j):
    """Word j (0..3, a tensor) of the four Philox words."""
    return tl.where(j == 0, w0, tl.where(j == 1, w1, tl.where(j == 2, w2, w3)))


@triton.jit
def _stream_word(i, offset, seed_lo, seed_hi, RB_MODE: tl.constexpr):
    """The SR word of element i (uint32) of a seeded stream: RB_MODE 1, word 0 of counter
    (offset + i) mod 2^32; RB_MODE 2, word i mod 4 of counter (offset + i div 4) mod 2^32
    (mxref.random_bits(..., words=4)), one Philox evaluation per element here."""
    if RB_MODE == 1:
        w = _philox_word0(i + _u32(offset), _u32(seed_lo), _u32(seed_hi))
    else:
        w0, w1, w2, w3 = _philox4x((i >> 2) + _u32(offset), _u32(seed_lo), _u32(seed_hi))
        w = _pick4(w0, w1, w2, w3, i & 3)
    return w


@triton.jit
def _stream_words_grouped(g, r, n_cols, n_blk, offset, seed_lo, seed_hi, BLOCK: tl.constexpr,
                          BLOCK_ROWS: tl.constexpr):
    """uint32 [BLOCK_ROWS, BLOCK]: the four-word stream's words (RB_MODE 3) of the blocks g
    (rows r) of a [n_rows, n_cols] array blocked along its rows, element i = row * n_cols +
    col taking word i mod 4 of counter (offset + i div 4) mod 2^32: one Philox evaluation per
    four elements (n_cols and BLOCK multiples of 4, so every group of four lies in one
    block)."""
    base = r * n_cols + (g - r * n_blk) * BLOCK
    gi = (base >> 2)[:, None] + tl.arange(0, BLOCK // 4)[None, :]
    w0, w1, w2, w3 = _philox4x(gi.to(tl.uint32, bitcast=True) + _u32(offset), _u32(seed_lo),
                               _u32(seed_hi))
    return tl.reshape(_join4(w0, w1, w2, w3), (BLOCK_ROWS, BLOCK))


@triton.jit
def random_bits_kernel(out_ptr, n, seed_lo, seed_hi, offset, BLOCK_N: tl.constexpr):
    """out[i] = Philox4x32-10((offset + i) mod 2^32, 0, 0, 0; key (seed_lo, seed_hi)) word 0,
    for i < n; seed_lo/seed_hi/offset are the uint32 bit patterns passed as int32."""
    i = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = i < n
    ctr = i.to(tl.uint32) + _u32(offset)
    w = _philox_word0(ctr, _u32(seed_lo), _u32(seed_hi))
    tl.store(out_ptr + i, w.to(tl.int32, bitcast=True), mask=m)


# =========================================================================================
# stochastic rounding of one element
# =========================================================================================
@triton.jit
def _round_sig_sr(q, exp2, rb, MBITS: tl.constexpr, EMIN: tl.constexpr, BIAS: tl.constexpr,
                  IS_INT: tl.constexpr):
    """Stochastically round q * 2^exp2 onto the float grid (MBITS, EMIN, BIAS) or the
    fixed-point grid of quantum 2^-MBITS (IS_INT), with the uint32 word ``rb``: up iff
    floor(frac * 2^32) + rb >= 2^32. q: int32, a normalized 24-bit significand
    (2^23 <= q < 2^24) or 0; or int64, positive and below 2^62, whose value is exactly q
    (its first 32 bits below the quantum are f: the NVFP4 exact order's quotient, whose
    remainder is less than one unit of q, passes >= 32 such bits). Returns (magnitude code,
    'certainly overflows'), as triton_quant._round_sig."""
    if q.dtype == tl.int64:
        p = _bitlen64(q) - 1
    else:
        p = 23
    e_true = p + exp2
    if IS_INT:
        r = -MBITS - exp2
    else:
        r = tl.maximum(e_true, EMIN) - MBITS - exp2
    exact = r < 1                                    # no bit discarded
    # f = floor((q mod 2^r) * 2^32 / 2^r) in uint32: for r <= 32 the left shift by 32 - r
    # drops the integer part by wrap-around; for r > 32 it is q >> (r - 32) (0 from r = 56
    # for the 24-bit q)
    if q.dtype == tl.int64:
        n = q >> tl.minimum(tl.maximum(r, 1), 63).to(tl.int64)
        qu = q.to(tl.uint64, bitcast=True)
        f_lo = (qu << tl.minimum(tl.maximum(32 - r, 0), 31).to(tl.uint64)).to(tl.uint32)
        f_hi = (qu >> tl.minimum(tl.maximum(r - 32, 0), 63).to(tl.uint64)).to(tl.uint32)
        f = tl.where(r <= 32, f_lo, f_hi)
        up = (f.to(tl.int64) + rb.to(tl.int64)) >= _TWO32
    else:
        # q * 2^32 >> r in 64 bits: n in the high word, f in the low (r from 1 to 63; the
        # exact case r < 1 replaces n below)
        t = (q.to(tl.uint32, bitcast=True).to(tl.uint64) << 32) >> \
            tl.minimum(tl.maximum(r, 1), 63).to(tl.uint64)
        n = (t >> 32).to(tl.int32)
        f = t.to(tl.uint32)
        up = (f + rb.to(tl.uint32, bitcast=True)) < f     # uint32 carry out of the add
    n = (n + tl.where(up & (r >= 1), 1, 0)).to(tl.int32)
    if IS_INT:
        code = n
        huge = exact
    else:
        n = tl.where(exact, (q << tl.maximum(-r, 0).to(q.dtype)).to(tl.int32), n)
        CAP: tl.constexpr = (1 << (31 - MBITS)) - 2 - BIAS
        huge = e_true > CAP
        code = ((tl.minimum(tl.maximum(e_true, EMIN), CAP) + (BIAS - 1)) << MBITS) + n
    return code, huge


@triton.jit
def _encode_sr(b, s, rb, EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr,
               EL_EMIN: tl.constexpr, EL_BIAS: tl.constexpr, EL_MAXCODE: tl.constexpr,
               EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
               OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr,
               INT8_FULL: tl.constexpr):
    """Element code (int32) of fp32 bits ``b`` divided by 2^s, stochastically rounded with the
    uint32 words ``rb`` (as triton_quant._encode with its rounding step replaced)."""
    neg = (b >> 31) & 1
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    sig, e = _normalize(a)
    code, huge = _round_sig_sr(sig, e - 23 - s, rb, EL_MBITS, EL_EMIN, EL_BIAS, EL_IS_INT)
    return _finish(code, huge, neg, a, EL_IS_INT, EL_MAXCODE, EL_SIGNBIT, EL_NAN, EL_INF,
                   OVERFLOW, SIGNED_ZERO, INT8_FULL)


# =========================================================================================
# the SR MX quantize kernel
# =========================================================================================
@triton.jit
def mx_quantize_sr_kernel(
        x_ptr, rb_ptr, scale_ptr, code_ptr, n_rows, n_cols, n_blk, n_inner,
        seed_lo, seed_hi, offset,
        SRC: tl.constexpr, BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        RB_MODE: tl.constexpr,
        EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_BIAS: tl.constexpr, EL_EMAX: tl.constexpr, EL_MAXCODE: tl.constexpr,
        EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, OVERFLOW: tl.constexpr,
        NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr, SIGNED_ZERO: tl.constexpr,
        FLUSH: tl.constexpr, RCEIL_ANY_UP: tl.constexpr, SCALE_OVF_NAN: tl.constexpr,
        ZEXP: tl.constexpr, RCEIL_LOG2: tl.constexpr, INT8_FULL: tl.constexpr):
    """MX block quantization with stochastic rounding of a contiguous [n_rows, n_cols]
    bit-pattern array along axis 1 (the block axis moved last).

    RB_MODE 0: the uint32 words come from rb_ptr ([n_rows, n_cols], same layout as x).
    RB_MODE 1: they are generated: element (row, col) is element
    i = ((row // n_inner) * n_cols + col) * n_inner + row % n_inner of the tensor before its
    block axis was moved last (n_inner = product of the dimensions after the block axis),
    and gets Philox word 0 of counter (offset + i) mod 2^32 under key (seed_lo, seed_hi).
    RB_MODE 2: as 1 with the four-word stream (:func:`_stream_word`); RB_MODE 3: the same
    words drawn four per evaluation (n_inner 1, n_cols a multiple of 4:
    :func:`_stream_words_grouped`).
    """
    g, g_ok, r, offs, m = _tile(n_rows, n_cols, n_blk, BLOCK, BLOCK_ROWS)
    raw = tl.load(x_ptr + offs, mask=m, other=0)
    b = _widen_to_f32(raw, SRC)
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)

    fin = a < _INF
    amax = _max_along(tl.where(fin, a, 0), 1)
    has_nan = _max_along(tl.where(a > _INF, 1, 0), 1) > 0
    has_inf = _max_along(tl.where(a == _INF, 1, 0), 1) > 0
    byte, s, nan_scale = _mx_scale_byte(amax, has_nan, has_inf, EL_EMAX, EL_MAXSIG, EL_EVENTHR,
                                        EL_MAXF32, SCALE_RULE, RCEIL_ANY_UP, RCEIL_LOG2,
                                        NAN_POISON, INF_MODE, SCALE_OVF_NAN)
    tl.store(scale_ptr + g, byte.to(tl.uint8), mask=g_ok)

    # the random words
    if RB_MODE == 0:
        rb = tl.load(rb_ptr + offs, mask=m, other=0).to(tl.uint32, bitcast=True)
    else:
        # the launcher keeps n_rows * n_cols below 2^31 here: int32 index arithmetic
        o = r // n_inner
        k = r - o * n_inner
        cols = (offs - r.to(tl.int64)[:, None] * n_cols).to(tl.int32)   # column in the row
        if RB_MODE == 3:      # n_inner 1: the block axis is the last
            rb = _stream_words_grouped(g, r, n_cols, n_blk, offset, seed_lo, seed_hi, BLOCK,
                                       BLOCK_ROWS)
        else:
            idx = (o[:, None] * n_cols + cols) * n_inner + k[:, None]
            rb = _stream_word(idx.to(tl.uint32, bitcast=True), offset, seed_lo, seed_hi,
                              RB_MODE)

    se = tl.where(s == -127, ZEXP, s)
    code = _encode_sr(b, se[:, None], rb, EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS, EL_MAXCODE,
                      EL_SIGNBIT, EL_NAN, EL_INF, OVERFLOW, SIGNED_ZERO, FLUSH, INT8_FULL)
    if EL_NAN >= 0:
        fill = EL_NAN
    else:
        fill = 0
    code = tl.where(nan_scale[:, None], fill, code)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)


@triton.jit
def _nvfp4_codes_sr(b, a, sc, t, rb, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr,
                    OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr):
    """triton_quant._nvfp4_codes with stochastic rounding by the uint32 words rb."""
    if ORDER == 0:     # E2M1_sr(x / (S T)) from a quotient with >= 32 bits below the quantum
        q, e, _ = _nvfp4_exact_quotient(a, sc, t, 38)
        code, huge = _round_sig_sr(q, e, rb, 1, 0, 1, False)
        code = tl.where((a == 0) | (sc[:, None] == 0), 0, code)
        code = _finish(code, huge, (b >> 31) & 1, a, False, 7, 3, -1, -1, OVERFLOW,
                       SIGNED_ZERO, False)
    else:              # the te / torchao fp32 cast input, rounded stochastically
        y = _nvfp4_cast_input(b, sc, t, ORDER, TWO_LEVEL)
        code = _encode_sr(y, 0, rb, False, 1, 0, 1, 7, 3, -1, -1, OVERFLOW, SIGNED_ZERO,
                          FLUSH, False)
    return code


@triton.jit
def nvfp4_quantize_sr_kernel(
        x_ptr, rb_ptr, consts_ptr, scale_ptr, code_ptr, n_rows, n_cols, n_blk, rows_per_tensor,
        seed_lo, seed_hi, offset,
        SRC: tl.constexpr, BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        RB_MODE: tl.constexpr, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr,
        SCALE_MIN_TINY: tl.constexpr, OVERFLOW: tl.constexpr, NAN_POISON: tl.constexpr,
        INF_POISON: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr):
    """NVFP4 with stochastic rounding of a contiguous [n_rows, n_cols] array (blocks of 16
    along the rows; tensor t = row // rows_per_tensor, its constants T, S_enc, S_enc / 6 at
    consts[t] from triton_quant.nvfp4_tensor_scale_kernel): triton_quant.nvfp4_quantize_kernel
    with the E2M1 rounding replaced.

    RB_MODE 0: the uint32 words come from rb_ptr ([n_rows, n_cols], same layout as x).
    RB_MODE 1: element i = row * n_cols + col (C order of the whole input) gets Philox word 0
    of counter (offset + i) mod 2^32 under key (seed_lo, seed_hi); RB_MODE 2: the four-word
    stream (:func:`_stream_word`); RB_MODE 3: the same words, four per evaluation (n_cols a
    multiple of 4: :func:`_stream_words_grouped`).
    """
    g, g_ok, r, offs, m = _tile(n_rows, n_cols, n_blk, BLOCK, BLOCK_ROWS)
    b = _widen_to_f32(tl.load(x_ptr + offs, mask=m, other=0), SRC)
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    tix = r // rows_per_tensor
    t = tl.load(consts_ptr + tix * 3, mask=g_ok, other=0x3F800000)
    sc6 = tl.load(consts_ptr + tix * 3 + 2, mask=g_ok, other=0)

    sc, poison = _nvfp4_block_scales(a, t, sc6, NAN_POISON, INF_POISON, ORDER, TWO_LEVEL,
                                     SCALE_MIN_TINY)
    tl.store(scale_ptr + g, tl.where(poison, 0x7F, sc).to(tl.uint8), mask=g_ok)

    if RB_MODE == 0:
        rb = tl.load(rb_ptr + offs, mask=m, other=0).to(tl.uint32, bitcast=True)
    else:
        # the launcher keeps n_rows * n_cols below 2^31 here: the flat index fits int32
        if RB_MODE == 3:
            rb = _stream_words_grouped(g, r, n_cols, n_blk, offset, seed_lo, seed_hi, BLOCK,
                                       BLOCK_ROWS)
        else:
            rb = _stream_word(offs.to(tl.int32).to(tl.uint32, bitcast=True), offset, seed_lo,
                              seed_hi, RB_MODE)

    code = _nvfp4_codes_sr(b, a, sc, t, rb, ORDER, TWO_LEVEL, OVERFLOW, SIGNED_ZERO, FLUSH)
    code = tl.where(poison[:, None], 0, code)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)


# =========================================================================================
# constexprs, signatures, AOT specs
# =========================================================================================
_SR_DROP = ("ROUNDING",)


def _sr_base_profile(profile):
    """The profile with stochastic rounding (a non-stochastic profile is turned into its SR
    variant, as mxref.profiles.sr_profile does)."""
    pr = get_profile(profile)
    if pr.rounding != "stochastic":
        pr = pr.replace(name=f"{pr.name}+sr", rounding="stochastic")
    return pr


@memo_dict
def sr_constexprs(fmt, profile="ocp", src_dtype="float32", rb_mode: int = 0,
                  block_rows: int | None = None) -> dict:
    """Every constexpr of :func:`mx_quantize_sr_kernel` for one format / profile (its SR
    variant) / source dtype / random-word source (0: rbits, 1: seed, 2 / 3: seed with four
    words per counter, one evaluation per element / per four)."""
    f = get_format(fmt)
    if f.is_nvfp4:
        raise SRProfileError("quantize_sr takes MX formats; for nvfp4 use quantize_nvfp4_sr "
                             "(it returns the tensor scale too)")
    pr = _sr_base_profile(profile)
    _check_format(pr, f)
    pk = profile_constexprs(pr.replace(rounding="rne"))
    for k in _SR_DROP:
        pk.pop(k)
    return {"SRC": _src_kind(src_dtype), "BLOCK": _block_size(f, pr),
            "BLOCK_ROWS": block_rows or 64, "RB_MODE": int(rb_mode),
            **element_constexprs(f), **pk}


def _check_format(pr, f):
    try:
        pr.check_format(f)
    except ProfileConflictError as e:
        raise SRProfileError(str(e)) from None


@memo_dict
def nvfp4_sr_constexprs(profile="ocp", src_dtype="float32", rb_mode: int = 0,
                        block_rows: int | None = None) -> dict:
    """Every constexpr of :func:`nvfp4_quantize_sr_kernel` for one NVFP4 profile (its SR
    variant) / source dtype / random-word source (0: rbits, 1: seed, 2 / 3: seed with four
    words per counter, one evaluation per element / per four): those of
    triton_quant.nvfp4_quantize_kernel without ROUNDING, plus RB_MODE."""
    pr = _sr_base_profile(profile)
    _check_format(pr, FORMATS["nvfp4"])
    ce = mx_constexprs("nvfp4_quantize", "nvfp4", pr.replace(rounding="rne"), src_dtype,
                       block_rows)
    ce.pop("ROUNDING")
    ce["RB_MODE"] = int(rb_mode)
    return ce


ARG_TYPES = {
    "random_bits": {"out_ptr": "*i32", "n": "i32", "seed_lo": "i32", "seed_hi": "i32",
                    "offset": "i32"},
    "mx_quantize_sr": {"x_ptr": "SRC", "rb_ptr": "*i32", "scale_ptr": "*u8", "code_ptr": "*u8",
                       "n_rows": "i32", "n_cols": "i32", "n_blk": "i32", "n_inner": "i32",
                       "seed_lo": "i32", "seed_hi": "i32", "offset": "i32"},
    "nvfp4_quantize_sr": {"x_ptr": "SRC", "rb_ptr": "*i32", "consts_ptr": "*i32",
                          "scale_ptr": "*u8", "code_ptr": "*u8", "n_rows": "i32",
                          "n_cols": "i32", "n_blk": "i32", "rows_per_tensor": "i32",
                          "seed_lo": "i32", "seed_hi": "i32", "offset": "i32"},
}


def kernel_signature(kernel: str, src_dtype: str, constexprs: dict):
    src = "*i32" if src_dtype == "float32" else "*i16"
    types = {k: (src if v == "SRC" else v) for k, v in ARG_TYPES[kernel].items()}
    types.update({k: "constexpr" for k in constexprs})
    names = KERNELS[kernel].arg_names
    if set(names) != set(types):
        raise KeyError(f"{kernel}: arguments {sorted(set(names) ^ set(types))} are not "
                       "described by ARG_TYPES / the constexprs")
    return {k: types[k] for k in names}


def aot_specs():
    """(id, jitfn, signature, constexprs) for ahead-of-time compilation of every kernel."""
    out = []
    ce = {"BLOCK_N": 1024}
    out.append(("random_bits", random_bits_kernel, kernel_signature("random_bits", "float32", ce),
                ce))
    for fmt, prof, sd, mode in (("mxfp4", "ocp", "bfloat16", 1),
                                ("mxfp8_e4m3", "rceil", "float32", 0),
                                ("mxint8", "ocp", "float16", 1),
                                ("mxfp6_e3m2", "torchao_rceil", "float32", 0),
                                ("mxfp8_e5m2", "te_mxfp8", "bfloat16", 1)):
        ce = sr_constexprs(fmt, prof, sd, mode)
        out.append((f"mx_quantize_sr-{fmt}-{prof}-{sd}-rb{mode}", mx_quantize_sr_kernel,
                    kernel_signature("mx_quantize_sr", sd, ce), ce))
    # the three NVFP4 op orders (the exact one with its int64 quotient), both word sources,
    # every source dtype
    for prof, sd, mode in (("ocp", "float32", 0), ("ocp", "bfloat16", 1),
                           ("te_nvfp4", "bfloat16", 1), ("torchao_nvfp4", "float16", 0)):
        ce = nvfp4_sr_constexprs(prof, sd, mode)
        out.append((f"nvfp4_quantize_sr-{prof}-{sd}-rb{mode}", nvfp4_quantize_sr_kernel,
                    kernel_signature("nvfp4_quantize_sr", sd, ce), ce))
    return out


KERNELS = {"random_bits": random_bits_kernel, "mx_quantize_sr": mx_quantize_sr_kernel,
           "nvfp4_quantize_sr": nvfp4_quantize_sr_kernel}

INTERPRETED = type(mx_quantize_sr_kernel).__name__ == "InterpretedFunction"


# =========================================================================================
# launchers
# =========================================================================================
def _i32(v: int) -> int:
    """A uint32 bit pattern as the int32 of the same bits (the kernels' scalar args)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def _seed_words(seed) -> tuple[int, int]:
    if isinstance(seed, bool) or not isinstance(seed, int):
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise KernelUnsupported(f"seed must be an int, got {type(seed).__name__}") from None
    s = seed & (2**64 - 1)
    return _i32(s), _i32(s >> 32)


def _offset_word(offset) -> int:
    if isinstance(offset, bool):
        raise KernelUnsupported("offset must be an int")
    try:
        return _i32(int(offset))
    except (TypeError, ValueError):
        raise KernelUnsupported(f"offset must be an int, got {type(offset).__name__}") from None


def random_bits(n: int, *, seed: int, offset: int = 0, device="cpu", block_n: int | None = None,
                num_warps: int = 4) -> torch.Tensor:
    """The stochastic-rounding stream: int32 tensor [n] holding uint32 words, word i = first
    word of Philox4x32-10((offset + i) mod 2^32, 0, 0, 0) with key (seed_lo, seed_hi) --
    mxref.quantize.random_bits((n,), seed, offset), i.e. tl.randint(seed, offset + i)."""
    n = int(n)
    if n < 0:
        raise KernelUnsupported(f"n must be >= 0, got {n}")
    if n >= 2**31 - 2**16:
        raise KernelUnsupported(f"n = {n}: generate below 2^31 words per call")
    lo, hi = _seed_words(seed)
    off = _offset_word(offset)
    out = torch.empty(n, dtype=torch.int32, device=device)
    if block_n is None:
        block_n = min(65536, max(1024, triton.next_power_of_2(max(n, 1)))) if INTERPRETED \
            else 1024
    if block_n & (block_n - 1):
        raise KernelUnsupported(f"block_n={block_n} is not a power of two")
    if n:
        random_bits_kernel[(triton.cdiv(n, block_n),)](out, n, lo, hi, off, BLOCK_N=block_n,
                                                       num_warps=num_warps)
    return out


def _rbits_tensor(rbits, shape, device) -> torch.Tensor:
    if not isinstance(rbits, torch.Tensor):
        raise SRWordsError(f"rbits must be a torch tensor of uint32 words (uint32 or int32 "
                           f"dtype), got {type(rbits).__name__}")
    if rbits.dtype not in (torch.int32, getattr(torch, "uint32", torch.int32)):
        raise SRWordsError(f"rbits must hold uint32 words as torch.uint32 or torch.int32, "
                           f"got {rbits.dtype}")
    if tuple(rbits.shape) != tuple(shape):
        raise SRWordsError(f"rbits shape {tuple(rbits.shape)} must equal x's shape "
                           f"{tuple(shape)}")
    if rbits.device != device:
        raise SRWordsError(f"rbits is on {rbits.device}, x on {device}")
    return rbits.view(torch.int32)


def _one_word_source(rbits, seed):
    if (rbits is None) == (seed is None):
        raise SRWordsError("stochastic rounding needs exactly one of rbits (uint32 per "
                           "element) or seed")


def _seed_mode(rbits, seed, words) -> int:
    """RB_MODE of a launch: 0 (rbits), 1 (seed, one word per counter), 2 (seed, four)."""
    _one_word_source(rbits, seed)
    if isinstance(words, bool) or words not in (1, 4):
        raise KernelUnsupported(f"words={words!r}: 1 or 4 words per Philox counter")
    if rbits is not None:
        if words != 1:
            raise KernelUnsupported("words applies to the stream drawn from seed, not to rbits")
        return 0
    return 1 if words == 1 else 2


def quantize_sr(x: torch.Tensor, fmt: str, profile="ocp", axis: int = -1, *, rbits=None,
                seed: int | None = None, offset: int = 0, src_dtype: str | None = None,
                block_rows: int | None = None, num_warps: int = 4, words: int = 1):
    """MX quantization with stochastic rounding along ``axis``: (scales uint8, codes uint8).

    ``profile``: a profile name or Profile; a non-stochastic one is used with its rounding
    replaced by ``stochastic`` (``mxref.profiles.sr_profile``), so the default is
    ``ocp+sr``. Exactly one of ``rbits`` (uint32 words as a torch.uint32/int32 tensor of x's
    shape, on x's device) or ``seed`` (the Philox stream of mxref.quantize.random_bits, element
    i of x in C order taking word offset + i; ``words=4``: word i mod 4 of counter offset +
    i div 4) must be given. Equal bit for bit to ``mxref.quantize(x, fmt, sr_profile(profile),
    axis, rbits=..., seed=..., rng_offset=..., rng_words=words)``.
    """
    mode = _seed_mode(rbits, seed, words)
    bits, src = _as_bits(x, src_dtype)
    ax = _norm_axis(axis, bits.ndim)
    if mode == 2 and ax == bits.ndim - 1 and bits.shape[ax] % 4 == 0 and \
            sr_constexprs(fmt, profile, src, 1)["BLOCK"] % 4 == 0:
        mode = 3                      # four words per evaluation, each group in one block
    ce = sr_constexprs(fmt, profile, src, mode)
    pr = _sr_base_profile(profile)
    x2, moved = _rows_view(bits, ax)
    rows, n = x2.shape
    bs = ce["BLOCK"]
    nblk = -(-n // bs)
    if n % bs and pr.ragged == "error":
        raise KernelUnsupported(f"length {n} is not a multiple of block size {bs} and profile "
                                f"{pr.name!r} refuses ragged blocks")
    if seed is not None and x2.numel() >= 2**31 - 2**16:
        raise KernelUnsupported(f"{x2.numel()} elements in one seeded call: split below 2^31 "
                                "(pass offset = the element index where each part starts)")
    ce["BLOCK_ROWS"] = _auto_block_rows(rows * nblk, block_rows)
    if INTERPRETED and block_rows is None:
        ce["BLOCK_ROWS"] = min(ce["BLOCK_ROWS"], max(16, 16384 // bs))
    inner = 1
    for d in bits.shape[ax + 1:]:
        inner *= d
    if rbits is not None:
        rb2, _ = _rows_view(_rbits_tensor(rbits, bits.shape, x.device), ax)
        lo = hi = off = 0
    else:
        rb2 = x2                      # unused pointer (RB_MODE 1, 2)
        lo, hi = _seed_words(seed)
        off = _offset_word(offset)
    codes = torch.empty((rows, n), dtype=torch.uint8, device=x.device)
    scales = torch.empty((rows, nblk), dtype=torch.uint8, device=x.device)
    if rows * nblk:
        grid = (triton.cdiv(rows * nblk, ce["BLOCK_ROWS"]),)
        mx_quantize_sr_kernel[grid](x2, rb2, scales, codes, rows, n, nblk, max(inner, 1),
                                    lo, hi, off, num_warps=num_warps, **ce)
    codes = codes.reshape(moved).movedim(-1, ax).contiguous()
    scales = scales.reshape(moved[:-1] + (nblk,)).movedim(-1, ax).contiguous()
    return scales, codes


def quantize_nvfp4_sr(x: torch.Tensor, profile="ocp", *, rbits=None, seed: int | None = None,
                      offset: int = 0, src_dtype: str | None = None,
                      block_rows: int | None = None, num_warps: int = 4, words: int = 1):
    """NVFP4 with stochastic rounding of a [T, ..., C] tensor: T independent tensors (each its
    own global amax), blocks of 16 along the last axis, as triton_quant.nvfp4_quantize.
    Returns (scales uint8 [T, ..., ceil(C / 16)] E4M3 codes, codes uint8 like x,
    tensor_scale float32 [T]: dequant = e2m1 * e4m3 * tensor_scale).

    ``profile``: an NVFP4 profile (``ocp``, ``te_nvfp4``, ``torchao_nvfp4`` or a Profile) whose
    rounding is replaced by ``stochastic`` (mxref.profiles.sr_profile). Exactly one
    of ``rbits`` (uint32 words as a torch.uint32/int32 tensor of x's shape, on x's device) or
    ``seed``: element i of x in C order (the whole batch) takes Philox word offset + i, so
    tensor t equals ``mxref.quantize(x[t], "nvfp4", sr_profile(profile), seed=seed,
    rng_offset=offset + t * x[t].numel())`` bit for bit (and with rbits, ``rbits=rbits[t]``).
    ``words=4``: element i takes word i mod 4 of counter offset + i div 4 (one tensor:
    ``mxref.quantize(x[0], ..., seed=seed, rng_offset=offset, rng_words=4)``).
    """
    mode = _seed_mode(rbits, seed, words)
    bits, src = _as_bits(x, src_dtype)
    pr = _sr_base_profile(profile)
    if pr.nvfp4_amax_scope != "tensor" or pr.nvfp4_tile_2d:
        raise KernelUnsupported(
            f"profile {pr.name!r}: the Triton NVFP4 kernels implement one tensor scale per "
            "tensor and 1x16 blocks; nvfp4_amax_scope='row' / nvfp4_tile_2d are not implemented")
    if mode == 2 and bits.ndim >= 1 and bits.shape[-1] % 4 == 0:
        mode = 3                      # four words per evaluation, each group in one block
    ce = nvfp4_sr_constexprs(pr, src, mode)
    if bits.ndim < 2:
        raise KernelUnsupported("quantize_nvfp4_sr takes [T, ..., C]: T tensors, blocks along C")
    rne = pr.replace(rounding="rne")          # amax and tensor scale do not depend on it
    ce_amax = mx_constexprs("nvfp4_amax", "nvfp4", rne, src)
    ce_ts = mx_constexprs("nvfp4_tensor_scale", "nvfp4", rne, src)
    n_t = bits.shape[0]
    xc = bits.contiguous()
    per_tensor = xc.numel() // n_t if n_t else 0
    n = bits.shape[-1]
    rows = xc.numel() // n if n else 0
    rows_per_tensor = rows // n_t if n_t else 0
    nblk = -(-n // 16)
    if n % 16 and pr.ragged == "error":
        raise KernelUnsupported(f"length {n} is not a multiple of 16 and profile {pr.name!r} "
                                "refuses ragged blocks")
    if seed is not None and xc.numel() >= 2**31 - 2**16:
        raise KernelUnsupported(f"{xc.numel()} elements in one seeded call: split below 2^31 "
                                "(pass offset = the element index where each part starts)")
    ce["BLOCK_ROWS"] = _auto_block_rows(rows * nblk, block_rows)
    if INTERPRETED and block_rows is None:
        ce["BLOCK_ROWS"] = min(ce["BLOCK_ROWS"], 1024)
    if rbits is not None:
        rb2 = _rbits_tensor(rbits, bits.shape, x.device).contiguous().reshape(rows, n)
        lo = hi = off = 0
    else:
        rb2 = xc                      # unused pointer (RB_MODE 1, 2)
        lo, hi = _seed_words(seed)
        off = _offset_word(offset)
    consts, scales, codes, ready = nvfp4_outputs(xc, n_t, per_tensor, nblk, ce_amax, ce_ts)
    if ready and rows * nblk:
        nvfp4_quantize_sr_kernel[(triton.cdiv(rows * nblk, ce["BLOCK_ROWS"]),)](
            xc.reshape(rows, n), rb2, consts, scales, codes, rows, n, nblk,
            rows_per_tensor, lo, hi, off, num_warps=num_warps, **ce)
    return scales, codes, consts[:, 0].contiguous().view(torch.float32)
