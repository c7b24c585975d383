"""Every profile knob of the Numba reference, each implemented once (SoftFloat's specialize.h).

The loops of :mod:`.mx`, :mod:`.nvfp4` and the other integer kernels of mxref (fp8fp4,
corrections, decompose) call these small functions blindly, handing them the profile vector
(or one of its entries); none of them restates a rule:

* ``overflow``: :func:`overflow_code` / :func:`finish_code`;
* ``signed_zero``: :func:`zero_code`; NaN elements of unpoisoned blocks: :func:`nan_element_code`;
* ``int8_min``: :func:`finish_element` (scalar) and :func:`int_full` (the vectorized encoders);
* ``flush_fp32_subnormals``: :func:`encode_f32` (elements) and :func:`block_amax` (amax);
* ``scale_rule``, ``rceil_subnormal``, ``scale_overflow``, ``rceil_f32_log2``:
  :func:`shared_exponent` (the spec) and its fast twin :func:`shared_exponent_thresholds`
  (two significand thresholds from :func:`scale_thresholds`, valid where
  :func:`thresholds_exact`);
* ``amax_floor``: :func:`shared_exponent` (the rule reads max(amax, floor); not in the twin);
* ``nan_in_block``, ``inf_in_block``: :func:`block_poisoned`, :func:`nonfinite_policy`,
  :func:`block_policy`;
* ``zero_scale_elem_exp``: :func:`element_exponent`;
* ``nvfp4_order``, ``nvfp4_scale_min``: :func:`nvfp4_block_scale` (Four-over-Six under the
  'te' order: :func:`te_4over6_block_scale`);
* ``rounding``: the ``mode`` argument of :func:`.f32.round_magnitude`.

Format and profile knobs arrive as small int64 vectors (see formats.P_* and profiles.K_*), so
one compiled kernel serves every format and profile.
"""
from __future__ import annotations

import numpy as np

from ..formats import (P_BIAS, P_EMAX, P_EMIN, P_EVENTHR, P_INF, P_KIND, P_MAXCODE, P_MAXF32,
                       P_MAXSIG, P_MBITS, P_NAN, P_SIGNBIT)
from ..profiles import (K_FLUSH, K_INF, K_INT8_MIN, K_NAN, K_NV_MIN, K_OVERFLOW, K_RCEIL_SUB,
                        K_ROUNDING, K_RCEIL_LOG2, K_SCALE_OVF, K_SCALE_RULE, K_SZERO, K_ZEXP,
                        N_KNOBS)
from ..profiles import K_AMAX_FLOOR
from ..profiles import K_ELEM_F32, K_LOG2_F32, K_ZERO_AMAX
from ..profiles import K_NAN_ELEM
from .f32 import (_JIT, F32_448, F32_E4M3_TINY, F32_INF, F32_MAXBITS, F32_PARAMS, F32_QNAN,
                  F32_SIX, RNE, STOCHASTIC, TIES_AWAY, bit_length, exact_quotient, f32_div,
                  f32_min_pos,
                  f32_mul, f32_parts, njit, normalize_f32, round_magnitude, to_f32_bits)

NAN_SCALE = 128          # sentinel shared exponent meaning "scale byte 0xFF"
FINITE_RULE = -1001      # nonfinite_policy: no NaN/Inf override, the finite amax decides

# policy enums (indices into the tuples in profiles.py)
SATURATE, NONSATURATING = 0, 1
POISON = 0
SCALE_MAX = 1            # inf_in_block: Inf amax -> 0xFE
FLOOR, RCEIL, CEIL, EVEN, ROUND_DOWN = 0, 1, 2, 3, 4
SZ_PRESERVE, SZ_INPUT_TO_POS, SZ_NEVER_NEG = 0, 1, 2
NV_EXACT, NV_TE, NV_TORCHAO, NV_TRITON_KERNELS = 0, 1, 2, 3
INT8_SYMMETRIC, INT8_FULL = 0, 1

SAT_RNE = np.zeros(N_KNOBS, dtype=np.int64)   # profile vector: saturate, RNE, preserve signed zero


# ---- elements: overflow, signed zero, NaN, flush --------------------------------------------
@njit(**_JIT)
def overflow_code(fp, overflow_mode):
    """Magnitude code of an element that overflowed: max normal (saturate), else Inf, else NaN."""
    if overflow_mode == SATURATE:
        return fp[P_MAXCODE]
    if fp[P_INF] >= 0:
        return fp[P_INF]
    return fp[P_NAN]


