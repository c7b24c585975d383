"""Integer-domain arithmetic the kernels share: one rounding, fp32 operations, Philox.

No float arithmetic decides anything here: values are (significand, exponent) integer pairs and
rounding is done on the discarded bits by :func:`round_magnitude`, the one rounding every kernel
(and every fp32 operation below) goes through; the rounding mode is its argument (the
``rounding`` knob). As in SoftFloat, this core never reads a profile: the profile-driven choices
live in :mod:`.semantics`.

fastmath is off everywhere (tests/test_numba_policy.py asserts it); every kernel is compiled
with explicit signatures so compilation happens once at first use (or in ``mxref warmup``),
never inside a timed region.
"""
from __future__ import annotations

import os

import numba as nb
import numpy as np

from ..formats import FP32, P_BIAS, P_EMIN, P_KIND, P_MAXCODE, P_MBITS

# Caching is opt-in (MXREF_NUMBA_CACHE=1, with NUMBA_CACHE_DIR set): numba's cache misses
# changes in imported modules and is keyed by CPU model (numba#1833, #4211).
_JIT = dict(fastmath=False, error_model="numpy", nogil=True,
            cache=os.environ.get("MXREF_NUMBA_CACHE") == "1")
njit = nb.njit

F32_PARAMS = FP32.kernel_params()
F32_QNAN = 0x7FC00000
F32_INF = 0x7F800000
F32_MAXBITS = 0x7F7FFFFF
F32_ONE = 0x3F800000
F32_SIX = 0x40C00000
F32_2688 = 0x45280000
F32_E4M3_TINY = 0x3C800000       # 2^-6
F32_448 = 0x43E00000

# rounding modes (indices into profiles.ROUNDINGS)
RNE, TIES_AWAY, TIES_ZERO, STOCHASTIC = 0, 1, 2, 3


@njit(**_JIT)
def bit_length(x):
    """Number of significant bits of a non-negative int64 (0 for 0)."""
    n = 0
    if x >= (1 << 32):
        x >>= 32
        n += 32
    if x >= (1 << 16):
        x >>= 16
        n += 16
    if x >= (1 << 8):
        x >>= 8
        n += 8
    if x >= (1 << 4):
        x >>= 4
        n += 4
    if x >= (1 << 2):
        x >>= 2
        n += 2
    if x >= (1 << 1):
        x >>= 1
        n += 1
    return n + x


@njit(**_JIT)
def round_magnitude(sig, p, exp2, sticky, fp, mode, rbits):
    """Round ``(sig + sticky) * 2**exp2`` (sig > 0, msb at bit p) onto format ``fp``.

    ``sticky`` means "strictly more than sig, by less than 2**exp2"; callers guarantee at least
    two discarded bits whenever sticky can be set. Returns ``(magnitude_code, overflowed)`` where
    the code may exceed the format's max code (the caller applies the overflow policy).

    The float code falls out of one formula for normals and subnormals alike:
    ``((max(E, emin) + bias - 1) << m) + n`` with n the rounded significand on the grid of
    quantum ``2**(max(E, emin) - m)``; a carry out of the significand lands in the exponent.
    """
    m = fp[P_MBITS]
    e_true = p + exp2
    if fp[P_KIND] == 1:                      # fixed point: quantum 2^-frac everywhere
        q_exp = -m
    else:
        q_exp = max(e_true, fp[P_EMIN]) - m
    r = q_exp - exp2
    if r <= 0:
        n = sig << (-r) if -r < 40 else (1 << 40)   # huge: certainly overflows
        up = 0
    else:
        if r >= 63:
            n = 0
            rem_vs_half = -1                  # fraction < 1/2 (sig < 2^61)
            # the truncated fraction still counts for stochastic rounding (NVFP4's exact order
            # hands in ~60-bit quotients): floor(sig * 2^32 / 2^r)
            frac32 = sig >> (r - 32) if r - 32 < 63 else 0
        else:
            n = sig >> r
            rem = sig & ((1 << r) - 1)
            half = 1 << (r - 1)
            rem_vs_half = 1 if rem > half else (0 if rem == half else -1)
            if r <= 32:
                frac32 = rem << (32 - r)
            else:
                frac32 = rem >> (r - 32)
        if mode == RNE:
            up = 1 if (rem_vs_half > 0 or (rem_vs_half == 0 and (sticky or (n & 1) == 1))) else 0
        elif mode == TIES_AWAY:
            up = 1 if rem_vs_half >= 0 else 0
        elif mode == TIES_ZERO:
            up = 1 if (rem_vs_half > 0 or (rem_vs_half == 0 and sticky)) else 0
        else:
            up = 1 if frac32 + rbits >= (1 << 32) else 0
        n += up
    if fp[P_KIND] == 1:
        code = n
    else:
        code = ((max(e_true, fp[P_EMIN]) + fp[P_BIAS] - 1) << m) + n
    return code, code > fp[P_MAXCODE]


@njit(**_JIT)
def normalize_f32(a):
    """(sig24, E) of a positive finite fp32 magnitude: a = sig24 * 2^(E-23), 2^23 <= sig24 < 2^24."""
    ea = a >> 23
    if ea == 0:
        p = bit_length(a) - 1
        return a << (23 - p), p - 149
    return (a & 0x7FFFFF) | 0x800000, ea - 127


@njit(**_JIT)
def f32_parts(a):
    """(sig, exp2) of a positive finite nonzero fp32 magnitude: a = sig * 2^exp2."""
    ea = a >> 23
    if ea == 0:
        return a, -149
    return (a & 0x7FFFFF) | 0x800000, ea - 150


