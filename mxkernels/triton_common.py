"""The Triton kernels' semantics, each knob once: the @triton.jit helpers every kernel module
calls (triton_quant, triton_fast, triton_sr, triton_rotate, triton_convert, triton_gemm).

* integer fp32 helpers: widening, normalization, one rounding (``_round_sig``), fp32 mul/div;
* elements: ``_encode`` / ``_finish`` (rounding, overflow, signed zero, NaN);
* the shared exponent: ``_shared_exponent`` (the spec, every scale rule) and its twin
  ``_shared_exponent_normal`` (the E8M0 byte of a normal amax, floor to round_down, for the
  fast kernels); ``_mx_scale_byte`` (NaN / Inf policy, scale overflow, clamp: the whole
  E8M0 byte of a block), built from ``_block_poisoned`` and ``_mx_scale_finish``;
* NVFP4: ``_nvfp4_block_scales`` (E4M3 block scales for every op order);
* the host side: :func:`element_constexprs` and :func:`profile_constexprs`, the mapping of a
  format / profile (mxref.formats, mxref.profiles) onto the kernels' constexprs.

Kernel modules import these with ``from mxkernels.triton_common import ...``; the kernel
loader (mxkernels/loader.py) loads this module first, so private interpreted/compiled copies
of the kernel modules bind the copy's helpers. Semantics: docs/semantics.md.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mxref import formats as _F
from mxref.formats import get_format
from mxref.profiles import (INF_POLICIES, OVERFLOWS, ROUNDINGS, SCALE_RULES, SIGNED_ZERO,
                            get_profile)

# ---- constants (constexpr globals are what a @triton.jit body may read) -------------------
_F32_INF: tl.constexpr = tl.constexpr(0x7F800000)
_F32_QNAN: tl.constexpr = tl.constexpr(0x7FC00000)
_F32_ONE: tl.constexpr = tl.constexpr(0x3F800000)
_F32_SIX: tl.constexpr = tl.constexpr(0x40C00000)
_F32_2688: tl.constexpr = tl.constexpr(0x45280000)
_F32_MAX: tl.constexpr = tl.constexpr(0x7F7FFFFF)
_F32_E4M3_TINY: tl.constexpr = tl.constexpr(0x3C800000)    # 2^-6
_F32_448: tl.constexpr = tl.constexpr(0x43E00000)
_LN2_Q32: tl.constexpr = tl.constexpr(2977044471)          # floor(ln 2 * 2^32)


class KernelUnsupported(Exception):
    """A format/profile/dtype combination these kernels do not implement."""


# =========================================================================================
# integer helpers
# =========================================================================================
# Only core builtins (tl.where, tl.maximum, tl.reduce, ...) are used in the kernels, never
# the @jit functions of triton.language.standard (tl.max, tl.zeros_like, ...): those were
# decorated when triton was imported, so in a process that imported triton before setting
# TRITON_INTERPRET=1 they could not run inside interpreted kernels. tl.reduce with the
# standard max combine function is what tl.max does (and the interpreter's fast path).
@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


_MAX_COMBINE = getattr(tl.standard, "_elementwise_max", None) or _max_combine


@triton.jit
def _min_combine(a, b):
    return tl.minimum(a, b)


@triton.jit
def _sum_combine(a, b):
    return a + b


# the same for integer min and sum reductions and prefix sums (tl.min / tl.sum / tl.cumsum's
# combine functions): the interpreter runs any other combine function one Python call per
# lane, seconds per 4096-lane block
_MIN_COMBINE = getattr(tl.standard, "_elementwise_min", None) or _min_combine
_SUM_COMBINE = getattr(tl.standard, "_sum_combine", None) or _sum_combine


@triton.jit
def _max_along(x, AXIS: tl.constexpr):
    """Max reduction along AXIS (integers)."""
    return tl.reduce(x, AXIS, _MAX_COMBINE)


_SMS: dict = {}


def sm_count(dev) -> int:
    """The streaming multiprocessors of a CUDA device (cached per device index): the unit the
    persistent-program grids are sized in."""
    n = _SMS.get(dev.index)
    if n is None:
        import torch
        n = _SMS[dev.index] = torch.cuda.get_device_properties(dev).multi_processor_count
    return n


@triton.jit
def _false_like(x):
    """An all-False int1 tensor of x's shape."""
    return tl.full(x.shape, 0, tl.int1)