@njit(**_JIT)
def finish_code(code, overflowed, neg, fp, overflow_mode):
    """Apply the overflow policy and the sign; returns the element code as an int."""
    if overflowed:
        code = overflow_code(fp, overflow_mode)
    if fp[P_KIND] == 1:
        return ((-code) & 0xFF) if neg else code
    return code | (neg << fp[P_SIGNBIT])


@njit(**_JIT)
def int_full(fp, pp):
    """1 when a negative element may reach the magnitude code max_code + 1: an integer format
    under int8_min='full' (MXINT8 0x80 = -2.0), else 0."""
    return 1 if fp[P_KIND] == 1 and pp[K_INT8_MIN] == INT8_FULL else 0


@njit(**_JIT)
def finish_element(code, overflowed, neg, fp, pp):
    """:func:`finish_code` under the whole profile vector: with :func:`int_full`, a negative
    element whose magnitude overflowed max_code (rounded to 128 or beyond, or -Inf) is the code
    of -(max_code + 1), MXINT8's 0x80 (saturation to the format's true minimum)."""
    if overflowed and neg and int_full(fp, pp) == 1:
        return (-(fp[P_MAXCODE] + 1)) & 0xFF
    return finish_code(code, overflowed, neg, fp, pp[K_OVERFLOW])


@njit(**_JIT)
def zero_code(neg, exact_zero_input, fp, szero):
    if fp[P_KIND] == 1:
        return 0
    if szero == SZ_NEVER_NEG or (szero == SZ_INPUT_TO_POS and exact_zero_input):
        return 0
    return neg << fp[P_SIGNBIT]


@njit(**_JIT)
def nan_element_code(fp):
    """Code written for a NaN element when its block is not poisoned (TE-style policy)."""
    return fp[P_NAN] if fp[P_NAN] >= 0 else 0


NAN_ELEM_SIGNED_MAX = 1  # nan_element: 'signed_max'


@njit(**_JIT)
def nan_element(neg, fp, pp):
    """Code of a NaN element of an unpoisoned block (or of a lone conversion) under the
    ``nan_element`` knob: 'nan' -> :func:`nan_element_code`; 'signed_max' -> the max normal
    with the input's sign in a format without NaN (AMD gfx950 host model ``fcbx::nan``:
    E2M1 sign|0b0111, E2M3/E3M2 sign|0b011111), the NaN code with the sign where it has one."""
    if pp[K_NAN_ELEM] == NAN_ELEM_SIGNED_MAX and fp[P_KIND] != 1:
        mag = fp[P_NAN] if fp[P_NAN] >= 0 else fp[P_MAXCODE]
        return mag | (neg << fp[P_SIGNBIT])
    return nan_element_code(fp)


@njit(**_JIT)
def encode_f32(b, s, fp, pp, rbits):
    """Element code of fp32 bits ``b`` divided by ``2**s`` (exactly, one rounding)."""
    neg = np.int64(b >> 31)
    a = np.int64(b & 0x7FFFFFFF)
    if a > F32_INF:
        return nan_element(neg, fp, pp)
    if a == F32_INF:
        return finish_element(0, True, neg, fp, pp)
    if a == 0:
        return zero_code(neg, True, fp, pp[K_SZERO])
    ea = a >> 23
    if ea == 0:
        if pp[K_FLUSH] != 0:
            return zero_code(neg, True, fp, pp[K_SZERO])
        sig = a
        p = bit_length(a) - 1
        exp2 = -149 - s
    else:
        sig = (a & 0x7FFFFF) | 0x800000
        p = 23
        exp2 = ea - 150 - s
    if pp[K_ELEM_F32] == 1:
        return encode_f32_half_up(neg, sig, p, exp2, fp, pp)
    code, ovf = round_magnitude(sig, p, exp2, False, fp, pp[K_ROUNDING], rbits)
    if code == 0:
        return zero_code(neg, False, fp, pp[K_SZERO])
    return finish_element(code, ovf, neg, fp, pp)


