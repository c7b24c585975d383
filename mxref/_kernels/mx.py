"""MX block quantization kernels: loops only.

Every knob is decided by a function of :mod:`.semantics` (block_policy, shared_exponent and its
twin shared_exponent_thresholds, encode_f32, ...); these loops only find each block's amax,
ask for its shared exponent and encode its elements, through the vectorized encoders where
they are exact (encode_block_fast) and through encode_f32 elsewhere.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import types
from numba.extending import intrinsic

from ..formats import P_BIAS, P_EMIN, P_KIND, P_MAXCODE, P_MBITS, P_SIGNBIT
from ..profiles import K_FLUSH, K_OVERFLOW, K_ROUNDING
from .f32 import _JIT, F32_INF, F32_QNAN, RNE, STOCHASTIC, TIES_AWAY, njit, to_f32_bits
from .semantics import (NAN_SCALE, block_amax, block_policy, element_exponent, element_parts,
                        encode_f32, encode_fast_ok, int_full, nan_element_code, overflow_code,
                        scale_thresholds, shared_exponent_thresholds, thresholds_exact)

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
                      signbit, is_int, mode, full):
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
    * general: the round_magnitude arithmetic written branch-free (the one path of integer
      formats: ``full`` = :func:`.semantics.int_full` lets a negative code reach
      maxcode + 1, int8_min='full').

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
    full32 = i32(full)
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
            imag = min(code, add32(maxc, and32(neg, full32)))   # integers saturate
            code = ovfc if code > maxc else code
            fcode = or32(code, shl32(neg, sbit))
            icode = and32(add32(imag ^ -neg, neg), i32(0xFF))
            out[o + u64(i)] = icode if is_int else fcode


@njit(**_JIT)
def encode_span_fast(row, out, lo, hi, sh, amn, mids, ge, block, m, emin, bias,
                     maxcode, ovf_code, signbit, is_int, mode, full):
    """encode_block_fast over row[lo:hi], block j at exponent ``sh[j]``, smallest magnitude
    ``amn[j]``."""
    for j in range(sh.size):
        jlo = lo + j * block
        jhi = min(jlo + block, hi)
        encode_block_fast(row, out, np.uint64(jlo), jhi - jlo, sh[j], amn[j], mids, ge, m,
                          emin, bias, maxcode, ovf_code, signbit, is_int, mode, full)


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
    mode = pp[K_ROUNDING]
    use_rbits = mode == STOCHASTIC
    fast_ok = encode_fast_ok(pp)
    m = fp[P_MBITS]
    emin = fp[P_EMIN]
    bias = fp[P_BIAS]
    maxcode = fp[P_MAXCODE]
    signbit = fp[P_SIGNBIT]
    is_int = fp[P_KIND] == 1
    ovf_code = overflow_code(fp, pp[K_OVERFLOW])
    full = int_full(fp, pp)
    fast_min_s = -126 - emin if not is_int else -1000
    fill = nan_element_code(fp)
    # Scale rule as two thresholds on the 24-bit significand of amax (shared_exponent's twin);
    # rules with data-dependent edges (flush, any_up, NaN on overflow) take the scalar path.
    i32 = np.int32
    vec_rule = thresholds_exact(pp)
    up_thr, down_thr, e_off = scale_thresholds(fp, pp)
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
                e = shared_exponent_thresholds(a, up_thr, down_thr, e_off)
                srow[b0 + k] = np.uint8(e + i32(127))
                e = i32(element_exponent(e, pp))          # exponent the elements see
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
                    sv = block_policy(has_nan, has_inf, amax, fp, pp)
                    srow[blk] = 0xFF if sv == NAN_SCALE else sv + 127
                    sh[k] = element_exponent(sv, pp)
                    if has_nan or has_inf:
                        all_fast = False
                sv = sh[k]
                if sv == NAN_SCALE or sv < fast_min_s:
                    all_fast = False
        if all_fast:
            encode_span_fast(row, out, b0 * block, min(b1 * block, n), sh, amn, mids, ge,
                             block, m, emin, bias, maxcode, ovf_code, signbit, is_int, mode,
                             full)
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
    thresholds on a normal amax (thresholds_exact) and the elements take the fast encoders
    (encode_fast_ok: no stochastic rounding, no flush, signed zeros preserved)."""
    return bool(thresholds_exact(pp)) and bool(encode_fast_ok(pp))


@njit(parallel=True, **_JIT)
def quantize_mx_flat(bits, block, fp, pp, mids, ge, codes, scales):
    """quantize_mx for whole blocks laid end to end: ``bits`` is 1-D (rows x n flattened with
    n a multiple of ``block``), block k is bits[k*block:(k+1)*block], ``scales`` 1-D with one
    byte per block; only for profiles with ``flat_ok(pp)``.

    One pass per block while it sits in L1: amax and amin, the shared exponent, the element
    codes. Blocks the fast encoders cannot take (NaN/Inf or subnormal amax, an exponent below
    -126 - emin, an all-zero block) take the scalar path of quantize_mx (block_amax,
    block_policy, encode_f32)."""
    i32 = np.int32
    nblk = scales.size
    m = fp[P_MBITS]
    emin = fp[P_EMIN]
    bias = fp[P_BIAS]
    maxcode = fp[P_MAXCODE]
    signbit = fp[P_SIGNBIT]
    is_int = fp[P_KIND] == 1
    mode = pp[K_ROUNDING]
    ovf_code = overflow_code(fp, pp[K_OVERFLOW])
    full = int_full(fp, pp)
    fmin = i32(max(-126 - emin if not is_int else -1000, -128))
    fill = nan_element_code(fp)
    up_thr, down_thr, e_off = scale_thresholds(fp, pp)
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
            e = shared_exponent_thresholds(a, up_thr, down_thr, e_off)
            e_el = i32(element_exponent(e, pp))        # exponent the elements see
            if a >= i32(F32_INF) or (a < i32(0x800000) and a != i32(0)) or e_el < fmin:
                # rare: as quantize_mx's scalar path
                amax, has_nan, has_inf = block_amax(bits2, k, 0, block, False)
                sv = block_policy(has_nan, has_inf, amax, fp, pp)
                scales[k] = 0xFF if sv == NAN_SCALE else sv + 127
                if sv == NAN_SCALE:
                    for i in range(block):
                        codes[o + np.uint64(i)] = fill
                else:
                    sv = element_exponent(sv, pp)
                    for i in range(block):
                        codes[o + np.uint64(i)] = encode_f32(np.int64(bits2[k, i]), sv, fp, pp, 0)
                continue
            scales[k] = np.uint8(e + i32(127))
            encode_block_fast(bits, codes, o, block, e_el, amn, mids, ge, m, emin, bias, maxcode,
                              ovf_code, signbit, is_int, mode, full)


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


@njit(parallel=True, **_JIT)
def encode_elements(bits, s, fp, pp, out):
    """Element conversion alone: each fp32 pattern of the 1-D ``bits`` divided by 2**s."""
    for i in nb.prange(bits.size):
        out[i] = encode_f32(np.int64(bits[i]), s, fp, pp, np.int64(0))