@triton.jit
def _bitlen32(x):
    """Number of significant bits of a non-negative int32 tensor (0 for 0)."""
    n = x * 0
    c = x >= 65536
    n = tl.where(c, n + 16, n)
    x = tl.where(c, x >> 16, x)
    c = x >= 256
    n = tl.where(c, n + 8, n)
    x = tl.where(c, x >> 8, x)
    c = x >= 16
    n = tl.where(c, n + 4, n)
    x = tl.where(c, x >> 4, x)
    c = x >= 4
    n = tl.where(c, n + 2, n)
    x = tl.where(c, x >> 2, x)
    c = x >= 2
    n = tl.where(c, n + 1, n)
    x = tl.where(c, x >> 1, x)
    return n + x


@triton.jit
def _bitlen64(x):
    """Number of significant bits of a non-negative int64 tensor (0 for 0); int32 result."""
    c = x >= 4294967296
    lo = tl.where(c, x >> 32, x).to(tl.int32)       # low 32 bits of what is left
    top = lo < 0                                     # bit 31 set: 32 bits
    n = tl.where(top, 32, _bitlen32(tl.where(top, 0, lo)))
    return n + tl.where(c, 32, 0)


@triton.jit
def _widen_to_f32(raw, SRC: tl.constexpr):
    """fp32 bit pattern (int32) of a loaded fp32 (int32), bf16 or fp16 (int16) bit pattern."""
    if SRC == 0:
        b = raw
    elif SRC == 1:
        b = (raw.to(tl.int32) & 0xFFFF) << 16
    else:
        h = raw.to(tl.int32) & 0xFFFF
        sgn = (h >> 15) << 31
        e = (h >> 10) & 0x1F
        m = h & 0x3FF
        p = _bitlen32(m) - 1                                        # subnormal: m * 2^-24
        sub = ((p + 103) << 23) | ((m << tl.minimum(tl.maximum(23 - p, 0), 31)) & 0x7FFFFF)
        nrm = ((e + 112) << 23) | (m << 13)
        spec = 0x7F800000 | (m << 13) | tl.where(m != 0, 0x400000, 0)  # Inf, or quiet NaN
        mag = tl.where(e == 31, spec, tl.where(e == 0, tl.where(m == 0, 0, sub), nrm))
        b = mag | sgn
    return b


@triton.jit
def _normalize(a):
    """(sig24, E) of a non-negative fp32 magnitude a (int32): a = sig24 * 2^(E - 23) with
    sig24 in [2^23, 2^24) (0 for a == 0). Inf gives (2^23, 128)."""
    ea = a >> 23
    sub = ea == 0
    p = _bitlen32(tl.where(sub, a, 1)) - 1                         # -1 only for a == 0
    sig = tl.where(sub, a << (23 - p), (a & 0x7FFFFF) | 0x800000)
    e = tl.where(sub, p - 149, ea - 127)
    return sig, e


