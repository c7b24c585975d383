"""Integer-domain Numba kernels: fp32 bit patterns in, element codes and scale bytes out.

No float arithmetic decides anything here: values are (significand, exponent) integer pairs,
rounding is done on the discarded bits, the block amax is an integer max over
``bits & 0x7FFFFFFF``. fastmath is off everywhere (tests/test_numba_policy.py asserts it);
every kernel is compiled with explicit signatures so compilation happens once at first use
(or in ``mxref warmup``), never inside a timed region.

Format and profile knobs arrive as small int64 vectors (see formats.P_* and profiles.K_*), so
one compiled kernel serves every format and profile.
"""
from __future__ import annotations

import os

import numba as nb
import numpy as np
from numba.core import types
from numba.extending import intrinsic

from .formats import FP32
from .formats import (P_BIAS, P_EMAX, P_EMIN, P_EVENTHR, P_INF, P_KIND, P_MAXCODE, P_MAXF32,
                      P_MAXSIG, P_MBITS, P_NAN, P_SIGNBIT)
from .profiles import (K_FLUSH, K_INF, K_NAN, K_NV_MIN, K_OVERFLOW, K_RCEIL_SUB, K_ROUNDING,
                       K_RCEIL_LOG2, K_SCALE_OVF, K_SCALE_RULE, K_SZERO, K_ZEXP)

# Caching is opt-in (MXREF_NUMBA_CACHE=1, with NUMBA_CACHE_DIR set): numba's cache misses
# changes in imported modules and is keyed by CPU model (numba#1833, #4211).
_JIT = dict(fastmath=False, error_model="numpy", nogil=True,
            cache=os.environ.get("MXREF_NUMBA_CACHE") == "1")
njit = nb.njit

F32_PARAMS = FP32.kernel_params()
NAN_SCALE = 128          # sentinel shared exponent meaning "scale byte 0xFF"
F32_QNAN = 0x7FC00000
F32_INF = 0x7F800000

# rounding / overflow / policy enums (indices into the tuples in profiles.py)
RNE, TIES_AWAY, TIES_ZERO, STOCHASTIC = 0, 1, 2, 3
SATURATE, NONSATURATING = 0, 1
POISON = 0
SCALE_MAX = 1            # inf_in_block: Inf amax -> 0xFE
FLOOR, RCEIL, CEIL, EVEN, ROUND_DOWN = 0, 1, 2, 3, 4
SZ_PRESERVE, SZ_INPUT_TO_POS, SZ_NEVER_NEG = 0, 1, 2


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
def finish_code(code, overflowed, neg, fp, overflow_mode):
    """Apply the overflow policy and the sign; returns the element code as an int."""
    if overflowed:
        if overflow_mode == SATURATE:
            code = fp[P_MAXCODE]
        elif fp[P_INF] >= 0:
            code = fp[P_INF]
        else:
            code = fp[P_NAN]
    if fp[P_KIND] == 1:
        return ((-code) & 0xFF) if neg else code
    return code | (neg << fp[P_SIGNBIT])


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


@njit(**_JIT)
def encode_f32(b, s, fp, pp, rbits):
    """Element code of fp32 bits ``b`` divided by ``2**s`` (exactly, one rounding)."""
    neg = np.int64(b >> 31)
    a = np.int64(b & 0x7FFFFFFF)
    if a > F32_INF:
        return nan_element_code(fp)
    if a == F32_INF:
        return finish_code(0, True, neg, fp, pp[K_OVERFLOW])
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
    code, ovf = round_magnitude(sig, p, exp2, False, fp, pp[K_ROUNDING], rbits)
    if code == 0:
        return zero_code(neg, False, fp, pp[K_SZERO])
    return finish_code(code, ovf, neg, fp, pp[K_OVERFLOW])


@njit(**_JIT)
def normalize_f32(a):
    """(sig24, E) of a positive finite fp32 magnitude: a = sig24 * 2^(E-23), 2^23 <= sig24 < 2^24."""
    ea = a >> 23
    if ea == 0:
        p = bit_length(a) - 1
        return a << (23 - p), p - 149
    return (a & 0x7FFFFF) | 0x800000, ea - 127