@njit(**_JIT)
def encode_f32_half_up(neg, sig, p, exp2, fp, pp):
    """element_round_f32 (microxcaling torch, mx/elemwise_ops.py::_quantize_elemwise_core and
    _round_mantissa 'nearest'): the element of the nonzero finite sig * 2^exp2 = x / 2^s as
    float32 computes it: A = fl32(x / 2^s); A == 0 (x / 2^s <= 2^-150) is an exact zero input
    (torch.sign(-0.0) = 0: +0); else sign(A) * floor(fl32(|A| * 2^k + 0.5)) with |A| * 2^k
    exact (k puts one quantum at 1). That float32 sum is exact except at |A| * 2^k =
    0.5 - 2^-25 (sig 2^24 - 1, one quantum 2^25 above its lsb), where the tie 1 - 2^-25
    rounds to 1.0 (even): one quantum instead of 0. Elsewhere floor(|A| * 2^k + 0.5), ties
    away from zero."""
    if p + exp2 < -150 or (p + exp2 == -150 and sig == (1 << p)):
        return zero_code(neg, True, fp, pp[K_SZERO])
    q = -fp[P_MBITS] if fp[P_KIND] == 1 else fp[P_EMIN] - fp[P_MBITS]
    if p == 23 and sig == (1 << 24) - 1 and exp2 == q - 25:
        return finish_element(1, False, neg, fp, pp)
    code, ovf = round_magnitude(sig, p, exp2, False, fp, TIES_AWAY, 0)
    if code == 0:
        return zero_code(neg, False, fp, pp[K_SZERO])
    return finish_element(code, ovf, neg, fp, pp)


@njit(**_JIT)
def element_parts(code, fp):
    """Decode an element code: (kind, neg, sig, exp2); kind 0 finite, 1 inf, 2 nan."""
    if fp[P_KIND] == 1:
        k = code - 256 if code >= 128 else code
        return 0, 1 if k < 0 else 0, abs(k), -fp[P_MBITS]
    sbit = fp[P_SIGNBIT]
    neg = (code >> sbit) & 1
    mag = code & ((1 << sbit) - 1)
    if fp[P_NAN] >= 0:
        if fp[P_INF] >= 0:
            if mag == fp[P_INF]:
                return 1, neg, 0, 0
            if mag > fp[P_INF]:
                return 2, neg, 0, 0
        elif mag == fp[P_NAN]:
            return 2, neg, 0, 0
    m = fp[P_MBITS]
    e = mag >> m
    mant = mag & ((1 << m) - 1)
    if e == 0:
        return 0, neg, mant, fp[P_EMIN] - m
    return 0, neg, mant | (1 << m), e - fp[P_BIAS] - m


@njit(**_JIT)
def code_to_f32(code, fp, f32p):
    kind, neg, sig, exp2 = element_parts(code, fp)
    if kind == 2:
        return F32_QNAN
    if kind == 1:
        return F32_INF | (neg << 31)
    return to_f32_bits(neg, sig, exp2, False, f32p)


# ---- the shared exponent: scale_rule, rceil_subnormal, scale_overflow, rceil_f32_log2 --------
@njit(**_JIT)
def shared_exponent(amax, fp, pp):
    """Unbiased shared exponent for a block whose finite amax has fp32 bits ``amax``.

    Returns NAN_SCALE when the profile turns an out-of-range exponent into a NaN scale.
    ``amax_floor``: the rule reads max(amax, floor) (an all-zero block included; DeepSeek-V4).
    """
    if amax < pp[K_AMAX_FLOOR]:
        amax = pp[K_AMAX_FLOOR]
    if amax == 0 and pp[K_ZERO_AMAX] == ZERO_AMAX_MIN_NORMAL:
        amax = 0x00800000                    # microxcaling torch: amax + 2^-126 * (amax == 0)
    if amax == 0:
        return -127                          # all-zero block: byte 0x00 (every rule)
    sig, e = normalize_f32(amax)
    rule = pp[K_SCALE_RULE]
    if rule == FLOOR and pp[K_LOG2_F32] == 1:
        return clamp_exponent(floor_via_f32_log2(amax) - fp[P_EMAX], pp)
    s = e - fp[P_EMAX]
    if rule == RCEIL and pp[K_RCEIL_LOG2] == 1:
        return clamp_exponent(rceil_via_f32_log2(amax, fp), pp)
    if rule == RCEIL:
        if sig > fp[P_MAXSIG]:
            s += 1
        if pp[K_RCEIL_SUB] == 1 and s <= -126:
            # triton_kernels: fl(amax/max) subnormal and nonzero -> exponent field 1 (B5).
            # fl(amax/max) is nonzero iff amax/max > 2^-150.
            t = e - fp[P_EMAX] + 150
            s = -126 if (t >= 1 or (t == 0 and sig > fp[P_MAXSIG])) else -127
    elif rule == CEIL:
        if sig > (1 << 23):
            s += 1
    elif rule == EVEN:
        if sig >= fp[P_EVENTHR]:
            s += 1
    elif rule == ROUND_DOWN:
        if sig < fp[P_MAXSIG]:
            s -= 1
    return clamp_exponent(s, pp)