@njit(**_JIT)
def to_f32_bits(neg, sig, exp2, sticky, f32p):
    """fp32 bits of (-1)^neg * sig * 2^exp2, RNE, overflow to Inf (IEEE)."""
    if sig == 0:
        return neg << 31
    code, ovf = round_magnitude(sig, bit_length(sig) - 1, exp2, sticky, f32p, RNE, 0)
    if ovf:
        code = F32_INF
    return code | (neg << 31)


@njit(**_JIT)
def f32_mul(a, b, f32p):
    neg = ((a ^ b) >> 31) & 1
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    if aa > F32_INF or bb > F32_INF:
        return F32_QNAN
    if aa == F32_INF or bb == F32_INF:
        if aa == 0 or bb == 0:
            return F32_QNAN
        return F32_INF | (neg << 31)
    if aa == 0 or bb == 0:
        return neg << 31
    sa, ea = f32_parts(aa)
    sb, eb = f32_parts(bb)
    return to_f32_bits(neg, sa * sb, ea + eb, False, f32p)


@njit(**_JIT)
def exact_quotient(sa, ea, sb, eb):
    """sa*2^ea / (sb*2^eb) as (q, exp2, sticky) with q carrying >= 31 significant bits."""
    num = sa << 36
    q = num // sb
    rem = num - q * sb
    return q, ea - eb - 36, rem != 0


@njit(**_JIT)
def element_quotient(a, sb, eb):
    """|x| / (sb * 2^eb) for a positive finite fp32 magnitude ``a`` and ``sb < 2^28`` (an E4M3
    significand times a 24-bit one), as ``(q, exp2, sticky)`` with ``q >= 2^33``: x's
    significand normalized to 24 bits and shifted left by 38 (below 2^62). An E2M1 element
    keeps at most 2 bits of q, so at least 32 lie below its quantum, and stochastic
    rounding's ``f = floor(frac * 2^32)`` is read from q alone (the remainder is less than
    one unit of q's last bit, so it cannot change that floor; exact_quotient's 31-bit
    quotient could drop up to 2 bits of f when the divisor has a long significand)."""
    sx, ex = normalize_f32(a)
    num = sx << 38
    q = num // sb
    return q, ex - 23 - eb - 38, num - q * sb != 0


@njit(**_JIT)
def f32_div(a, b, f32p):
    neg = ((a ^ b) >> 31) & 1
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    if aa > F32_INF or bb > F32_INF or (aa == 0 and bb == 0) or (aa == F32_INF and bb == F32_INF):
        return F32_QNAN
    if aa == F32_INF or bb == 0:
        return F32_INF | (neg << 31)
    if aa == 0 or bb == F32_INF:
        return neg << 31
    sa, ea = f32_parts(aa)
    sb, eb = f32_parts(bb)
    q, e, sticky = exact_quotient(sa, ea, sb, eb)
    return to_f32_bits(neg, q, e, sticky, f32p)


@njit(**_JIT)
def f32_min_pos(a, b):
    """fminf for non-negative operands (NaN operand loses, as C fminf)."""
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    if aa > F32_INF:
        return b
    if bb > F32_INF:
        return a
    return a if aa <= bb else b


# ---- Philox4x32-10: the documented stochastic-rounding stream (as Triton's tl.randint) ------
_U = np.uint64
_PHILOX_A, _PHILOX_B = _U(0xD2511F53), _U(0xCD9E8D57)
_PHILOX_KA, _PHILOX_KB = _U(0x9E3779B9), _U(0xBB67AE85)
_M32 = _U(0xFFFFFFFF)
_S32 = _U(32)


@njit(**_JIT)
def philox4x32(c0, c1, c2, c3, k0, k1, rounds):
    """Philox4x32 (Salmon et al. 2011) on uint64-held 32-bit words, as triton.language.random."""
    for _ in range(rounds):
        p0 = _PHILOX_A * c0
        p2 = _PHILOX_B * c2
        n0 = ((p2 >> _S32) ^ c1 ^ k0) & _M32
        n2 = ((p0 >> _S32) ^ c3 ^ k1) & _M32
        c1 = p2 & _M32
        c3 = p0 & _M32
        c0 = n0
        c2 = n2
        k0 = (k0 + _PHILOX_KA) & _M32
        k1 = (k1 + _PHILOX_KB) & _M32
    return c0, c1, c2, c3


@njit(parallel=True, **_JIT)
def philox_stream(seed, offset, out):
    """out[i] = first word of Philox4x32-10((offset + i, 0, 0, 0), key=(seed_lo, seed_hi))."""
    k0 = _U(seed) & _M32
    k1 = (_U(seed) >> _S32) & _M32
    for i in nb.prange(out.size):
        c0, _, _, _ = philox4x32(_U(offset + i) & _M32, _U(0), _U(0), _U(0), k0, k1, 10)
        out[i] = c0


@njit(parallel=True, **_JIT)
def philox_stream4(seed, offset, out):
    """out[i] = word i mod 4 of Philox4x32-10((offset + i div 4, 0, 0, 0), key=(seed_lo,
    seed_hi)): tl.randint4x(seed, offset + i // 4)[i % 4], one evaluation per four words."""
    k0 = _U(seed) & _M32
    k1 = (_U(seed) >> _S32) & _M32
    for g in nb.prange((out.size + 3) // 4):
        w = philox4x32(_U(offset + g) & _M32, _U(0), _U(0), _U(0), k0, k1, 10)
        for j in range(4):
            if 4 * g + j < out.size:
                out[4 * g + j] = w[j]