@njit(**_JIT)
def shared_exponent(amax, fp, pp):
    """Unbiased shared exponent for a block whose finite amax has fp32 bits ``amax``.

    Returns NAN_SCALE when the profile turns an out-of-range exponent into a NaN scale.
    """
    if amax == 0:
        return -127                          # all-zero block: byte 0x00 (every rule)
    sig, e = normalize_f32(amax)
    rule = pp[K_SCALE_RULE]
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


CHUNK_BLOCKS = 256     # blocks per parallel task: rows of any length spread over the threads


# ---- int32 lane arithmetic --------------------------------------------------------------
# Numba types every operation on int32 operands as int64, and LLVM cannot narrow a variable
# shift back to 32 bits: a loop written with np.int32 casts still runs on 4-lane int64 vectors
# (AVX2 has no 64-bit min/max either). These intrinsics are the plain LLVM i32 instructions,
# so the element loops below vectorize 8 lanes wide. Two's complement, no overflow flags; every
# shift amount the callers pass lies in [0, 31].
def _i32_binop(name):
    @intrinsic
    def op(typingctx, a, b):
        def codegen(context, builder, signature, args):
            return getattr(builder, name)(args[0], args[1])
        return types.int32(types.int32, types.int32), codegen
    return op


shl32 = _i32_binop("shl")
shr32 = _i32_binop("ashr")           # arithmetic; callers shift non-negative values only
add32 = _i32_binop("add")
sub32 = _i32_binop("sub")
and32 = _i32_binop("and_")
or32 = _i32_binop("or_")