@triton.jit
def _round_sig(q, exp2, sticky, MBITS: tl.constexpr, EMIN: tl.constexpr, BIAS: tl.constexpr,
               IS_INT: tl.constexpr, ROUNDING: tl.constexpr, P24: tl.constexpr):
    """Round the positive value (q + sticky*eps) * 2^exp2 (q int32 < 2^24 or int64 < 2^62;
    sticky: strictly more than q, by less than one unit of q) onto a float grid (MBITS, EMIN,
    BIAS) or the fixed-point grid of quantum 2^-MBITS (IS_INT). Returns the magnitude code
    (int32; it may exceed the format's max code: the caller applies the overflow policy) and
    a flag 'certainly overflows' for values too large to encode without int32 overflow.
    P24: q is a normalized 24-bit significand (2^23 <= q < 2^24) or 0, whose value may then
    be anything below the smallest subnormal (saves the bit count).

    A float code falls out of one formula for normals and subnormals:
    ((max(E, EMIN) + BIAS - 1) << MBITS) + n, n the rounded significand on the grid of quantum
    2^(max(E, EMIN) - MBITS); a carry out of the significand lands in the exponent field.
    """
    if P24:
        p = 23
    elif q.dtype == tl.int64:
        p = _bitlen64(q) - 1
    else:
        p = _bitlen32(q) - 1
    e_true = p + exp2
    if IS_INT:
        r = -MBITS - exp2
    else:
        r = tl.maximum(e_true, EMIN) - MBITS - exp2
    exact = r < 1                                   # no bit discarded: shift left
    rq = tl.minimum(tl.maximum(r, 1), p + 2).to(q.dtype)   # >= p + 2 discards: below half
    one = tl.full(q.shape, 1, q.dtype)
    half = one << (rq - 1)
    n = q >> rq
    rem = q & ((half << 1) - 1)
    if ROUNDING == 0:                  # nearest, ties to even
        up = (rem > half) | ((rem == half) & ((sticky != 0) | ((n & 1) == 1)))
    elif ROUNDING == 1:                # nearest, ties away from zero
        up = rem >= half
    else:                              # nearest, ties toward zero
        up = (rem > half) | ((rem == half) & (sticky != 0))
    n = (n + tl.where(up, 1, 0)).to(tl.int32)
    if IS_INT:
        code = n
        huge = exact                   # value >= 2^(p + exp2) >= 1 unit * 2^p: overflow
    else:
        n = tl.where(exact, (q << tl.maximum(-r, 0).to(q.dtype)).to(tl.int32), n)
        CAP: tl.constexpr = (1 << (31 - MBITS)) - 2 - BIAS   # keeps the code inside int32
        huge = e_true > CAP
        code = ((tl.minimum(tl.maximum(e_true, EMIN), CAP) + (BIAS - 1)) << MBITS) + n
    return code, huge


@triton.jit
def _f32_parts(a):
    """(sig, exp2) of a positive finite fp32 magnitude: a = sig * 2^exp2 (sig not normalized)."""
    ea = a >> 23
    sig = (a & 0x7FFFFF) | tl.where(ea > 0, 0x800000, 0)
    return sig, tl.maximum(ea, 1) - 150


@triton.jit
def _f32_div(a, b):
    """fl(a / b), IEEE fp32 RNE, on fp32 bit patterns (int32) of any sign and class."""
    neg = ((a ^ b) >> 31) & 1
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    sa, ea = _normalize(aa)
    sb, eb = _f32_parts(tl.where(bb == 0, 1, bb))
    num = sa.to(tl.int64) << 36
    den = sb.to(tl.int64)
    q = num // den
    sticky = (num - q * den) != 0
    code, huge = _round_sig(tl.where(aa == 0, 1, q), ea - 23 - eb - 36, sticky, 23, -126, 127,
                            False, 0, False)
    code = tl.where(huge | (code >= _F32_INF), _F32_INF, code)
    code = tl.where(aa == 0, 0, code)
    nan = (aa > _F32_INF) | (bb > _F32_INF) | ((aa == 0) & (bb == 0)) | \
        ((aa == _F32_INF) & (bb == _F32_INF))
    code = tl.where((aa == _F32_INF) | (bb == 0), _F32_INF, code)
    code = tl.where((bb == _F32_INF) & (aa < _F32_INF), 0, code)
    return tl.where(nan, _F32_QNAN, code | (neg << 31))