@njit(**_JIT)
def clamp_exponent(s, pp):
    if s > 127:
        return NAN_SCALE if pp[K_SCALE_OVF] == 1 else 127
    if s < -127:
        return -127
    return s


LN2_Q32 = 2977044471     # floor(ln 2 * 2^32); every threshold below is > 1e-3 from an integer


@njit(**_JIT)
def rceil_via_f32_log2(amax, fp):
    """ceil(fl32(log2(q))) with q = fl32(amax / max_normal), as torchao 0.18's RCEIL computes it.

    Decided on integers: for q = 2^k (1 + m 2^-23), log2(q) = k + eps with
    eps = log2(1 + m 2^-23); the float32 result is exactly k (so the ceiling stays k) iff eps is
    below half an ulp of the float32 binade that holds k + eps, i.e. iff m < ln2 * 2^(e-1)
    with e that binade's exponent. (Assumes a log2 accurate to well under the smallest margin,
    0.08 ulp; checked against torchao on every coverage class in tests/test_peers.py.)
    """
    q = f32_div(amax, fp[P_MAXF32], F32_PARAMS)
    if q == 0:
        return -127                      # log2(0) = -inf
    sig, k = normalize_f32(q)
    m = sig - (1 << 23)
    if m == 0:
        return k
    if k == 0:
        return 1
    e = bit_length(k) - 1 if k > 0 else bit_length(-k - 1) - 1   # binade of |k + eps|
    if (m << 34) < (LN2_Q32 << (e + 1)):
        return k
    return k + 1


ZERO_AMAX_MIN_NORMAL = 1   # zero_block_amax: 'min_normal'

# floor_via_f32_log2: for the integer j = E + 1 just above a binade, the float32 log2 of
# sig24 * 2^(E-23) rounds up to j iff d = 2^24 - sig24 < 2^24 (1 - 2^(-2^-t)), 2^-t half an
# ulp of the float32 binade next to j on the side log2 comes from (below j > 0, above |j| for
# j < 0). Largest such d by t (index); the bounds' fractional parts, 0.72 0.36 0.18 0.09 0.55
# 0.77 0.39 0.69 0.35 for t = 17..25, keep every input >= 0.09 input ulp from the rounding
# boundary. j in [-148, 128] gives t in [17, 25].
F32LOG2_FLOOR_DMAX = np.array([0] * 17 + [88, 44, 22, 11, 5, 2, 1, 0, 0] + [0] * 6,
                              dtype=np.int64)


@njit(**_JIT)
def floor_via_f32_log2(amax):
    """floor(fl32(log2(a))) for a positive finite fp32 magnitude ``a`` (bits), decided on
    integers: microxcaling's torch path, ``torch.floor(torch.log2(amax))`` on float32
    (mx/mx_ops.py::_shared_exponents). An amax within a few ulps below a power of two 2^j
    (|j| >= 2) reads as 2^j (fp32 0x40FFFFFF: log2 -> 3.0). Assumes a correctly rounded
    float32 log2 at these inputs (checked against torch's CPU log2 on every binade in
    tests/test_profile_microxcaling_torch.py)."""
    sig, e = normalize_f32(amax)
    j = e + 1
    if j == 0 or sig == (1 << 23):
        return e
    if j > 0:
        t = 24 - (bit_length(j) - 1) + (1 if (j & (j - 1)) == 0 else 0)
    else:
        t = 24 - (bit_length(-j) - 1)
    if (1 << 24) - sig <= F32LOG2_FLOOR_DMAX[t]:
        return j
    return e


@njit(**_JIT)
def element_exponent(s, pp):
    """Exponent the elements of a block with shared exponent ``s`` are divided by: a 0x00 scale
    (s = -127) divides by 2^zero_scale_elem_exp (-127 OCP, -126 / 0 torchao)."""
    return pp[K_ZEXP] if s == -127 else s