@njit(inline="always", **_JIT)
def encode_block_fast(x, out, o, cnt, s, amn, mids, ge, m, emin, bias, maxcode, ovf_code,
                      signbit, is_int, mode):
    """Element codes of the block x[o:o+cnt] (one block, shared exponent ``s`` unbiased, smallest
    magnitude ``amn`` as fp32 bits) into out[o:o+cnt]: RNE / ties_away / ties_zero, signed zeros
    preserved, no flush, finite elements, s >= -126 - emin. Picks the cheapest of three exact,
    vectorizable paths:

    * normal (FP8, FP6 E3M2): every |x| of the block lands in the target's normal range
      (``amn`` at or above the scaled smallest normal), so rounding is the classic increment
      on the fp32 bits, ``(a + inc) >> (23 - m)``, and the code is that minus the rebiased
      exponent (the carry into the exponent is the carry);
    * thresholds (FP4, seven midpoints): the code is the number of
      midpoints below |x|, comparing fp32 bit patterns (monotonic in magnitude) with the
      midpoints scaled by 2^s; a tie is ``>=`` where the upper code wins the tie;
    * general: the round_magnitude arithmetic written branch-free.

    A path is used only where it is exact: s >= -126 - emin (fp32 subnormal inputs then land
    on the target's subnormal grid) and scaled midpoints that are normal fp32 numbers.
    Vectorization: lane arithmetic is int32 (sig < 2^24, shifts <= 25; see shl32), 8 lanes per
    AVX2 vector; indices are uint64 (``o`` unsigned), so no negative-index wraparound turns
    the loads into gathers; inlined, so no per-block call and no array view (refcount) is
    made per block."""
    i32 = np.int32
    u64 = np.uint64
    rne = i32(1) if mode == RNE else i32(0)
    away = i32(1) if mode == TIES_AWAY else i32(0)
    fl = i32(0) if is_int else i32(1)
    base = i32(23 - m)
    m32, emin32, bias1 = i32(m), i32(emin), i32(bias - 1)
    maxc, ovfc, sbit = i32(maxcode), i32(ovf_code), i32(signbit)
    zero, one, c23, c25 = i32(0), i32(1), i32(23), i32(25)
    low23, mask = i32(0x7FFFFF), i32(0x7FFFFFFF)
    s = i32(s + 127)                      # biased, as the fp32 exponent field
    nthr = mids.size
    if (not is_int) and nthr != 7 and emin32 + s >= one and amn >= (emin32 + s) << c23:
        # round half up is a + (half - 1) + 1; RNE adds the kept lsb; ties_zero adds nothing
        ninc = i32((1 << (22 - m)) - 1) + away
        rebias = i32((s - i32(bias)) << m32)
        for i in range(cnt):
            b = x[o + u64(i)]
            a = and32(i32(b), mask)
            code = sub32(shr32(add32(add32(a, ninc), and32(rne, shr32(a, base))), base), rebias)
            code = ovfc if code > maxc else code
            out[o + u64(i)] = or32(code, shl32(i32(b >> np.uint32(31)), sbit))
    elif nthr == 7 and (mids[0] >> 23) + s - 127 >= 1 and (mids[6] >> 23) + s - 127 <= 254:
        # FP4: seven midpoints, unrolled so the element loop stays innermost (vectorized)
        shift = (s - i32(127)) << c23
        t0 = i32(mids[0] + shift - ge[0])
        t1 = i32(mids[1] + shift - ge[1])
        t2 = i32(mids[2] + shift - ge[2])
        t3 = i32(mids[3] + shift - ge[3])
        t4 = i32(mids[4] + shift - ge[4])
        t5 = i32(mids[5] + shift - ge[5])
        t6 = i32(mids[6] + shift - ge[6])
        for i in range(cnt):
            b = x[o + u64(i)]
            a = and32(i32(b), mask)
            code = add32(add32(add32(i32(a > t0), i32(a > t1)), add32(i32(a > t2), i32(a > t3))),
                         add32(add32(i32(a > t4), i32(a > t5)), i32(a > t6)))
            out[o + u64(i)] = or32(code, shl32(i32(b >> np.uint32(31)), sbit))
    else:
        for i in range(cnt):
            b = x[o + u64(i)]
            a = and32(i32(b), mask)
            neg = i32(b >> np.uint32(31))
            ea = shr32(a, c23)
            sig = or32(and32(a, low23), shl32(min(ea, one), c23))
            ep = sub32(max(ea, one), s)
            # float: base + max(0, emin - ep); int: base - ep
            rr = add32(sub32(base, ep), fl * add32(ep, max(zero, sub32(emin32, ep))))
            rr = min(max(rr, one), c25)
            add = add32(add32(shl32(one, sub32(rr, one)), away - one),
                        rne * and32(shr32(sig, rr), one))
            n = shr32(add32(sig, add), rr)
            code = add32(n, fl * shl32(add32(max(ep, emin32), bias1), m32))
            code = ovfc if code > maxc else code
            fcode = or32(code, shl32(neg, sbit))
            icode = and32(add32(code ^ -neg, neg), i32(0xFF))
            out[o + u64(i)] = icode if is_int else fcode


@njit(**_JIT)
def encode_span_fast(row, out, lo, hi, sh, amn, mids, ge, block, m, emin, bias,
                     maxcode, ovf_code, signbit, is_int, mode):
    """encode_block_fast over row[lo:hi], block j at exponent ``sh[j]``, smallest magnitude
    ``amn[j]``."""
    for j in range(sh.size):
        jlo = lo + j * block
        jhi = min(jlo + block, hi)
        encode_block_fast(row, out, np.uint64(jlo), jhi - jlo, sh[j], amn[j], mids, ge, m,
                          emin, bias, maxcode, ovf_code, signbit, is_int, mode)


@njit(inline="always", **_JIT)
def block_amax_amin(x, o, cnt):
    """(max, min) of |x[o:o+cnt]| as fp32 magnitude bits (int32), one vectorized pass."""
    mm = np.uint32(0)
    mn = np.uint32(0xFFFFFFFF)
    for i in range(cnt):
        a = np.uint32(x[o + np.uint64(i)] & np.uint32(0x7FFFFFFF))
        mm = max(mm, a)
        mn = min(mn, a)
    return np.int32(mm), np.int32(mn)