@triton.jit
def _f32_mul(a, b):
    """fl(a * b), IEEE fp32 RNE, on fp32 bit patterns (int32) of any sign and class."""
    neg = ((a ^ b) >> 31) & 1
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    sa, ea = _f32_parts(tl.where(aa == 0, 1, aa))
    sb, eb = _f32_parts(tl.where(bb == 0, 1, bb))
    q = sa.to(tl.int64) * sb.to(tl.int64)
    code, huge = _round_sig(q, ea + eb, _false_like(q), 23, -126, 127, False, 0, False)
    code = tl.where(huge | (code >= _F32_INF), _F32_INF, code)
    zero = (aa == 0) | (bb == 0)
    inf = (aa == _F32_INF) | (bb == _F32_INF)
    code = tl.where(zero, 0, tl.where(inf, _F32_INF, code))
    nan = (aa > _F32_INF) | (bb > _F32_INF) | (zero & inf)
    return tl.where(nan, _F32_QNAN, code | (neg << 31))


@triton.jit
def _f32_min_pos(a, b):
    """fminf for non-negative fp32 bit patterns (a NaN operand loses, as C fminf)."""
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    r = tl.where(aa <= bb, a, b)
    r = tl.where(aa > _F32_INF, b, r)
    return tl.where(bb > _F32_INF, a, r)


# =========================================================================================
# element encoding and the shared exponent
# =========================================================================================
@triton.jit
def _finish(code, huge, neg, a, EL_IS_INT: tl.constexpr, EL_MAXCODE: tl.constexpr,
            EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
            OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr, INT8_FULL: tl.constexpr):
    """Overflow policy, signed zeros, sign and specials for magnitude ``code`` of input ``a``;
    INT8_FULL (int8_min='full'): a negative integer element that overflowed is
    -(EL_MAXCODE + 1), MXINT8's 0x80 = -2.0."""
    ovf = (code > EL_MAXCODE) | huge | (a == _F32_INF)
    if OVERFLOW == 0 or (EL_INF < 0 and EL_NAN < 0):
        code = tl.where(ovf, EL_MAXCODE, code)
    elif EL_INF >= 0:
        code = tl.where(ovf, EL_INF, code)
    else:
        code = tl.where(ovf, EL_NAN, code)
    if EL_IS_INT:
        if INT8_FULL:
            code = tl.where(ovf & (neg != 0), EL_MAXCODE + 1, code)
        code = tl.where(neg != 0, (-code) & 0xFF, code)
    else:
        if SIGNED_ZERO == 0:          # preserve
            sgn = neg
        elif SIGNED_ZERO == 1:        # an exact -0.0 input -> +0, an underflow keeps -0
            sgn = tl.where((code == 0) & (a == 0), 0, neg)
        else:                         # never negative
            sgn = tl.where(code == 0, 0, neg)
        code = code | (sgn << EL_SIGNBIT)
    if EL_NAN >= 0:
        code = tl.where(a > _F32_INF, EL_NAN, code)
    else:
        code = tl.where(a > _F32_INF, 0, code)
    return code


@triton.jit
def _encode(b, s, EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
            EL_BIAS: tl.constexpr, EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr,
            EL_NAN: tl.constexpr, EL_INF: tl.constexpr, ROUNDING: tl.constexpr,
            OVERFLOW: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr,
            INT8_FULL: tl.constexpr):
    """Element code (int32) of fp32 bits ``b`` divided by 2^s, exactly, one rounding."""
    neg = (b >> 31) & 1
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    sig, e = _normalize(a)
    code, huge = _round_sig(sig, e - 23 - s, _false_like(sig), EL_MBITS, EL_EMIN, EL_BIAS,
                            EL_IS_INT, ROUNDING, True)
    return _finish(code, huge, neg, a, EL_IS_INT, EL_MAXCODE, EL_SIGNBIT, EL_NAN, EL_INF,
                   OVERFLOW, SIGNED_ZERO, INT8_FULL)


