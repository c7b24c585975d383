"""The scale-bias corrections of the training recipes in one launch per operand, and an exact
order statistic (the OCC clamp bounds) in a few streaming passes.

``decomp_qdq_kernel`` is ``mxkernels.training.quant``'s torch chain for an MX operand with the
decomposition paper's fixes (``decomp-fixed`` and its one-fix arms), bit for bit, from one read
of each [BR, BC] tile (blocks of 32 and macro-blocks along the rows, the GEMM's contraction
axis):

1. outlier fallback, tau rule (``torch_fast.flag_blocks`` / ``outlier_mask``): a block is
   flagged when it is all finite, its amax is > 0 and at least ceil(32 / 2) = 16 of its |x|
   satisfy fl64(tau |x|) < amax (the lower median test without a sort: fl64(tau a) is
   non-decreasing in a); rule "topk" with k = 1 passes through the first element whose |x| is
   the block amax (if > 0), rule "block" the whole block. A passed-through element keeps its
   bf16 RNE value and is 0 in what is quantized;
2. macro-block scaling (``torch_fast.macro_scales``): S_M per macro-block of m elements, the
   significand of A_M / M_odd rounded up to p bits, on integers of the finite amax, then
   fl32(x / S_M) (IEEE division, round to nearest even);
3. MX quantize-dequantize of that (``triton_fast._qdq_orient``: the OCP rules, RNE), the
   value times S_M (one fp32 multiply), the passed-through elements put back.

It writes the values (fp32), the MX scales and codes, the passthrough mask and S_M: what the
GEMM multiplies and what the in-run validation re-derives with mxref.

``occ_select_kernel`` / ``occ_pick_kernel`` / ``occ_compact_kernel`` / ``occ_cand_kernel``:
the (n - ceil(q n) + 1)-th and the ceil(q n)-th smallest element of a tensor (NaN after
everything, any sign; -0 before +0), i.e. ``torch_fast.occ_bounds``, by an MSD radix select on
the 32-bit order key of each fp32 value, 8 bits per pass: a pass histograms the next digit of
the elements whose key starts with each target's prefix (two targets at once), the pick step
finds the digit where the running count reaches each target's rank. After the first byte the
elements sharing a target's top byte are copied out (a few percent of a tensor for the 1%
tails), and the three remaining passes read only those: two reads of the tensor, no host
synchronization (prefixes, ranks and counts live on the device), so a CUDA graph can hold it.

``vector_qdq_kernel``: ms-fp4's operand (torch_fast.vector_scaling, with the OCC clamp and its
residual) in one launch; ``split3_bf16_kernel``: an fp32 tensor as three bf16 pieces that sum
to it exactly (the split-bf16 GEMM of mxkernels.training.mxlinear); ``scale_outer_kernel``:
a matrix times a row and a column vector in one pass (the vector-wise GEMM epilogue);
``transpose_kernel``: a transposed view made contiguous (the decomp launch's row read for the
backward's W^T, dy^T and x^T).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from mxkernels.triton_common import (_MAX_COMBINE, _MIN_COMBINE, _SUM_COMBINE, KernelUnsupported,
                                      _max_along, sm_count)
from mxkernels.triton_fast import (
    INTERPRETED,
    _load_tile,
    _qdq_orient,
    _qdq_tile,
    _store_codes,
    _store_scales,
    launch_cached,
    qdq_constexprs,
)

__all__ = [
    "KERNELS",
    "KernelUnsupported",
    "aot_specs",
    "decomp_qdq",
    "decomp_supports",
    "occ_bounds",
    "scale_outer",
    "split3_bf16",
    "transpose_contiguous",
    "vector_qdq",
]

OUTLIER_RULES = {None: 0, "topk": 1, "block": 2}


# core builtins only (tl.reduce / tl.associative_scan with these combine functions, which are
# tl.sum's, tl.min's and tl.max's), never the @jit helpers of triton.language.standard
# themselves: see triton_common. Every reduction here is over integers.
_add, _min, _max = _SUM_COMBINE, _MIN_COMBINE, _MAX_COMBINE
MACRO_SIZES = (32, 64, 128, 256)


@triton.jit
def _bitlen24(x):
    """Bit length of int64 values in [0, 2^24]: the exponent of their exact fp32 conversion."""
    e = (x.to(tl.float32).to(tl.int32, bitcast=True) >> 23) - 126
    return tl.where(x == 0, 0, e).to(tl.int64)


@triton.jit
def _macro_bits(amax, P: tl.constexpr, M_ODD: tl.constexpr, BL_M: tl.constexpr):
    """fp32 bits of S_M from the int32 bits of a macro-block's finite amax (torch_fast.
    macro_scales, the same integer steps): the significand of amax / M_ODD rounded up to P
    bits, exponent field 127 (1 <= S_M <= 2); 1.0 for amax 0."""
    am = amax.to(tl.int64)
    ex = am >> 23
    mant = am & 0x7FFFFF
    sub_sa = mant << tl.minimum(tl.maximum(24 - _bitlen24(mant), 0), 24)
    sa = tl.where(ex > 0, mant | (1 << 23), sub_sa)
    tt = _bitlen24(sa) - BL_M
    tt = tl.where(sa < (M_ODD << tl.maximum(tt, 0)), tt - 1, tt)
    sh = (P - 1) - tt
    num = tl.where(sh >= 0, sa << tl.maximum(sh, 0), sa)
    # ceil(num / (M_ODD 2^k)) = ceil(ceil(num / 2^k) / M_ODD) for integers num >= 0 (k =
    # max(-sh, 0)): a shift, then a division by the constant M_ODD (a multiply, not a call)
    k = tl.maximum(-sh, 0)
    s_int = (((num + (1 << k) - 1) >> k) + (M_ODD - 1)) // M_ODD
    s_int = tl.where(am == 0, 1 << (P - 1), s_int)
    return ((127 << 23) + ((s_int - (1 << (P - 1))) << (24 - P))).to(tl.int32)


@triton.jit
def _below_bits(amax, tau, rtau):
    """Per block, the smallest fp32 magnitude bits T with fl64(tau * T) >= amax (amax the
    block's fp32 amax bits; tau >= 0 and rtau = fl64(1 / tau) as fp64): fl64(tau a) < amax
    holds exactly for the magnitudes a < T (fl64(tau a) is non-decreasing in a), so the tau
    rule's per-element test is one integer compare. t0 = fl32(fl64(amax * rtau)) is within
    one fp32 ulp of amax / tau (relative errors 2^-52 against the ulp's 2^-24), and the exact
    test on t0 - 1, t0, t0 + 1 (fl64, the reference's own expression) picks T from them, or
    t0 + 2: monotonicity gives P(t0 - 2) and not P(t0 + 2). A non-finite amax (never flagged)
    gives some T; tau = 0 (rtau inf) gives NaN-pattern bits above every finite magnitude."""
    amax_d = amax.to(tl.float32, bitcast=True).to(tl.float64)
    t0 = (amax_d * rtau).to(tl.float32).to(tl.int32, bitcast=True)
    thr = t0 + 2
    for k in tl.static_range(3):
        c = tl.maximum(t0 + (1 - k), 0)
        below = (c.to(tl.float32, bitcast=True).to(tl.float64) * tau) < amax_d
        thr = tl.where(below, thr, c)
    return thr


@triton.jit
def decomp_qdq_kernel(
        x_ptr, tau_ptr, out_ptr, scale_ptr, code_ptr, pt_ptr, sm_ptr, n_rows, n_cols,
        BR: tl.constexpr, BC: tl.constexpr, OUTLIER: tl.constexpr, MACRO: tl.constexpr,
        P: tl.constexpr, M_ODD: tl.constexpr, BL_M: tl.constexpr,
        EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
        EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr, XT: tl.constexpr,
        SRC: tl.constexpr):
    """One [BR, BC] tile of an fp32 (SRC 0) or bf16 (SRC 1) [n_rows, n_cols] operand (n_cols a
    multiple of 32 and of MACRO), contiguous, or with XT the transpose of a contiguous x
    [n_cols, n_rows] (element (r, c) read at c * n_rows + r: no transposed copy): outlier
    fallback (OUTLIER 1: topk k = 1, 2: block; tau and fl64(1 / tau) as fp64 at tau_ptr),
    macro-block scaling (MACRO > 0 elements, P-bit S_M), MX qdq along the rows; see the module
    docstring. Writes, contiguous [R, C] either way, values fp32, scales [R, C / 32], codes
    [R, C] (uint8), passthrough [R, C] (uint8 0 / 1, with OUTLIER) and S_M [R, C / MACRO]
    (fp32, with MACRO)."""
    r0, c0, rows, cols, m, offs = _qdq_tile(n_rows, n_cols, BR, BC)
    if XT:
        b = tl.load(x_ptr + (cols.to(tl.int64)[None, :] * n_rows + rows[:, None]), mask=m,
                    other=0)
        if SRC == 1:
            b = b.to(tl.uint16, bitcast=True).to(tl.int32) << 16
        a = b & 0x7FFFFFFF
    else:
        b, a = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    if OUTLIER != 0:
        a3 = tl.reshape(a, (BR, BC // 32, 32))
        amax = _max_along(a3, 2)                      # >= 0x7F800000: an Inf or NaN in the block
        thr = _below_bits(amax, tl.load(tau_ptr), tl.load(tau_ptr + 1))
        count = tl.reduce((a3 < thr[:, :, None]).to(tl.int32), 2, _add)
        flagged = (count >= 16) & (amax > 0) & (amax < 0x7F800000)
        if OUTLIER == 1:
            j = tl.arange(0, 32)[None, None, :]
            first = tl.reduce(tl.where(a3 == amax[:, :, None], j, 32), 2, _min)
            pt3 = (j == first[:, :, None]) & (a3 > 0) & flagged[:, :, None]
        else:
            pt3 = flagged[:, :, None] & (a3 >= 0)
        pt = tl.reshape(pt3, (BR, BC))
        # the kept bf16 value (RNE on the bits; a flagged block is finite); a bf16 source is
        # its own
        if SRC == 1:
            kept = b
        else:
            kept = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        b = tl.where(pt, 0, b)
        a = b & 0x7FFFFFFF
        tl.store(pt_ptr + offs, pt.to(tl.uint8), mask=m)
    if MACRO != 0:
        NM: tl.constexpr = BC // MACRO
        af = tl.where(a < 0x7F800000, a, 0)           # NaN and Inf read as 0
        am = _max_along(tl.reshape(af, (BR, NM, MACRO)), 2)
        smb = _macro_bits(am, P, M_ODD, BL_M)         # [BR, NM]
        smf = smb.to(tl.float32, bitcast=True)
        mrow = r0 + tl.arange(0, BR)
        mcol = c0 // MACRO + tl.arange(0, NM)
        n_mac = n_cols // MACRO
        tl.store(sm_ptr + (mrow.to(tl.int64)[:, None] * n_mac + mcol[None, :]), smf,
                 mask=(mrow < n_rows)[:, None] & (mcol < n_mac)[None, :])
        s_full = tl.reshape(tl.broadcast_to(smf[:, :, None], (BR, NM, MACRO)), (BR, BC))
        y = tl.math.div_rn(b.to(tl.float32, bitcast=True), s_full)
        b = y.to(tl.int32, bitcast=True)
        a = b & 0x7FFFFFFF
    v, byte, code = _qdq_orient(a, b, 1, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                                EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE,
                                SATURATE, False, True, False, 0)
    if MACRO != 0:
        v = v * s_full
    if OUTLIER != 0:
        v = tl.where(pt, kept.to(tl.float32, bitcast=True), v)
    tl.store(out_ptr + offs, v, mask=m)
    _store_scales(scale_ptr, byte, r0, c0, n_rows, n_cols, 0, 1, BR, BC, 0)
    _store_codes(code_ptr, code, rows, cols, n_rows, n_cols, 1, BR, BC, False, r0, c0)


# ---- the OCC clamp bounds: radix select -----------------------------------------------------
@triton.jit
def _order_key(b):
    """uint32 order key of fp32 bits b (int32): negative values bit-inverted, non-negative ones
    with the sign bit set, every NaN 0xFFFFFFFF (after +Inf), as torch's radix select orders
    floats: -0 sorts just before +0."""
    u = b.to(tl.uint32, bitcast=True)
    k = tl.where(b < 0, ~u, u | 0x80000000)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    return tl.where(nan, 0xFFFFFFFF, k)


@triton.jit
def occ_select_kernel(x_ptr, state_ptr, hist_ptr, n, SHIFT: tl.constexpr, DBITS: tl.constexpr,
                      BLOCK: tl.constexpr):
    """One radix pass over fp32 x [n]: for each target t in (0, 1) whose key prefix (the key
    bits above SHIFT + DBITS) is state[t], count the elements with that prefix by their digit
    (key >> SHIFT) & (2^DBITS - 1) into hist[t * 2^DBITS + digit]. Each program walks the
    blocks pid, pid + grid, ... and keeps its counts in registers, then adds them with one
    atomic per digit. state (int64 [4]): prefixes in 0, 1 (as uint32 values), ranks in 2, 3."""
    NB: tl.constexpr = 1 << DBITS
    TOP: tl.constexpr = SHIFT + DBITS
    pre0 = tl.load(state_ptr).to(tl.uint32)
    pre1 = tl.load(state_ptr + 1).to(tl.uint32)
    h0 = tl.full([2 * NB], 0, tl.int32)
    h1 = tl.full([2 * NB], 0, tl.int32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        key = _order_key(tl.load(x_ptr + offs, mask=m, other=0))
        digit = ((key >> SHIFT) & (NB - 1)).to(tl.int32)
        # lanes of another prefix (or masked) go to bin NB, which is never read back
        if TOP == 32:
            h0 += tl.histogram(tl.where(m, digit, NB), 2 * NB)
        else:
            h0 += tl.histogram(tl.where(m & ((key >> TOP) == (pre0 >> TOP)), digit, NB), 2 * NB)
            h1 += tl.histogram(tl.where(m & ((key >> TOP) == (pre1 >> TOP)), digit, NB), 2 * NB)
    bins = tl.arange(0, 2 * NB)
    if TOP == 32:        # no prefix yet: both targets count the same digits
        h1 = h0
    tl.atomic_add(hist_ptr + bins, h0, mask=(bins < NB) & (h0 > 0))
    tl.atomic_add(hist_ptr + NB + bins, h1, mask=(bins < NB) & (h1 > 0))


@triton.jit
def occ_pick_kernel(state_ptr, hist_ptr, out_ptr, SHIFT: tl.constexpr, DBITS: tl.constexpr):
    """After a radix pass: per target, the digit d where the running count of hist reaches the
    rank r (1-based); the prefix gains d, the rank drops by the count below d; hist is zeroed
    for the next pass. After the last pass (SHIFT 0) the prefix is the target's key, written
    to out[t] as fp32 bits (NaN keys as the quiet NaN 0x7FC00000)."""
    NB: tl.constexpr = 1 << DBITS
    bins = tl.arange(0, NB)
    for t in tl.static_range(2):
        h = tl.load(hist_ptr + t * NB + bins).to(tl.int64)
        r = tl.load(state_ptr + 2 + t)
        cum = tl.associative_scan(h, 0, _add)
        # the first digit whose cumulative count reaches r
        d = tl.reduce(tl.where(cum >= r, bins, NB), 0, _min)
        below = tl.reduce(tl.where(bins < d, h, 0), 0, _add)
        pre = tl.load(state_ptr + t) | (d.to(tl.int64) << SHIFT)
        tl.store(state_ptr + t, pre)
        tl.store(state_ptr + 2 + t, r - below)
        tl.store(hist_ptr + t * NB + bins, tl.full([NB], 0, tl.int32))
        if SHIFT == 0:
            k = pre.to(tl.uint32)
            bits = tl.where(k >= 0x80000000, k & 0x7FFFFFFF, ~k)
            bits = tl.where(k == 0xFFFFFFFF, 0x7FC00000, bits)
            tl.store(out_ptr + t, bits.to(tl.int32, bitcast=True))


@triton.jit
def occ_compact_kernel(x_ptr, state_ptr, cand_ptr, cnt_ptr, n, BLOCK: tl.constexpr):
    """After the first pass (each target's top key byte picked): copy the order keys of the
    elements whose top byte is target t's to cand[t * n + ...] (t = 0, 1), each block's range
    reserved with one atomic on cnt[t]. The order inside cand is arbitrary: the passes that
    follow count digits, which does not depend on it."""
    pre0 = tl.load(state_ptr).to(tl.uint32) >> 24
    pre1 = tl.load(state_ptr + 1).to(tl.uint32) >> 24
    # int64 (n fits int32); n may arrive as the constant 1 (specialized)
    base1 = (tl.program_id(0) * 0).to(tl.int64) + n
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        key = _order_key(tl.load(x_ptr + offs, mask=m, other=0))
        kb = key.to(tl.int32, bitcast=True)
        top = key >> 24
        for t in tl.static_range(2):
            hit = (m & (top == (pre0 if t == 0 else pre1))).to(tl.int32)
            pos = tl.associative_scan(hit, 0, _add) - hit            # exclusive prefix sum
            first = tl.atomic_add(cnt_ptr + t, tl.reduce(hit, 0, _add))
            tl.store(cand_ptr + (base1 * t + first) + pos, kb, mask=hit != 0)


@triton.jit
def occ_cand_kernel(cand_ptr, cnt_ptr, state_ptr, hist_ptr, n, SHIFT: tl.constexpr,
                    BLOCK: tl.constexpr):
    """A radix pass (8-bit digits) over each target's candidates (cand[t * n ...], cnt[t] of
    them, the count read on the device): the digit (key >> SHIFT) & 255 of the candidates whose
    key bits above SHIFT + 8 are the target's prefix, counted into hist[t * 256 + digit]."""
    bins = tl.arange(0, 512)
    for t in tl.static_range(2):
        cnt = tl.load(cnt_ptr + t)
        pre = tl.load(state_ptr + t).to(tl.uint32)
        # int64 (t <= 1: n * t fits int32); n may arrive as the constant 1 (specialized)
        base_t = (tl.program_id(0) * 0).to(tl.int64) + n * t
        h = tl.full([512], 0, tl.int32)
        for start in range(tl.program_id(0) * BLOCK, cnt, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m = offs < cnt
            key = tl.load(cand_ptr + base_t + offs, mask=m, other=0).to(tl.uint32,
                                                                          bitcast=True)
            digit = ((key >> SHIFT) & 255).to(tl.int32)
            hit = m & ((key >> (SHIFT + 8)) == (pre >> (SHIFT + 8)))
            h += tl.histogram(tl.where(hit, digit, 256), 512)
        tl.atomic_add(hist_ptr + t * 256 + bins, h, mask=(bins < 256) & (h > 0))


# ---- vector-wise E2M1 (ms-fp4), with the OCC clamp -----------------------------------------
@triton.jit
def _nan_clamp(x, lo, hi):
    """torch.clamp(x, lo, hi) for fp32 tensors, NaN from any of the three (the GPU's min / max
    return the other operand of a NaN)."""
    y = tl.minimum(tl.maximum(x, lo), hi)
    y = tl.where(hi != hi, hi, y)  # noqa: PLR0124 - NaN test
    y = tl.where(lo != lo, lo, y)  # noqa: PLR0124
    return tl.where(x != x, x, y)  # noqa: PLR0124


@triton.jit
def vector_qdq_kernel(x_ptr, bounds_ptr, code_ptr, val_ptr, s_ptr, y_ptr, res_ptr, n_rows,
                      n_cols, BR: tl.constexpr, BC: tl.constexpr, OCC: tl.constexpr,
                      WRITE_Y: tl.constexpr):
    """Rows [BR, n_cols <= BC] of a contiguous fp32 operand, vector-wise E2M1
    (torch_fast.vector_scaling): with OCC first x <- clamp(x, lo, hi) (bounds_ptr: fp32 lo,
    hi) and the residual x - clamp(x) written to res; s = fl32(amax_row / 6) (IEEE division;
    1 where amax is not > 0, NaN included), y = fl32(x / s), the E2M1 code of y at scale 2^0
    (RNE, saturating at 6; NaN -> code 0) and its value (fp32, the sign of y kept on zero).
    Writes codes uint8, values fp32, s fp32 [n_rows], y (WRITE_Y) and the residual (OCC)."""
    r0 = tl.program_id(0) * BR
    rows = r0 + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    rm = rows < n_rows
    m = rm[:, None] & (cols < n_cols)[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    if OCC:
        lo = tl.load(bounds_ptr)
        hi = tl.load(bounds_ptr + 1)
        xc = _nan_clamp(x, lo, hi)
        tl.store(res_ptr + offs, x - xc, mask=m)
        x = tl.where(m, xc, 0.0)
    ab = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    amax = tl.reduce(ab, 1, _max).to(tl.float32, bitcast=True)      # a NaN bit pattern wins
    six = tl.full([BR], 6.0, tl.float32)
    s = tl.where(amax > 0, tl.math.div_rn(amax, six), 1.0)
    tl.store(s_ptr + rows, s, mask=rm)
    y = tl.math.div_rn(x, tl.broadcast_to(s[:, None], (BR, BC)))
    if WRITE_Y:
        tl.store(y_ptr + offs, y, mask=m)
    yb = y.to(tl.int32, bitcast=True)
    a = (yb & 0x7FFFFFFF).to(tl.float32, bitcast=True)
    nan = y != y  # noqa: PLR0124 - NaN test
    q = tl.where(a < 2.0, 0.5, tl.where(a < 4.0, 1.0, 2.0))
    v = tl.minimum(a / q, 16.0)                   # q a power of two: exact; NaN handled below
    mag = tl.minimum(((v + 8388608.0) - 8388608.0) * q, 6.0)     # RNE to an integer, exact
    mag = tl.where(nan, 0.0, mag)
    m2 = (mag * 2.0).to(tl.int32)
    code = tl.where(m2 <= 4, m2, tl.where(m2 == 6, 5, tl.where(m2 == 8, 6, 7)))
    neg = (yb < 0) & ~nan
    code = code | tl.where(neg, 8, 0)
    val = (mag.to(tl.int32, bitcast=True) | tl.where(neg, -2147483648, 0)).to(tl.float32,
                                                                                 bitcast=True)
    tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)
    tl.store(val_ptr + offs, val, mask=m)


# ---- a transposed view made contiguous ------------------------------------------------------
@triton.jit
def transpose_kernel(x_ptr, y_ptr, n_rows, n_cols, T: tl.constexpr):
    """y [n_cols, n_rows] = x^T for a contiguous x [n_rows, n_cols] of 16- or 32-bit integers
    (the bits of bf16 / fp32 moved, not converted): one [T, T] tile per program, read along
    x's rows and written along y's (the layout change through shared memory), both coalesced."""
    n_ct = (n_cols + T - 1) // T
    pid = tl.program_id(0)
    pr = pid // n_ct
    r = pr * T + tl.arange(0, T)
    c = (pid - pr * n_ct) * T + tl.arange(0, T)
    m = (r < n_rows)[:, None] & (c < n_cols)[None, :]
    v = tl.load(x_ptr + (r.to(tl.int64)[:, None] * n_cols + c[None, :]), mask=m, other=0)
    tl.store(y_ptr + (c.to(tl.int64)[:, None] * n_rows + r[None, :]), tl.trans(v),
             mask=tl.trans(m))


# ---- an fp32 operand in three bf16 pieces ---------------------------------------------------
@triton.jit
def split3_bf16_kernel(x_ptr, o1_ptr, o2_ptr, o3_ptr, n, BLOCK: tl.constexpr):
    """fp32 x [n] as bf16 (o1, o2, o3) with x = o1 + o2 + o3 exactly: o1 the top 16 bits of
    x (truncated: never rounds up to Inf), o2 the top 16 of the exact remainder r = x - o1,
    o3 = r - o2 (at most 8 significant bits; RNE to bf16, exact unless below 2^-133). A NaN
    (o1 the quiet NaN) or Inf (o1 = x) has o2 = o3 = 0."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    b = tl.load(x_ptr + offs, mask=m, other=0)
    fin = (b & 0x7FFFFFFF) < 0x7F800000
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    h1 = b & -65536
    r = b.to(tl.float32, bitcast=True) - h1.to(tl.float32, bitcast=True)
    rb = r.to(tl.int32, bitcast=True)
    h2 = rb & -65536
    r3 = (r - h2.to(tl.float32, bitcast=True)).to(tl.int32, bitcast=True)
    o3 = (r3 + 0x7FFF + ((r3 >> 16) & 1)) >> 16
    o1 = tl.where(nan, 0x7FC0, b >> 16)
    tl.store(o1_ptr + offs, o1.to(tl.int16), mask=m)
    tl.store(o2_ptr + offs, tl.where(fin, h2 >> 16, 0).to(tl.int16), mask=m)
    tl.store(o3_ptr + offs, tl.where(fin, o3, 0).to(tl.int16), mask=m)


# ---- an fp32 matrix times a row vector and a column vector ------------------------------------
@triton.jit
def scale_outer_kernel(x_ptr, ra_ptr, rb_ptr, y_ptr, n_rows, n_cols, BR: tl.constexpr,
                       BC: tl.constexpr, HAS_A: tl.constexpr, HAS_B: tl.constexpr):
    """y = (x * ra[:, None]) * rb[None, :] for a contiguous fp32 x [n_rows, n_cols], each
    product rounded to nearest even in fp32 as torch's two broadcast multiplies round them
    (no fused multiply-add: compiled with enable_fp_fusion=False); HAS_A / HAS_B leave a side
    out. y may be x."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    rm = rows < n_rows
    cm = cols < n_cols
    m = rm[:, None] & cm[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    if HAS_A:
        x = x * tl.load(ra_ptr + rows, mask=rm, other=1.0)[:, None]
    if HAS_B:
        x = x * tl.load(rb_ptr + cols, mask=cm, other=1.0)[None, :]
    tl.store(y_ptr + offs, x, mask=m)


KERNELS = {"scale_outer": scale_outer_kernel, "decomp_qdq": decomp_qdq_kernel,
           "occ_select": occ_select_kernel,
           "occ_pick": occ_pick_kernel, "occ_compact": occ_compact_kernel,
           "occ_cand": occ_cand_kernel, "split3_bf16": split3_bf16_kernel,
           "vector_qdq": vector_qdq_kernel}


# =========================================================================================
# launchers
# =========================================================================================
@functools.lru_cache(maxsize=256)
def decomp_supports(spec, n_cols: int | None = None) -> bool:
    """Whether :func:`decomp_qdq` implements the operand spec (an OperandSpec of the training
    recipes): an MX format and profile of the fast kernels, RNE, block scaling, no clamp, a
    tau-rule outlier fallback ("topk" with k = 1, or "block") and / or an integer macro size
    in MACRO_SIZES, with n_cols (when given) a multiple of 32 and of the macro size."""
    from mxkernels.triton_fast import supports
    from mxref.formats import get_format
    if spec.fmt is None or get_format(spec.fmt).is_nvfp4 or spec.rounding != "rne" or \
            spec.scaling != "block" or spec.clamp_quantile is not None or \
            (spec.outlier is None and spec.macro is None):
        return False
    if spec.outlier not in OUTLIER_RULES or (spec.outlier == "topk" and spec.outlier_k != 1):
        return False
    if spec.macro is not None and (isinstance(spec.macro, bool) or
                                   not isinstance(spec.macro, int) or
                                   spec.macro not in MACRO_SIZES):
        return False
    if n_cols is not None and (n_cols % 32 or (spec.macro and n_cols % spec.macro)):
        return False
    return supports(spec.fmt, spec.profile, "float32")


_DECOMP_CE: dict = {}
# (rows per tile, warps) per (transposed view, source dtype), with BC = max(128, macro) columns,
# from bench/gpu_decomp.py on an H200 (bench/results/decomp_h200.md): at 16 rows and 4 warps
# the contiguous launch holds ~96 registers a thread (20 resident warps an SM, against 8 at
# 32 rows: 176 registers), 127 against 204 us for a 16384 x 2048 fp32 operand; the transposed
# bf16 read was fastest at 8 rows
DECOMP_TILES = {(False, "float32"): (16, 4), (False, "bfloat16"): (16, 4),
                (True, "float32"): (16, 4), (True, "bfloat16"): (8, 4)}
_TAU: dict = {}
_DECOMP_SRC = {"float32": 0, "bfloat16": 1}
_VIEW = {"float32": torch.int32, "bfloat16": torch.int16}


def _decomp_ce(fmt, profile, outlier, macro, p, m_odd, br, bc, xt=False, src="float32"):
    key = (fmt, profile, outlier, macro, p, m_odd, br, bc, bool(xt), src)
    hit = _DECOMP_CE.get(key)
    if hit is None:
        # qdq_constexprs checks tiles for both orientations (32 rows at least); this launch
        # blocks along the rows only, so any power-of-two row count serves: BR set after
        ce = qdq_constexprs(fmt, profile, "float32", rows=True, with_codes=True,
                            out_dtype="float32", block_rows=max(br, 32), block_cols=bc)
        ce["BR"] = br
        ce.update(OUTLIER=OUTLIER_RULES[outlier], MACRO=int(macro or 0), P=int(p),
                  M_ODD=int(m_odd), BL_M=int(m_odd).bit_length(), XT=bool(xt),
                  SRC=_DECOMP_SRC[src])
        names = decomp_qdq_kernel.arg_names
        ce = {k: ce[k] for k in names[9:]}
        hit = _DECOMP_CE[key] = (ce, tuple(ce[k] for k in names[9:]))
    return hit


def _tau_tensor(tau: float, device) -> torch.Tensor:
    """[tau, fl64(1 / tau)] as fp64 on the device (1 / 0 = inf), cached (no host copy per
    call: a CUDA graph can hold the launch)."""
    key = (float(tau), str(device))
    t = _TAU.get(key)
    if t is None:
        tau = float(tau)
        rtau = 1.0 / tau if tau != 0 else float("inf")      # IEEE division: RN
        t = _TAU[key] = torch.tensor([tau, rtau], dtype=torch.float64).to(device)
    return t


@functools.lru_cache(maxsize=256)
def _decomp_plan(spec, C: int, br: int, xt: bool, src: str):
    """(constexprs, macro size or 0, tile columns) of decomp_qdq_kernel for spec at C columns,
    computed once per argument tuple (the format's grid facts take ~0.1 ms of Fraction
    arithmetic: more than the launch)."""
    from mxkernels.torch_fast import MACRO_P
    from mxref.decompose import grid_facts
    from mxref.formats import get_format
    if not decomp_supports(spec, C):
        raise KernelUnsupported(f"decomp_qdq does not implement {spec} for {C} columns")
    macro = spec.macro or 0
    p = MACRO_P[spec.macro_scale_dtype] if macro else 8
    m_odd = int(grid_facts(get_format(spec.fmt)).m_odd) if macro else 1
    bc = max(128, macro)
    if br * C >= 2**31:
        raise KernelUnsupported(f"decomp_qdq: {C} columns is too wide for int32 tile offsets")
    return _decomp_ce(spec.fmt, spec.profile, spec.outlier, macro, p, m_odd, br, bc, xt,
                      src), macro, bc


def decomp_qdq(t: torch.Tensor, spec):
    """``(scales, codes, values, passthrough, macro_scales)`` of the fp32 operand t [R, C]
    under ``spec`` (see :func:`decomp_supports`), bit for bit the torch chain of
    mxkernels.training.quant (outlier fallback, macro-block scaling, MX quantize, dequantize,
    times S_M, passthrough put back): scales uint8 [R, C / 32], codes uint8 [R, C], values fp32
    [R, C], passthrough bool [R, C] (None without an outlier rule), macro_scales fp32
    [R, C / macro] (None without macro), all contiguous. t is contiguous or a transposed view
    of a contiguous tensor (x.t(): read in place, no transposed copy), float32 or bfloat16 (read
    as it is: the same bits as its float32 copy, without the copy)."""
    if not (isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.bfloat16) and
            t.ndim == 2 and (t.is_contiguous() or t.t().is_contiguous())):
        raise KernelUnsupported("decomp_qdq takes a 2-D float32 or bfloat16 tensor, contiguous "
                                "or the transpose of a contiguous one")
    xt = not t.is_contiguous()
    R, C = t.shape
    src = "bfloat16" if t.dtype == torch.bfloat16 else "float32"
    br, warps = DECOMP_TILES[(xt, src)]
    ce, macro, bc = _decomp_plan(spec, C, br, xt, src)
    dev = t.device
    values = torch.empty((R, C), dtype=torch.float32, device=dev)
    scales = torch.empty((R, C // 32), dtype=torch.uint8, device=dev)
    codes = torch.empty((R, C), dtype=torch.uint8, device=dev)
    pt = torch.empty((R, C), dtype=torch.uint8, device=dev) if spec.outlier else codes
    sm = torch.empty((R, C // macro), dtype=torch.float32, device=dev) if macro else values
    tau = _tau_tensor(spec.outlier_tau if spec.outlier else 0.0, dev)
    if R and C:
        launch_cached(decomp_qdq_kernel, -(-R // br) * -(-C // bc), ce,
                      None if INTERPRETED else warps,
                      ((t.t() if xt else t).view(_VIEW[src]), tau, values, scales, codes,
                       pt, sm, R, C), 7,
                      enable_fp_fusion=False)
    return (scales, codes, values, pt.view(torch.bool) if spec.outlier else None,
            sm if macro else None)


_SELECT_BLOCK = 4096
_STATE: dict = {}


def _select_programs(dev) -> int:
    """Programs of a radix pass: two per SM on a GPU (each loops over its blocks)."""
    return 4 if dev.type != "cuda" else 2 * sm_count(dev)


def occ_bounds(t: torch.Tensor, q: float):
    """``torch_fast.occ_bounds(t, q)`` on the device: (lo, hi), fp32 0-d tensors, the
    (n - ceil(q n) + 1)-th and ceil(q n)-th smallest elements of t (NaN after every number),
    by radix select: the top key byte over every element (:data:`occ_select_kernel`), the
    elements sharing a target's top byte copied out (:data:`occ_compact_kernel`), three more
    bytes over those only (:data:`occ_cand_kernel`), each pass followed by
    :data:`occ_pick_kernel`. Two reads of t, no host synchronization; 8 n bytes of scratch."""
    import math
    if not (isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.is_contiguous()):
        raise KernelUnsupported("occ_bounds takes a contiguous float32 tensor")
    n = t.numel()
    if n == 0 or n >= 2**31:
        raise KernelUnsupported(f"occ_bounds needs 1 <= n < 2^31 elements, not {n}")
    khi = min(n, max(1, int(math.ceil(q * n))))
    kk = n - khi + 1
    dev = t.device
    # ranks (1-based) of lo and hi among the ascending order: kk and khi
    key = (kk, khi, str(dev))
    init = _STATE.get(key)
    if init is None:
        if len(_STATE) > 256:
            _STATE.clear()
        init = _STATE[key] = torch.tensor([0, 0, kk, khi], dtype=torch.int64).to(dev)
    state = init.clone()            # a device copy: no host transfer per call
    hist = torch.zeros(512, dtype=torch.int32, device=dev)        # 2 targets x 256 digits
    cnt = torch.zeros(2, dtype=torch.int32, device=dev)
    cand = torch.empty(2 * n, dtype=torch.int32, device=dev)
    out = torch.empty(2, dtype=torch.float32, device=dev)
    x = t.reshape(-1).view(torch.int32)
    grid = (min(triton.cdiv(n, _SELECT_BLOCK), _select_programs(dev)),)
    nw = {} if INTERPRETED else {"num_warps": 8}
    nw4 = {} if INTERPRETED else {"num_warps": 4}
    o32 = out.view(torch.int32)
    # the top byte over every element, then only the elements that share a target's top byte
    occ_select_kernel[grid](x, state, hist, n, SHIFT=24, DBITS=8, BLOCK=_SELECT_BLOCK, **nw)
    occ_pick_kernel[(1,)](state, hist, o32, SHIFT=24, DBITS=8, **nw4)
    occ_compact_kernel[grid](x, state, cand, cnt, n, BLOCK=_SELECT_BLOCK, **nw)
    for shift in (16, 8, 0):
        occ_cand_kernel[grid](cand, cnt, state, hist, n, SHIFT=shift, BLOCK=_SELECT_BLOCK, **nw)
        occ_pick_kernel[(1,)](state, hist, o32, SHIFT=shift, DBITS=8, **nw4)
    return out[0], out[1]


VECTOR_MAX_COLS = 8192


def vector_qdq(t: torch.Tensor, bounds: torch.Tensor | None = None, *, write_y: bool = False):
    """``(codes, values, s, y, residual)`` of the vector-wise E2M1 quantization of the
    contiguous fp32 t [R, C] (C <= VECTOR_MAX_COLS), bit for bit torch_fast.vector_scaling
    after, with ``bounds`` (fp32 [2]: lo, hi on t's device), the OCC clamp: codes uint8 and
    values fp32 [R, C], s fp32 [R], y (``write_y``) and the residual t - clamp(t) (with bounds)
    fp32 [R, C], else None."""
    if not (isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.ndim == 2 and
            t.is_contiguous()):
        raise KernelUnsupported("vector_qdq takes a contiguous 2-D float32 tensor")
    R, C = t.shape
    if C > VECTOR_MAX_COLS:
        raise KernelUnsupported(f"vector_qdq: {C} columns; rows of up to {VECTOR_MAX_COLS}")
    dev = t.device
    codes = torch.empty((R, C), dtype=torch.uint8, device=dev)
    values = torch.empty((R, C), dtype=torch.float32, device=dev)
    s = torch.empty((R,), dtype=torch.float32, device=dev)
    y = torch.empty((R, C), dtype=torch.float32, device=dev) if write_y else None
    res = torch.empty((R, C), dtype=torch.float32, device=dev) if bounds is not None else None
    bc = max(32, triton.next_power_of_2(max(C, 1)))
    br = max(1, min(64, 4096 // bc))
    if R and C:
        vector_qdq_kernel[(triton.cdiv(R, br),)](
            t, values if bounds is None else bounds, codes, values, s,
            values if y is None else y, values if res is None else res, R, C, BR=br, BC=bc,
            OCC=bounds is not None, WRITE_Y=bool(write_y),
            **({} if INTERPRETED else {"num_warps": 4 if bc <= 2048 else 8}),
            enable_fp_fusion=False)
    return codes, values, s, y, res


_INT_OF_SIZE = {2: torch.int16, 4: torch.int32}


def transpose_contiguous(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of the 2-D transposed view t (t.t() contiguous) of a 16- or 32-bit
    dtype (bf16 / fp16 / fp32 / int), by one tiled transpose (transpose_kernel; torch's copy of
    a transposed view writes with a stride: 6x a plain copy's time on an H200). A contiguous
    t comes back as it is."""
    if not (isinstance(t, torch.Tensor) and t.ndim == 2 and t.element_size() in _INT_OF_SIZE
            and not t.is_complex() and (t.is_contiguous() or t.t().is_contiguous())):
        raise KernelUnsupported("transpose_contiguous takes a 2-D tensor of 2- or 4-byte "
                                "elements, contiguous or the transpose of a contiguous one")
    if t.is_contiguous():
        return t
    R, C = t.shape
    out = torch.empty((R, C), dtype=t.dtype, device=t.device)
    if R and C:
        T = 64
        it = _INT_OF_SIZE[t.element_size()]
        src = t.t()                                          # contiguous [C, R]
        transpose_kernel[(triton.cdiv(C, T) * triton.cdiv(R, T),)](
            src.view(it), out.view(it), C, R, T=T,
            **({} if INTERPRETED else {"num_warps": 4}))
    return out


def split3_bf16(x: torch.Tensor):
    """(x1, x2, x3) bf16 of x's shape with x = x1 + x2 + x3 exactly for a contiguous fp32 x
    (see :data:`split3_bf16_kernel`): one pass, read 4 bytes and write 6 per element."""
    if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.is_contiguous()):
        raise KernelUnsupported("split3_bf16 takes a contiguous float32 tensor")
    outs = [torch.empty(x.shape, dtype=torch.bfloat16, device=x.device) for _ in range(3)]
    n = x.numel()
    if n:
        split3_bf16_kernel[(triton.cdiv(n, 2048),)](
            x.view(torch.int32), *(o.view(torch.int16) for o in outs), n, BLOCK=2048,
            **({} if INTERPRETED else {"num_warps": 4}), enable_fp_fusion=False)
    return tuple(outs)


def scale_outer(x: torch.Tensor, ra: torch.Tensor | None = None, rb: torch.Tensor | None = None,
                *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``(x * ra[:, None]) * rb[None, :]`` in one pass over a contiguous fp32 x [R, C], bit for
    bit torch's two broadcast multiplies (either vector may be None; ``out`` may be x). ra: fp32
    [R], rb: fp32 [C], contiguous, on x's device. torch's broadcast multiply of a [R, C] fp32
    tensor runs its unvectorised kernel, once per vector: the vector-wise GEMM epilogue and the
    dequantized copy of a vector-scaled operand (ms-fp4)."""
    ok = isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.ndim == 2 and \
        x.is_contiguous()
    for v, n in ((ra, 0), (rb, 1)):
        ok = ok and (v is None or (v.dtype == torch.float32 and v.ndim == 1 and
                                   v.is_contiguous() and v.numel() == x.shape[n] and
                                   v.device == x.device))
    if not ok or (out is not None and (out.shape != x.shape or out.dtype != x.dtype or
                                       not out.is_contiguous())):
        raise KernelUnsupported("scale_outer takes a contiguous 2-D float32 x with float32 "
                                "vectors of its rows' and columns' lengths")
    y = torch.empty_like(x) if out is None else out
    R, C = x.shape
    if R and C:
        br, bc = 16, 256
        scale_outer_kernel[(triton.cdiv(R, br), triton.cdiv(C, bc))](
            x, x if ra is None else ra, x if rb is None else rb, y, R, C, BR=br, BC=bc,
            HAS_A=ra is not None, HAS_B=rb is not None,
            **({} if INTERPRETED else {"num_warps": 4}), enable_fp_fusion=False)
    return y


def aot_specs():
    """[(id, jitfn, signature, constexprs)]: decomp (outlier + macro 128, each alone, macro 256)
    for MXFP4 and MXFP8, a transposed input, bf16 sources (contiguous and transposed); the
    radix pass at the first and last digit and the pick step."""
    out = []
    names = decomp_qdq_kernel.arg_names
    rt = {"x_ptr": "*i32", "tau_ptr": "*fp64", "out_ptr": "*fp32", "scale_ptr": "*u8",
          "code_ptr": "*u8", "pt_ptr": "*u8", "sm_ptr": "*fp32", "n_rows": "i32",
          "n_cols": "i32"}
    for fmt, outlier, macro, xt, src in (
            ("mxfp4", "topk", 128, False, "float32"), ("mxfp4", "topk", 0, False, "float32"),
            ("mxfp4", None, 128, False, "float32"),
            ("mxfp8_e4m3", "block", 256, False, "float32"),
            ("mxfp4", "topk", 128, True, "float32"), ("mxfp4", "topk", 128, False, "bfloat16"),
            ("mxfp4", "topk", 128, True, "bfloat16")):
        bc = max(128, macro)
        ce, _ = _decomp_ce(fmt, "ocp", outlier, macro, 8, 3 if fmt == "mxfp4" else 7,
                           DECOMP_TILES[(xt, src)][0], bc, xt, src)
        sig = {**rt, "x_ptr": "*i16" if src == "bfloat16" else "*i32",
               **{k: "constexpr" for k in ce}}
        out.append((f"decomp_qdq-{fmt}-{outlier}-m{macro}{'-xt' if xt else ''}"
                    f"{'-bf16' if src == 'bfloat16' else ''}",
                    decomp_qdq_kernel, {k: sig[k] for k in names}, dict(ce)))
    for bits in (16, 32):
        out.append((f"transpose{bits}", transpose_kernel,
                    {"x_ptr": f"*i{bits}", "y_ptr": f"*i{bits}", "n_rows": "i32",
                     "n_cols": "i32", "T": "constexpr"}, {"T": 64}))
    for shift in (16, 0):
        ce = {"SHIFT": shift, "BLOCK": _SELECT_BLOCK}
        sig = {"cand_ptr": "*i32", "cnt_ptr": "*i32", "state_ptr": "*i64", "hist_ptr": "*i32",
               "n": "i32", **{k: "constexpr" for k in ce}}
        out.append((f"occ_cand-s{shift}", occ_cand_kernel,
                    {k: sig[k] for k in occ_cand_kernel.arg_names}, ce))
    ce = {"BLOCK": _SELECT_BLOCK}
    sig = {"x_ptr": "*i32", "state_ptr": "*i64", "cand_ptr": "*i32", "cnt_ptr": "*i32",
           "n": "i32", "BLOCK": "constexpr"}
    out.append(("occ_compact", occ_compact_kernel,
                {k: sig[k] for k in occ_compact_kernel.arg_names}, ce))
    for shift, db in ((24, 8), (0, 8)):
        ce = {"SHIFT": shift, "DBITS": db, "BLOCK": _SELECT_BLOCK}
        sig = {"x_ptr": "*i32", "state_ptr": "*i64", "hist_ptr": "*i32", "n": "i32",
               **{k: "constexpr" for k in ce}}
        out.append((f"occ_select-s{shift}-d{db}", occ_select_kernel,
                    {k: sig[k] for k in occ_select_kernel.arg_names}, ce))
        ce = {"SHIFT": shift, "DBITS": db}
        sig = {"state_ptr": "*i64", "hist_ptr": "*i32", "out_ptr": "*i32", "SHIFT": "constexpr",
               "DBITS": "constexpr"}
        out.append((f"occ_pick-s{shift}-d{db}", occ_pick_kernel,
                    {k: sig[k] for k in occ_pick_kernel.arg_names}, ce))
    for bc, occ, wy in ((1024, True, False), (1024, False, True), (8192, True, True)):
        ce = {"BR": max(1, 4096 // bc), "BC": bc, "OCC": occ, "WRITE_Y": wy}
        sig = {"x_ptr": "*fp32", "bounds_ptr": "*fp32", "code_ptr": "*u8", "val_ptr": "*fp32",
               "s_ptr": "*fp32", "y_ptr": "*fp32", "res_ptr": "*fp32", "n_rows": "i32",
               "n_cols": "i32", **{k: "constexpr" for k in ce}}
        out.append((f"vector_qdq-{bc}-occ{int(occ)}-y{int(wy)}", vector_qdq_kernel,
                    {k: sig[k] for k in vector_qdq_kernel.arg_names}, ce))
    ce = {"BLOCK": 2048}
    sig = {"x_ptr": "*i32", "o1_ptr": "*i16", "o2_ptr": "*i16", "o3_ptr": "*i16", "n": "i32",
           "BLOCK": "constexpr"}
    out.append(("split3_bf16", split3_bf16_kernel,
                {k: sig[k] for k in split3_bf16_kernel.arg_names}, ce))
    for ha, hb in ((True, True), (True, False)):
        ce = {"BR": 16, "BC": 256, "HAS_A": ha, "HAS_B": hb}
        sig = {"x_ptr": "*fp32", "ra_ptr": "*fp32", "rb_ptr": "*fp32", "y_ptr": "*fp32",
               "n_rows": "i32", "n_cols": "i32", **{k: "constexpr" for k in ce}}
        out.append((f"scale_outer-a{int(ha)}-b{int(hb)}", scale_outer_kernel,
                    {k: sig[k] for k in scale_outer_kernel.arg_names}, ce))
    return out