@njit(inline="always", **_JIT)
def block_amax_only(x, o, cnt):
    """max of |x[o:o+cnt]| as fp32 magnitude bits (int32)."""
    mm = np.uint32(0)
    for i in range(cnt):
        mm = max(mm, np.uint32(x[o + np.uint64(i)] & np.uint32(0x7FFFFFFF)))
    return np.int32(mm)


@njit(parallel=True, **_JIT)
def quantize_mx(bits, block, fp, pp, rbits, mids, ge, codes, scales):
    """MX block quantization of a (rows, n) fp32-bits array along axis 1."""
    rows, n = bits.shape
    nblk = (n + block - 1) // block
    flush = pp[K_FLUSH] != 0
    poison_nan = pp[K_NAN] == POISON
    poison_inf = pp[K_INF] == POISON
    mode = pp[K_ROUNDING]
    use_rbits = mode == STOCHASTIC
    fast_ok = (not flush) and (not use_rbits) and pp[K_SZERO] == SZ_PRESERVE
    m = fp[P_MBITS]
    emin = fp[P_EMIN]
    bias = fp[P_BIAS]
    maxcode = fp[P_MAXCODE]
    signbit = fp[P_SIGNBIT]
    is_int = fp[P_KIND] == 1
    if pp[K_OVERFLOW] == SATURATE:
        ovf_code = maxcode
    elif fp[P_INF] >= 0:
        ovf_code = fp[P_INF]
    else:
        ovf_code = fp[P_NAN]
    fast_min_s = -126 - emin if not is_int else -1000
    fill = nan_element_code(fp)
    # Scale rule as two thresholds on the 24-bit significand of amax (see shared_exponent);
    # rules with data-dependent edges (flush, any_up, NaN on overflow) take the scalar path.
    i32 = np.int32
    rule = pp[K_SCALE_RULE]
    vec_rule = (not flush) and pp[K_RCEIL_SUB] == 0 and pp[K_SCALE_OVF] == 0 and \
        pp[K_RCEIL_LOG2] == 0
    up = 1 << 24
    if rule == RCEIL:
        up = fp[P_MAXSIG]
    elif rule == CEIL:
        up = 1 << 23
    elif rule == EVEN:
        up = fp[P_EVENTHR] - 1
    up_thr = i32(up)
    down_thr = i32(fp[P_MAXSIG] if rule == ROUND_DOWN else 0)
    e_off = i32(127 + fp[P_EMAX])
    zexp = pp[K_ZEXP]
    zexp32 = i32(zexp)
    nchunk = (nblk + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS
    for task in nb.prange(rows * nchunk):
        r = task // nchunk
        b0 = (task % nchunk) * CHUNK_BLOCKS
        b1 = min(b0 + CHUNK_BLOCKS, nblk)
        row = bits[r]
        out = codes[r]
        nbk = b1 - b0
        sh = np.empty(nbk, dtype=np.int64)
        amx = np.empty(nbk, dtype=np.int32)
        amn = np.empty(nbk, dtype=np.int32)
        for k in range(nbk):                 # block amax (and amin): integer max, vectorized
            lo = (b0 + k) * block
            mm, mn = block_amax_amin(row, np.uint64(lo), min(block, n - lo))
            amx[k] = mm
            amn[k] = mn
        srow = scales[r]
        exc = i32(0) if vec_rule else i32(1)
        if vec_rule:                         # shared exponents of normal amax, branch-free
            fmin = i32(max(fast_min_s, -128))
            for k in range(nbk):
                a = amx[k]
                sg = (a & i32(0x7FFFFF)) | i32(0x800000)
                e = (a >> i32(23)) - e_off + i32(sg > up_thr) - i32(sg < down_thr)
                e = max(min(e, i32(127)), i32(-127))
                e = i32(-127) if a == i32(0) else e
                srow[b0 + k] = np.uint8(e + i32(127))
                e = zexp32 if e == i32(-127) else e          # exponent the elements see
                sh[k] = e
                # non-finite or subnormal amax, or an exponent the fast encoders cannot take
                exc |= i32(a >= i32(F32_INF)) | (i32(a < i32(0x800000)) & i32(a != i32(0)))
                exc |= i32(e < fmin)
        all_fast = fast_ok
        if exc != i32(0):                    # rare: redo the exceptional blocks one by one
            for k in range(nbk):
                a = amx[k]
                blk = b0 + k
                if not vec_rule or a >= F32_INF or (a < 0x800000 and a != 0):
                    lo = blk * block
                    amax, has_nan, has_inf = block_amax(bits, r, lo, min(lo + block, n), flush)
                    if (has_nan and poison_nan) or (has_inf and poison_inf):
                        sv = NAN_SCALE
                    elif has_inf and pp[K_INF] == SCALE_MAX:
                        sv = 127                 # TE: Inf amax -> satfinite 0xFE (B6)
                    elif has_inf:
                        sv = shared_exponent(F32_INF, fp, pp)   # Inf read as 2^128
                    else:
                        sv = shared_exponent(amax, fp, pp)
                    srow[blk] = 0xFF if sv == NAN_SCALE else sv + 127
                    sh[k] = zexp if sv == -127 else sv
                    if has_nan or has_inf:
                        all_fast = False
                sv = sh[k]
                if sv == NAN_SCALE or sv < fast_min_s:
                    all_fast = False
        if all_fast:
            encode_span_fast(row, out, b0 * block, min(b1 * block, n), sh, amn, mids, ge,
                             block, m, emin, bias, maxcode, ovf_code, signbit, is_int, mode)
            continue
        for blk in range(b0, b1):
            lo = blk * block
            hi = min(lo + block, n)
            s = sh[blk - b0]
            if s == NAN_SCALE:
                for i in range(lo, hi):
                    out[i] = fill
            else:
                for i in range(lo, hi):
                    rb = np.int64(rbits[r, i]) if use_rbits else np.int64(0)
                    out[i] = encode_f32(np.int64(row[i]), s, fp, pp, rb)


def flat_ok(pp) -> bool:
    """Whether quantize_mx_flat serves profile vector ``pp``: the scale is two significand
    thresholds on a normal amax (see quantize_mx's vec_rule) and the elements take the fast
    encoders (no stochastic rounding, no flush, signed zeros preserved)."""
    return (pp[K_FLUSH] == 0 and pp[K_ROUNDING] != STOCHASTIC and pp[K_SZERO] == SZ_PRESERVE
            and pp[K_RCEIL_SUB] == 0 and pp[K_SCALE_OVF] == 0 and pp[K_RCEIL_LOG2] == 0)


@njit(parallel=True, **_JIT)
def quantize_mx_flat(bits, block, fp, pp, mids, ge, codes, scales):
    """quantize_mx for whole blocks laid end to end: ``bits`` is 1-D (rows x n flattened with
    n a multiple of ``block``), block k is bits[k*block:(k+1)*block], ``scales`` 1-D with one
    byte per block; only for profiles with ``flat_ok(pp)``.

    One pass per block while it sits in L1: amax and amin, the shared exponent, the element
    codes. Blocks the fast encoders cannot take (NaN/Inf or subnormal amax, an exponent below
    -126 - emin, an all-zero block) take the scalar path of quantize_mx (block_amax,
    shared_exponent, encode_f32)."""
    i32 = np.int32
    nblk = scales.size
    m = fp[P_MBITS]
    emin = fp[P_EMIN]
    bias = fp[P_BIAS]
    maxcode = fp[P_MAXCODE]
    signbit = fp[P_SIGNBIT]
    is_int = fp[P_KIND] == 1
    mode = pp[K_ROUNDING]
    poison_nan = pp[K_NAN] == POISON
    poison_inf = pp[K_INF] == POISON
    if pp[K_OVERFLOW] == SATURATE:
        ovf_code = maxcode
    elif fp[P_INF] >= 0:
        ovf_code = fp[P_INF]
    else:
        ovf_code = fp[P_NAN]
    fmin = i32(max(-126 - emin if not is_int else -1000, -128))
    fill = nan_element_code(fp)
    rule = pp[K_SCALE_RULE]
    up = 1 << 24
    if rule == RCEIL:
        up = fp[P_MAXSIG]
    elif rule == CEIL:
        up = 1 << 23
    elif rule == EVEN:
        up = fp[P_EVENTHR] - 1
    up_thr = i32(up)
    down_thr = i32(fp[P_MAXSIG] if rule == ROUND_DOWN else 0)
    e_off = i32(127 + fp[P_EMAX])
    zexp = pp[K_ZEXP]
    need_min = (not is_int) and mids.size != 7          # the normal-range encoder's test
    bits2 = bits.reshape((nblk, block))
    ntask = (nblk + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS
    for task in nb.prange(ntask):
        for k in range(task * CHUNK_BLOCKS, min(task * CHUNK_BLOCKS + CHUNK_BLOCKS, nblk)):
            o = np.uint64(k) * np.uint64(block)
            if need_min:
                a, amn = block_amax_amin(bits, o, block)
            else:
                a, amn = block_amax_only(bits, o, block), i32(0)
            sg = (a & i32(0x7FFFFF)) | i32(0x800000)
            e = (a >> i32(23)) - e_off + i32(sg > up_thr) - i32(sg < down_thr)
            e = max(min(e, i32(127)), i32(-127))
            e = i32(-127) if a == i32(0) else e
            e_el = i32(zexp) if e == i32(-127) else e        # exponent the elements see
            if a >= i32(F32_INF) or (a < i32(0x800000) and a != i32(0)) or e_el < fmin:
                # rare: as quantize_mx's scalar path
                amax, has_nan, has_inf = block_amax(bits2, k, 0, block, False)
                if (has_nan and poison_nan) or (has_inf and poison_inf):
                    sv = NAN_SCALE
                elif has_inf and pp[K_INF] == SCALE_MAX:
                    sv = 127                 # TE: Inf amax -> satfinite 0xFE (B6)
                elif has_inf:
                    sv = shared_exponent(F32_INF, fp, pp)   # Inf read as 2^128
                else:
                    sv = shared_exponent(amax, fp, pp)
                scales[k] = 0xFF if sv == NAN_SCALE else sv + 127
                if sv == NAN_SCALE:
                    for i in range(block):
                        codes[o + np.uint64(i)] = fill
                else:
                    sv = zexp if sv == -127 else sv
                    for i in range(block):
                        codes[o + np.uint64(i)] = encode_f32(np.int64(bits2[k, i]), sv, fp, pp, 0)
                continue
            scales[k] = np.uint8(e + i32(127))
            encode_block_fast(bits, codes, o, block, e_el, amn, mids, ge, m, emin, bias, maxcode,
                              ovf_code, signbit, is_int, mode)


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
def to_f32_bits(neg, sig, exp2, sticky, f32p):
    """fp32 bits of (-1)^neg * sig * 2^exp2, RNE, overflow to Inf (IEEE)."""
    if sig == 0:
        return neg << 31
    code, ovf = round_magnitude(sig, bit_length(sig) - 1, exp2, sticky, f32p, RNE, 0)
    if ovf:
        code = F32_INF
    return code | (neg << 31)


@njit(parallel=True, **_JIT)
def dequantize_mx(codes, scales, block, fp, f32p, out):
    rows, n = codes.shape
    for r in nb.prange(rows):
        for i in range(n):
            sb = np.int64(scales[r, i // block])
            if sb == 0xFF:
                out[r, i] = F32_QNAN
                continue
            kind, neg, sig, exp2 = element_parts(np.int64(codes[r, i]), fp)
            if kind == 2:
                out[r, i] = F32_QNAN
            elif kind == 1:
                out[r, i] = F32_INF | (neg << 31)
            else:
                out[r, i] = to_f32_bits(neg, sig, exp2 + sb - 127, False, f32p)


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


# ---- fp32 arithmetic in the integer domain (IEEE-754 binary32, round to nearest even) -------
# Used to emulate a peer's exact fp32 operation sequence (NVFP4 op orders) without trusting
# the host FPU: each result is the exact value rounded once by round_magnitude.
F32_MAXBITS = 0x7F7FFFFF


@njit(**_JIT)
def f32_parts(a):
    """(sig, exp2) of a positive finite nonzero fp32 magnitude: a = sig * 2^exp2."""
    ea = a >> 23
    if ea == 0:
        return a, -149
    return (a & 0x7FFFFF) | 0x800000, ea - 150


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


@njit(**_JIT)
def code_to_f32(code, fp, f32p):
    kind, neg, sig, exp2 = element_parts(code, fp)
    if kind == 2:
        return F32_QNAN
    if kind == 1:
        return F32_INF | (neg << 31)
    return to_f32_bits(neg, sig, exp2, False, f32p)


# ---- NVFP4 -------------------------------------------------------------------------------
NV_EXACT, NV_TE, NV_TORCHAO = 0, 1, 2
F32_ONE = 0x3F800000
F32_SIX = 0x40C00000
F32_2688 = 0x45280000
F32_E4M3_TINY = 0x3C800000       # 2^-6
F32_448 = 0x43E00000


@njit(**_JIT)
def nvfp4_tensor_constants(amax, order, two_level, f32p):
    """fp32 bit patterns (T, S_enc, S_enc/6) of the per-tensor scale for each op order.

    T is the decode-side tensor scale, dequant = e2m1 * e4m3 * T.
    """
    if not two_level:
        return F32_ONE, F32_ONE, f32_div(F32_ONE, F32_SIX, f32p)
    if order == NV_TE:
        # core_nvfp4.cuh: S_enc = min(2688 / amax, FLT_MAX); amax == 0 or S_enc == 0 -> 1
        s_enc = f32_min_pos(f32_div(F32_2688, amax, f32p), F32_MAXBITS)
        if amax == 0 or s_enc == 0:
            s_enc = F32_ONE
        s_dec = f32_div(F32_ONE, s_enc, f32p)
        return s_dec, s_enc, f32_mul(s_enc, f32_div(F32_ONE, F32_SIX, f32p), f32p)
    # exact and torchao: T = fl(amax / 2688) (torchao per_tensor_amax_to_scale, CPU division)
    t = f32_div(amax, F32_2688, f32p)
    if order == NV_EXACT:
        if amax == 0:
            t = F32_ONE
        elif t == 0:
            t = 1                      # smallest subnormal: keep the scale invertible
    return t, 0, 0


@njit(**_JIT)
def nvfp4_block_scale(bamax, order, two_level, t, sc6, e4p, f32p, pp):
    """E4M3 code of the block scale from the finite block amax (fp32 bits)."""
    if order == NV_EXACT:
        if bamax == 0:
            code = 0
        else:
            sa, ea = f32_parts(bamax)
            st, et = f32_parts(t)
            q, e, sticky = exact_quotient(sa, ea, 6 * st, et)
            code, ovf = round_magnitude(q, bit_length(q) - 1, e, sticky, e4p, RNE, 0)
            if ovf:
                code = e4p[P_MAXCODE]
    elif order == NV_TE:
        sdb = f32_min_pos(f32_mul(bamax, sc6, f32p), F32_MAXBITS)
        code = encode_f32(sdb, 0, e4p, SAT_RNE, 0)
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
    if pp[K_NV_MIN] == 1 and code < 0x08:
        code = 0x08                    # torchao: clamp to finfo(e4m3).tiny = 2^-6
    return code


SAT_RNE = np.zeros(12, dtype=np.int64)   # profile vector: saturate, RNE, preserve signed zero


@njit(parallel=True, **_JIT)
def quantize_nvfp4(bits, block, t, s_enc, sc6, order, two_level, fp, e4p, f32p, pp, rbits,
                   codes, scales):
    rows, n = bits.shape
    nblk = (n + block - 1) // block
    flush = pp[K_FLUSH] != 0
    poison_nan = pp[K_NAN] == POISON
    poison_inf = pp[K_INF] == POISON
    use_rbits = pp[K_ROUNDING] == STOCHASTIC
    for tb in nb.prange(rows * nblk):
        r = tb // nblk
        lo = (tb % nblk) * block
        hi = min(lo + block, n)
        amax, has_nan, has_inf = block_amax(bits, r, lo, hi, flush)
        if (has_nan and poison_nan) or (has_inf and poison_inf):
            scales[r, tb % nblk] = e4p[P_NAN]
            for i in range(lo, hi):
                codes[r, i] = 0
            continue
        if has_inf:
            amax = F32_INF
        sc = nvfp4_block_scale(amax, order, two_level, t, sc6, e4p, f32p, pp)
        scales[r, tb % nblk] = sc
        sval = code_to_f32(sc, e4p, f32p)
        if order == NV_TE:
            inv = f32_min_pos(f32_div(F32_ONE, f32_mul(sval, t, f32p), f32p), F32_MAXBITS)
        elif order == NV_TORCHAO:
            # torchao 0.18 multiplies by the reciprocal of the combined scale (MSLK Triton order):
            # fl(fl(1 / T) / S) with two-level scaling, fl(1 / S) with one
            recip = f32_div(f32_div(F32_ONE, t, f32p) if two_level else F32_ONE, sval, f32p)
        for i in range(lo, hi):
            b = np.int64(bits[r, i])
            rb = np.int64(rbits[r, i]) if use_rbits else np.int64(0)
            a = b & 0x7FFFFFFF
            if a >= F32_INF or order != NV_EXACT:
                if order == NV_TE:
                    b = f32_mul(b, inv, f32p)
                elif order == NV_TORCHAO:
                    b = f32_mul(b, recip, f32p)
                    ab = b & 0x7FFFFFFF
                    if ab <= F32_INF and ab > F32_SIX:
                        b = (b & 0x80000000) | F32_SIX      # torch.clamp(-6, 6)
                codes[r, i] = encode_f32(b, 0, fp, pp, rb)
                continue
            # exact order: one rounding of x / (S * T)
            neg = b >> 31
            if a == 0 or (flush and a < 0x800000):
                codes[r, i] = zero_code(neg, True, fp, pp[K_SZERO])
                continue
            if sc == 0:
                codes[r, i] = zero_code(neg, False, fp, pp[K_SZERO])
                continue
            _, _, ss, es = element_parts(np.int64(sc), e4p)
            st, et = f32_parts(t)
            q, e, sticky = element_quotient(a, ss * st, es + et)
            code, ovf = round_magnitude(q, bit_length(q) - 1, e, sticky, fp, pp[K_ROUNDING], rb)
            if code == 0:
                codes[r, i] = zero_code(neg, False, fp, pp[K_SZERO])
            else:
                codes[r, i] = finish_code(code, ovf, neg, fp, pp[K_OVERFLOW])


@njit(parallel=True, **_JIT)
def dequantize_nvfp4(codes, scales, block, t, fp, e4p, f32p, out):
    """Exact product e2m1 * e4m3 * T rounded once to fp32; scale NaN -> NaN."""
    rows, n = codes.shape
    st, et = f32_parts(t) if t != 0 else (0, 0)
    for r in nb.prange(rows):
        for i in range(n):
            kind_s, _, ss, es = element_parts(np.int64(scales[r, i // block]), e4p)
            kind, neg, sig, exp2 = element_parts(np.int64(codes[r, i]), fp)
            if kind_s != 0 or kind != 0:
                out[r, i] = F32_QNAN
            else:
                out[r, i] = to_f32_bits(neg, sig * ss * st, exp2 + es + et, False, f32p)


@njit(parallel=True, **_JIT)
def encode_elements(bits, s, fp, pp, out):
    """Element conversion alone: each fp32 pattern of the 1-D ``bits`` divided by 2**s."""
    for i in nb.prange(bits.size):
        out[i] = encode_f32(np.int64(bits[i]), s, fp, pp, np.int64(0))