@njit(**_JIT)
def thresholds_exact(pp):
    """Whether :func:`shared_exponent_thresholds` equals :func:`shared_exponent` on every finite
    normal (or zero) amax under profile vector ``pp``: no flush, no any_up RCEIL edge, no NaN
    on exponent overflow, no float32-log2 RCEIL."""
    return (pp[K_FLUSH] == 0 and pp[K_RCEIL_SUB] == 0 and pp[K_SCALE_OVF] == 0
            and pp[K_RCEIL_LOG2] == 0 and pp[K_AMAX_FLOOR] == 0
            and pp[K_LOG2_F32] == 0 and pp[K_ZERO_AMAX] == 0)


@njit(**_JIT)
def scale_thresholds(fp, pp):
    """The scale rule of :func:`shared_exponent` as int32 ``(up, down, e_off)`` for
    :func:`shared_exponent_thresholds`: the exponent goes up by one when the 24-bit
    significand of amax exceeds ``up``, down by one when it is below ``down``."""
    rule = pp[K_SCALE_RULE]
    up = 1 << 24
    if rule == RCEIL:
        up = fp[P_MAXSIG]
    elif rule == CEIL:
        up = 1 << 23
    elif rule == EVEN:
        up = fp[P_EVENTHR] - 1
    down = fp[P_MAXSIG] if rule == ROUND_DOWN else 0
    return np.int32(up), np.int32(down), np.int32(127 + fp[P_EMAX])


@njit(inline="always", **_JIT)
def shared_exponent_thresholds(a, up, down, e_off):
    """Branch-free, vectorizable version of :func:`shared_exponent`: the same exponent for a
    zero or normal finite amax ``a`` (int32 fp32 bits) under a profile with
    ``thresholds_exact(pp)``, with ``(up, down, e_off) = scale_thresholds(fp, pp)``."""
    i32 = np.int32
    sg = (a & i32(0x7FFFFF)) | i32(0x800000)
    e = (a >> i32(23)) - e_off + i32(sg > up) - i32(sg < down)
    e = max(min(e, i32(127)), i32(-127))
    return i32(-127) if a == i32(0) else e


# ---- the block: nan_in_block, inf_in_block ---------------------------------------------------
@njit(**_JIT)
def block_amax(bits, r, lo, hi, flush):
    """(amax_bits, has_nan, has_inf) of one block; amax over finite elements only."""
    m = np.uint32(0)
    for i in range(lo, hi):
        m = max(m, bits[r, i] & np.uint32(0x7FFFFFFF))
    if m < F32_INF:                          # fast path: the block is finite
        if flush and m < 0x800000:
            m = np.uint32(0)
        return np.int64(m), False, False
    m = np.uint32(0)
    has_nan = False
    has_inf = False
    for i in range(lo, hi):
        a = bits[r, i] & np.uint32(0x7FFFFFFF)
        if a > F32_INF:
            has_nan = True
        elif a == F32_INF:
            has_inf = True
        elif a > m and not (flush and a < 0x800000):
            m = a
    return np.int64(m), has_nan, has_inf


@njit(**_JIT)
def block_poisoned(has_nan, has_inf, pp):
    """Whether a block's NaN / Inf poisons it (nan_in_block / inf_in_block = poison): its scale
    becomes NaN and its elements carry no value (docs/semantics.md, step 2)."""
    return (has_nan and pp[K_NAN] == POISON) or (has_inf and pp[K_INF] == POISON)


@njit(**_JIT)
def nonfinite_policy(has_nan, has_inf, fp, pp):
    """Shared exponent an MX block's NaN / Inf content imposes: NAN_SCALE when poisoned; with
    an Inf, 127 (scale_max: TE's satfinite 0xFE, B6) or the rule applied to 2^128 (exponent:
    the Inf bits read as a number); FINITE_RULE when the finite amax decides."""
    if block_poisoned(has_nan, has_inf, pp):
        return NAN_SCALE
    if has_inf:
        if pp[K_INF] == SCALE_MAX:
            return 127
        return shared_exponent(F32_INF, fp, pp)
    return FINITE_RULE


@njit(**_JIT)
def block_policy(has_nan, has_inf, amax, fp, pp):
    """Shared exponent of an MX block from what :func:`block_amax` found in it (finite amax
    bits, has_nan, has_inf): :func:`nonfinite_policy`, else :func:`shared_exponent`."""
    s = nonfinite_policy(has_nan, has_inf, fp, pp)
    return shared_exponent(amax, fp, pp) if s == FINITE_RULE else s