@triton.jit
def _rceil_f32_log2(amax, EL_MAXF32: tl.constexpr):
    """ceil(fl32(log2(fl32(amax / max_normal)))) decided on integers (torchao 0.18 RCEIL):
    for q = 2^k (1 + m 2^-23) the float32 log2 is exactly k iff m < ln2 * 2^(e-1), e the
    exponent of the float32 binade holding k + eps (see mxref/_kernels.py:rceil_via_f32_log2)."""
    q = _f32_div(amax, tl.full(amax.shape, EL_MAXF32, tl.int32))
    sig, k = _normalize(q)
    m = sig - 0x800000
    kk = tl.where(k > 0, k, -k - 1)
    e = _bitlen32(kk) - 1
    ln2 = tl.full(m.shape, _LN2_Q32, tl.int64)
    stays = (m.to(tl.int64) << 34) < (ln2 << (e + 1).to(tl.int64))
    s = tl.where(stays, k, k + 1)
    s = tl.where(k == 0, 1, s)
    s = tl.where(m == 0, k, s)
    return tl.where(q == 0, -127, s)


@triton.jit
def _mxt_amax(amax, LOG2_F32: tl.constexpr, ZERO_AMAX_MIN: tl.constexpr):
    """microxcaling torch (zero_block_amax='min_normal', scale_log2_f32): the finite block amax
    bits rewritten so the plain floor rule gives floor(fl32(log2(amax + 2^-126 [amax == 0]))):
    an amax whose float32 log2 rounds up to the integer j = E + 1 becomes 2^j (Inf bits for
    j = 128, read as 2^128 by _normalize; 0 for j <= -127, the clamp's byte anyway). Decided on
    integers: log2 rounds up iff d = 2^24 - sig24 <= floor(ln2 * 2^(24 - t)), 2^-t half an
    ulp of the float32 binade next to j on log2's side (see mxref/_kernels/semantics.py:
    floor_via_f32_log2)."""
    if ZERO_AMAX_MIN:
        amax = tl.where(amax == 0, 0x800000, amax)
    if LOG2_F32:
        sig, e = _normalize(amax)
        j = e + 1
        aj = tl.where(j < 0, -j, j)
        b = _bitlen32(tl.where(aj == 0, 1, aj)) - 1
        pow2 = (j > 0) & ((aj & (aj - 1)) == 0)
        t = 24 - b + tl.where(pow2, 1, 0)
        ln2 = tl.full(amax.shape, _LN2_Q32, tl.int64)
        dmax = ln2 >> (tl.minimum(t, 40) + 8).to(tl.int64)
        up = (amax != 0) & (j != 0) & (sig != 0x800000) & \
            ((0x1000000 - sig).to(tl.int64) <= dmax)
        amax = tl.where(up, tl.maximum(j + 127, 0) << 23, amax)
    return amax


@triton.jit
def _mxt_element(code, b, s, EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr,
                 EL_EMIN: tl.constexpr, EL_SIGNBIT: tl.constexpr):
    """element_round_f32 (microxcaling torch) on top of the ties-away code of fp32 bits b at
    exponent s: A = fl32(x / 2^s) == 0 (x / 2^s <= 2^-150) is an exact zero (+0); |x| / 2^s =
    0.5 - 2^-25 quanta (sig 2^24 - 1) rounds to one quantum (fl32(0.5 - 2^-25 + 0.5) = 1.0)."""
    a = b & 0x7FFFFFFF
    sig, e = _normalize(a)
    under = (a != 0) & (a < _F32_INF) & ((e - s < -150) | ((e - s == -150) & (sig == 0x800000)))
    if EL_IS_INT:
        q = -EL_MBITS
    else:
        q = EL_EMIN - EL_MBITS
    bump = (a < _F32_INF) & (sig == 0xFFFFFF) & (e - 23 - s == q - 25)
    neg = (b >> 31) & 1
    if EL_IS_INT:
        one = tl.where(neg != 0, 0xFF, 1)
    else:
        one = 1 | (neg << EL_SIGNBIT)
    code = tl.where(bump, one, code)
    return tl.where(under, 0, code)


@triton.jit
def _shared_exponent(amax, EL_EMAX: tl.constexpr, EL_MAXSIG: tl.constexpr,
                     EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
                     SCALE_RULE: tl.constexpr, RCEIL_ANY_UP: tl.constexpr,
                     RCEIL_LOG2: tl.constexpr):
    """Unclamped shared exponent of a block with non-negative amax bits (Inf = 2^128)."""
    sig, e = _normalize(amax)
    s = e - EL_EMAX
    if SCALE_RULE == 1:                                   # rceil
        if RCEIL_LOG2:
            s = _rceil_f32_log2(amax, EL_MAXF32)
        else:
            s = s + tl.where(sig > EL_MAXSIG, 1, 0)
            if RCEIL_ANY_UP:       # triton_kernels: any nonzero subnormal fl(amax/max) -> 2^-126
                t = e - EL_EMAX + 150
                up = (t >= 1) | ((t == 0) & (sig > EL_MAXSIG))
                s = tl.where(s <= -126, tl.where(up, -126, -127), s)
    elif SCALE_RULE == 2:                                 # ceil
        s = s + tl.where(sig > 0x800000, 1, 0)
    elif SCALE_RULE == 3:                                 # even
        s = s + tl.where(sig >= EL_EVENTHR, 1, 0)
    elif SCALE_RULE == 4:                                 # round_down
        s = s - tl.where(sig < EL_MAXSIG, 1, 0)
    return tl.where(amax == 0, -127, s)



@triton.jit
def _shared_exponent_normal(amax, EL_EMAX: tl.constexpr, EL_MAXSIG: tl.constexpr,
                            EL_EVENTHR: tl.constexpr, SCALE_RULE: tl.constexpr):
    """Fast twin of :func:`_shared_exponent` for the fast kernels: the E8M0 byte (s + 127,
    floored at 0) of a block whose amax bits are zero or a finite normal number, without the
    RCEIL subnormal / float32-log2 variants (tests/test_triton_twins.py checks the two agree)."""
    ea = amax >> 23
    mant = amax & 0x7FFFFF
    if SCALE_RULE == 0:                        # floor
        t = ea - EL_EMAX
    elif SCALE_RULE == 1:                      # rceil: sig > M
        t = ea - EL_EMAX + tl.where(mant > EL_MAXSIG - 0x800000, 1, 0)
    elif SCALE_RULE == 2:                      # ceil: sig > 1
        t = ea - EL_EMAX + tl.where(mant > 0, 1, 0)
    elif SCALE_RULE == 3:                      # even: sig >= 2 - 2^-(mbits+1)
        t = ea - EL_EMAX + tl.where(mant >= EL_EVENTHR - 0x800000, 1, 0)
    else:                                      # round_down: - [sig < M]
        t = ea - EL_EMAX - tl.where(mant < EL_MAXSIG - 0x800000, 1, 0)
    return tl.maximum(t, 0)


@triton.jit
def _block_poisoned(has_nan, has_inf, NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr):
    """Whether a block's NaN / Inf poisons it (nan_in_block / inf_in_block = poison)."""
    poison = has_nan & ~has_nan                   # all False
    if INF_MODE == 0:
        poison = poison | has_inf
    if NAN_POISON:
        poison = poison | has_nan
    return poison


@triton.jit
def _mx_scale_finish(s, nan_scale, has_inf, INF_MODE: tl.constexpr,
                     SCALE_OVF_NAN: tl.constexpr):
    """From an unclamped shared exponent: scale_overflow (NaN or clamp), the [-127, 127] clamp,
    inf_in_block = scale_max (TE satfinite: Inf amax -> 2^127). Returns (byte, s, nan_scale)."""
    if SCALE_OVF_NAN:
        nan_scale = nan_scale | (s > 127)
    s = tl.minimum(tl.maximum(s, -127), 127)
    if INF_MODE == 1:
        s = tl.where(has_inf, 127, s)
    byte = tl.where(nan_scale, 255, s + 127)
    return byte, s, nan_scale