@njit(**_JIT)
def encode_fast_ok(pp):
    """Whether the vectorized element encoders of .mx serve profile vector ``pp`` (RNE /
    ties_away / ties_zero, no flush, signed zeros preserved)."""
    return (pp[K_FLUSH] == 0 and pp[K_ROUNDING] != STOCHASTIC and pp[K_SZERO] == SZ_PRESERVE
            and pp[K_NAN_ELEM] == 0 and pp[K_ELEM_F32] == 0)


# ---- NVFP4 block scale: nvfp4_order, nvfp4_scale_min -----------------------------------------
@njit(**_JIT)
def nvfp4_block_scale(bamax, order, two_level, t, sck, divisor, e4p, f32p, pp):
    """E4M3 code of the block scale from the finite block amax (fp32 bits) ``bamax``.

    The scale maps the block amax to ``divisor`` (6, the E2M1 max; 4 for the 4/6 alternative
    of corrections, 'exact' and 'te' orders only): 'exact' rounds amax / (divisor T) once;
    'te' multiplies by ``sck`` = fl(S_enc * fl(1 / divisor)); 'torchao' divides by 6 then T.
    """
    if order == NV_EXACT:
        if bamax == 0:
            code = 0
        else:
            sa, ea = f32_parts(bamax)
            st, et = f32_parts(t)
            q, e, sticky = exact_quotient(sa, ea, divisor * st, et)
            code, ovf = round_magnitude(q, bit_length(q) - 1, e, sticky, e4p, RNE, 0)
            if ovf:
                code = e4p[P_MAXCODE]
    elif order == NV_TE:
        sdb = f32_min_pos(f32_mul(bamax, sck, f32p), F32_MAXBITS)
        code = encode_f32(sdb, 0, e4p, SAT_RNE, 0)
    elif order == NV_TRITON_KERNELS:
        # triton_kernels downcast_to_mxfp_torch ROUND_NEAREST: fl(amax / 6).clamp(max=448)
        # .to(float8_e4m3fn): RNE, subnormal scales and 0 kept, NaN stays NaN
        s = f32_div(bamax, F32_SIX, f32p)
        if (s & 0x7FFFFFFF) <= F32_INF and s > F32_448:
            s = F32_448
        code = encode_f32(s, 0, e4p, SAT_RNE, 0)
    else:
        s = f32_div(bamax, F32_SIX, f32p)
        if two_level:
            s = f32_div(s, t, f32p)
        if (s & 0x7FFFFFFF) <= F32_INF:   # torch.clamp keeps NaN
            if s < F32_E4M3_TINY:
                s = F32_E4M3_TINY
            elif s > F32_448:
                s = F32_448
        code = encode_f32(s, 0, e4p, SAT_RNE, 0)
    return nvfp4_scale_floor(code, pp)


@njit(**_JIT)
def nvfp4_scale_floor(code, pp):
    """nvfp4_scale_min: 'tiny' clamps the E4M3 block scale code to >= 0x08 (2^-6, torchao)."""
    if pp[K_NV_MIN] == 1 and code < 0x08:
        return 0x08
    return code


F32_THREE_HALVES = 0x3FC00000


@njit(**_JIT)
def te_4over6_block_scale(bamax, s_enc, divisor, e4p, f32p, pp):
    """E4M3 code of a Four-over-Six candidate block scale in TransformerEngine's order
    (quantize_4over6_nvfp4.cuh ``compute_scale_pair``): base = fl(fl(amax / 6) * S_enc);
    map-to-6 (``divisor`` 6) E4M3(fminf(base, 448)), map-to-4 (``divisor`` 4)
    E4M3(fminf(fl(base * 1.5), 448)), RNE satfinite. Not TE's plain NVFP4 order
    (:func:`nvfp4_block_scale` 'te': amax * fl(S_enc * fl(1/6)))."""
    base = f32_mul(f32_div(bamax, F32_SIX, f32p), s_enc, f32p)
    if divisor == 4:
        base = f32_mul(base, F32_THREE_HALVES, f32p)
    return nvfp4_scale_floor(encode_f32(f32_min_pos(base, F32_448), 0, e4p, SAT_RNE, 0), pp)