@triton.jit
def _mx_scale_byte(amax, has_nan, has_inf, EL_EMAX: tl.constexpr, EL_MAXSIG: tl.constexpr,
                   EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
                   SCALE_RULE: tl.constexpr, RCEIL_ANY_UP: tl.constexpr,
                   RCEIL_LOG2: tl.constexpr, NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr,
                   SCALE_OVF_NAN: tl.constexpr):
    """E8M0 byte of MX blocks from their finite amax bits and NaN / Inf flags (docs/semantics.md
    steps 2-3; an Inf is read as 2^128 under inf_in_block='exponent'). Returns
    (byte, s, nan_scale): s the clamped shared exponent, nan_scale the blocks whose byte is 0xFF."""
    if INF_MODE == 2:
        amax = tl.where(has_inf, _F32_INF, amax)
    s = _shared_exponent(amax, EL_EMAX, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE,
                         RCEIL_ANY_UP, RCEIL_LOG2)
    return _mx_scale_finish(s, _block_poisoned(has_nan, has_inf, NAN_POISON, INF_MODE), has_inf,
                            INF_MODE, SCALE_OVF_NAN)


# =========================================================================================
# NVFP4 block scales
# =========================================================================================
@triton.jit
def _e4m3_code_of_f32(x):
    """E4M3 code of non-negative fp32 bits x, RNE, satfinite (NaN -> 0x7F)."""
    return _encode(x, 0, False, 3, -6, 7, 0x7E, 7, 0x7F, -1, 0, 0, 0, False, False)


@triton.jit
def _nvfp4_block_scales(a, t, sc6, NAN_POISON: tl.constexpr, INF_POISON: tl.constexpr,
                        ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr,
                        SCALE_MIN_TINY: tl.constexpr):
    """E4M3 block scale codes (int32) and the poisoned flags of the [BLOCK_ROWS, 16] fp32
    magnitudes ``a`` (flushed where the profile flushes), with each block's tensor constants
    T and S_enc / 6 (te). Shared by the RNE and the stochastic-rounding NVFP4 kernels (the
    block scale never depends on the rounding mode)."""
    amax = _max_along(tl.where(a < _F32_INF, a, 0), 1)
    has_nan = _max_along(tl.where(a > _F32_INF, 1, 0), 1) > 0
    has_inf = _max_along(tl.where(a == _F32_INF, 1, 0), 1) > 0
    poison = amax < 0                # all False
    if NAN_POISON:
        poison = poison | has_nan
    if INF_POISON:
        poison = poison | has_inf
    amax = tl.where(has_inf, _F32_INF, amax)
    if ORDER == 0:     # exact: E4M3_rne_satfinite(amax / (6 T)), one rounding
        sa, ea = _normalize(amax)
        st, et = _f32_parts(t)
        num = sa.to(tl.int64) << 36
        den = st.to(tl.int64) * 6
        q = num // den
        sticky = (num - q * den) != 0
        sc, huge = _round_sig(tl.where(amax == 0, 1, q), ea - 23 - 36 - et, sticky, 3, -6, 7,
                              False, 0, False)
        sc = tl.where(sc > 0x7E, 0x7E, sc)
        sc = tl.where(amax == 0, 0, sc)
    elif ORDER == 1:   # te: E4M3(min(fl(amax * fl(S_enc / 6)), FLT_MAX))
        sdb = _f32_min_pos(_f32_mul(amax, sc6), tl.full(amax.shape, _F32_MAX, tl.int32))
        sc = _e4m3_code_of_f32(sdb)
    elif ORDER == 3:   # triton_kernels ROUND_NEAREST: E4M3(min(fl(amax / 6), 448)), no floor
        sv = _f32_div(amax, tl.full(amax.shape, _F32_SIX, tl.int32))
        sv = tl.where(sv <= _F32_INF, tl.minimum(sv, _F32_448), sv)
        sc = _e4m3_code_of_f32(sv)
    else:              # torchao: E4M3(clamp(fl(fl(amax / 6) / T), 2^-6, 448))
        sv = _f32_div(amax, tl.full(amax.shape, _F32_SIX, tl.int32))
        if TWO_LEVEL:
            sv = _f32_div(sv, t)
        sv = tl.where(sv <= _F32_INF,
                      tl.minimum(tl.maximum(sv, _F32_E4M3_TINY), _F32_448), sv)
        sc = _e4m3_code_of_f32(sv)
    if SCALE_MIN_TINY:
        sc = tl.maximum(sc, 0x08)
    return sc, poison



# =========================================================================================
# constexpr dictionaries (the launchers and the AOT test use the same ones)
# =========================================================================================
def element_constexprs(fmt) -> dict:
    """EL_* constexprs of a block format's element format (from mxref.formats)."""
    el = get_format(fmt).element
    p = el.kernel_params()
    F = _F
    return {
        "EL_IS_INT": bool(p[F.P_KIND] == 1),
        "EL_MBITS": int(p[F.P_MBITS]),
        "EL_EMIN": int(p[F.P_EMIN]) if p[F.P_KIND] == 0 else 0,
        "EL_BIAS": int(p[F.P_BIAS]),
        "EL_EMAX": int(p[F.P_EMAX]),
        "EL_MAXCODE": int(p[F.P_MAXCODE]),
        "EL_SIGNBIT": int(p[F.P_SIGNBIT]),
        "EL_NAN": int(p[F.P_NAN]),
        "EL_INF": int(p[F.P_INF]),
        "EL_MAXSIG": int(p[F.P_MAXSIG]),
        "EL_EVENTHR": int(p[F.P_EVENTHR]),
        "EL_MAXF32": int(p[F.P_MAXF32]),
    }


def profile_constexprs(profile, amax_floor: bool = False, nan_element: bool = False,
                       mxt: bool = False) -> dict:
    """Profile knobs as the MX kernels' constexprs; KernelUnsupported for what they lack.
    ``amax_floor``: the caller's kernel takes the AMAX_FLOOR constexpr (only
    triton_quant.mx_quantize_kernel); other kernels refuse a profile with an amax floor."""
    pr = get_profile(profile)
    if pr.rounding == "stochastic":
        raise KernelUnsupported(
            f"profile {pr.name!r}: stochastic rounding is not implemented by the Triton kernels")
    if pr.nan_element != "nan" and not nan_element:
        raise KernelUnsupported(
            f"profile {pr.name!r}: nan_element={pr.nan_element!r} is implemented only by "
            "triton_quant.mx_quantize / mx_convert")
    if pr.amax_floor and not amax_floor:
        raise KernelUnsupported(
            f"profile {pr.name!r}: amax_floor is implemented only by triton_quant.mx_quantize")
    mxt_knobs = {"LOG2_F32": bool(pr.scale_log2_f32), "ELEM_F32": bool(pr.element_round_f32),
                 "ZERO_AMAX_MIN": pr.zero_block_amax == "min_normal"}
    if any(mxt_knobs.values()) and not mxt:
        raise KernelUnsupported(
            f"profile {pr.name!r}: scale_log2_f32 / element_round_f32 / zero_block_amax "
            "(microxcaling torch) are implemented only by triton_quant.mx_quantize")
    return {
        "SCALE_RULE": SCALE_RULES.index(pr.scale_rule),
        "ROUNDING": ROUNDINGS.index(pr.rounding),
        "OVERFLOW": OVERFLOWS.index(pr.overflow),
        "NAN_POISON": pr.nan_in_block == "poison",
        "INF_MODE": INF_POLICIES.index(pr.inf_in_block),
        "SIGNED_ZERO": SIGNED_ZERO.index(pr.signed_zero),
        "FLUSH": bool(pr.flush_fp32_subnormals),
        "RCEIL_ANY_UP": pr.rceil_subnormal == "any_up",
        "SCALE_OVF_NAN": pr.scale_overflow == "nan",
        "ZEXP": int(pr.zero_scale_elem_exp),
        "RCEIL_LOG2": bool(pr.rceil_f32_log2),
        "INT8_FULL": pr.int8_min == "full",
        **({"AMAX_FLOOR": int(pr.amax_floor)} if amax_floor else {}),
        **({"NAN_ELEM_MAX": pr.nan_element == "signed_max"} if nan_element else {}),
        **(mxt_knobs if mxt else {}),
    }


