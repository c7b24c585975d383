"""Triton MX / NVFP4 GEMM kernels held to ``mxref.gemm`` (docs/gemm.md): ``Y = A . B^T`` for
A [M, K], B [N, K] blocked along K, fp32 output [M, N].

Contracts (:func:`gemm_contract`) and why each holds
----------------------------------------------------
``block_sequential`` (bit for bit equal to ``mxref.gemm.gemm_codes(mode="block_sequential")``):

* **MXFP4 x MXFP4** (FP8 tensor cores, "per-32 promotion"): the E2M1 codes are re-encoded
  exactly as E4M3 bytes (:func:`mxfp4_to_e4m3`; every E2M1 value is an E4M3 value), then per
  K block of 32 ``part = tl.dot(a_e4m3[BM, 32], b_e4m3[32, BN])`` with a fresh accumulator.
  Every product is a multiple of 2^-2 and |block sum| <= 32 * 36 = 1152, so the sum is an
  integer multiple of 2^-2 below 2^13 units: it needs 13 bits, which the FP8 wgmma
  accumulator keeps (perf_anchors B: exact in every hardware test) and fp32 holds exactly.
* **FP4 / FP6 / INT8 MX pairs** (mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxint8 in any combination):
  elements are decoded exactly to bf16 (a 256-entry bit table; every such element has <= 8
  significant bits) and one K = 32 bf16 dot per block gives the block sum. Every product is a
  multiple of q = 2^(base_a + base_b) and sum |products| <= 32 max|qa| max|qb| q < 2^23 q
  (worst pair e3m2 x e3m2: 6,422,528 q). An fp32-accumulating tensor core that aligns its
  addends to the largest exponent with >= 24 significand bits (any truncation or rounding
  mode) therefore drops no bit: the block sum is exact.
  (FP8 E4M3/E5M2 elements: sums need up to 41 / 55 bits, a float accumulator rounds: next.)
* **Pairs with an MXFP8 operand** (all but E5M2 x E5M2; :func:`gemm_planes_kernel`): every
  element integer q (value q * 2^base) is split by a 256-entry table into int8 planes,
  q = v * 2^(4 g) with |v| <= 127 (E4M3: 4 planes, E5M2: 8, E3M2: 2, others 1). Per K block
  the int8 tensor cores form dot(A_g, B_h) with int32 accumulation (|sum| <= 32 * 127^2:
  exact), the planes are combined in int64 (|P_j| < 2^56), and c_j = fl32(P_j * 2^E) is
  rounded once on the integers (24-bit RNE, or RNE at the 2^-149 grid where c_j is subnormal;
  Inf past the largest binade; -0 for a negative sum that underflows). NaN codes and 0xFF
  scales make their block NaN; E5M2 Infs give per-output +Inf / -Inf / Inf x 0 counts from
  int8 indicator dots (only in blocks that hold an Inf). E5M2 x E5M2 block sums need 69 bits,
  beyond int64: that pair stays ``bound``.
* then, both cases, ``c_j = fl(part * 2^(sa + sb - 254))`` with exactly one rounding for every
  pair of scale bytes, and ``acc = fl(acc + c_j)`` (kernels launched with
  ``enable_fp_fusion=False``: no FMA contraction). 2^(sa+sb-254) spans 2^-254..2^254, outside
  fp32, so it is applied as two power-of-two multiplies built from bits: the first,
  2^e1 with e1 clamped so that ``part * 2^e1`` stays a normal finite fp32 (exact), the second
  2^e2 (e2 = e - e1 clamped to [-126, 127]) rounds once (gradual underflow, overflow to Inf).
  Where e2 had to be clamped the exact value and the computed one both round to zero
  (|value| < 2^-227) or both overflow. When every scale byte of the tile is in the safe range
  (a scalar reduction per block) the cheaper outer-product form ``(part * fa[m]) * fb[n]`` is
  used: it is the same single rounding. Scale 0xFF gives NaN, 0x00 is 2^-127 (not zero).
  acc starts at +0, so the sign of a zero c_j never shows (+0 + -0 = +0), as in the reference.
* **NVFP4 x NVFP4**: E2M1 elements times their E4M3 block scale (<= 6 significant bits,
  2^-10..2688) are exact in bf16 and are folded into the operands; one K = 16 bf16 dot per
  block gives ``P_j * Sa_j * Sb_j`` exactly (a common factor per block, <= 12 bits of
  products), which is already the reference's c_j (it never rounds for E2M1 x E2M1), so
  ``acc = fl(acc + part)``; at the end ``Y = fl(acc * fl(ta * tb))`` in fp32 (the cuBLAS/TE
  epilogue order of the reference).

``bound`` (within ``mxref.gemm.gemm_error_bound``, elements / bf16 upcast): MXFP8 E5M2 x E5M2,
and every pair under ``mode="fast"``: elements decoded to bf16
with the scale folded in as a power-of-two exponent add where the result is a bf16 normal
(exact), an integer-domain RNE to bf16 with gradual underflow otherwise (the bound's bf16
upcast model), then one ``tl.dot`` over BLOCK_K with fp32 accumulation in the tensor core's
own order. On hardware whose fp32 accumulation truncates, check with ``rounding="faithful"``.

``dot_scaled_gemm``: ``tl.dot_scaled`` peer for benchmarks only, no contract claimed. On
Hopper Triton decomposes it to a bf16 upcast that decodes E8M0 byte 0x00 as zero instead of
2^-127 (mx_anchors B9-B12; perf_anchors 0.3), so it is wrong for blocks with scale 0x00.

Hardware assumptions (not checkable here, no GPU): fp32 multiplies and adds without FTZ/DAZ
(Triton's default on NVIDIA; AMD gfx9 keeps fp32 denormals by default), tensor-core block sums
as stated above. The interpreter (TRITON_INTERPRET=1) stores bf16 as raw uint16 and cannot
``tl.dot`` it, so interpreted launches run the same kernels with ``DOT_F32=True``: the same
exact bf16 values in fp32 containers through an IEEE fp32 dot.

Kernels only use Triton core builtins and the integer helpers of ``mxkernels.triton_quant``.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from mxkernels.triton_quant import (
    KernelUnsupported,
    _bitlen64,
    _false_like,
    _max_along,
    _round_sig,
)
from mxref.formats import ELEMENT_FORMATS, get_format

__all__ = [
    "mx_to_bf16",
    "KERNELS",
    "KernelUnsupported",
    "aot_specs",
    "dot_scaled_gemm",
    "gemm_contract",
    "gemm_kernel_params",
    "mx_gemm",
    "mx_gemm_prepared",
    "mxfp4_to_e4m3",
]

_F32_QNAN: tl.constexpr = tl.constexpr(0x7FC00000)
_BF16_QNAN: tl.constexpr = tl.constexpr(0x7FC0)
_BF16_INF: tl.constexpr = tl.constexpr(0x7F80)


# =========================================================================================
# helpers
# =========================================================================================
@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) in GROUP_M-swizzled order (L2 reuse of B tiles)."""
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


@triton.jit
def _pow2_f32(e):
    """fp32 2^e for integer e in [-126, 127] (built from bits)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e8m0_f32(s):
    """fp32 value of E8M0 bytes s in [1, 254] as 2^(s-127); 255 -> NaN (callers keep 0 out)."""
    return tl.where(s == 255, _F32_QNAN, s << 23).to(tl.float32, bitcast=True)


@triton.jit
def _bf16_operand(bits, DOT_F32: tl.constexpr):
    """A tensor-core operand from bf16 bit patterns (int32 holding 16 bits): bf16 on GPUs, the
    same values as fp32 under the interpreter (which cannot dot bf16)."""
    if DOT_F32:
        return (bits << 16).to(tl.float32, bitcast=True)
    else:
        return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _dot(a, b, DOT_F32: tl.constexpr):
    if DOT_F32:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _scale_block(part, sa, sb, PLO: tl.constexpr, PHI: tl.constexpr, SAFE: tl.constexpr):
    """c = fl(part * 2^(sa + sb - 254)) with one rounding for every byte pair; NaN for 0xFF.
    part: exact block sums, 0 or 2^PLO <= |part| < 2^PHI; sa [BM], sb [BN] int32 bytes.
    SAFE (decided once per tile, before the K loop, from per-row flags): every A byte is in
    [1 - PLO, 255 - PHI] or 0xFF and every B byte >= 1, so part * 2^(sa-127) is exact (normal,
    finite, or NaN) and the multiply by 2^(sb-127) is the one rounding."""
    if SAFE:
        c = (part * _e8m0_f32(sa)[:, None]) * _e8m0_f32(sb)[None, :]
    else:
        e = sa[:, None] + sb[None, :] - 254
        e1 = tl.minimum(tl.maximum(e, -126 - PLO), 128 - PHI)
        e2 = tl.minimum(tl.maximum(e - e1, -126), 127)
        c = (part * _pow2_f32(e1)) * _pow2_f32(e2)
        nan = (sa == 255)[:, None] | (sb == 255)[None, :]
        c = tl.where(nan, tl.full(c.shape, _F32_QNAN, tl.int32).to(tl.float32, bitcast=True), c)
    return c


# =========================================================================================
# E2M1 -> E4M3 pre-pass
# =========================================================================================
@triton.jit
def _e2m1_to_e4m3_bits(c):
    """E4M3 byte of E2M1 codes (int32, 4 bits): magnitude v -> v < 2 ? 48 v : 4 v + 48."""
    v = c & 7
    mag = tl.where(v < 2, v * 48, (v << 2) + 48)
    return mag | ((c & 8) << 4)


@triton.jit
def e2m1_to_e4m3_kernel(src_ptr, dst_ptr, R, K, KP, PACKED: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """codes [R, K] (or packed bytes [R, KP], element 0 in the low nibble) -> E4M3 bytes [R, K].
    A program handles BLOCK_R rows x BLOCK_C source columns."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r64 = r.to(tl.int64)[:, None]
    rok = (r < R)[:, None]
    if PACKED:
        byte = tl.load(src_ptr + r64 * KP + cs[None, :], mask=rok & (cs < KP)[None, :],
                       other=0).to(tl.int32)
        lo = _e2m1_to_e4m3_bits(byte & 15)
        hi = _e2m1_to_e4m3_bits(byte >> 4)
        out = tl.reshape(tl.join(lo, hi), (BLOCK_R, 2 * BLOCK_C))
        oc = tl.program_id(1) * (2 * BLOCK_C) + tl.arange(0, 2 * BLOCK_C)
        tl.store(dst_ptr + r64 * K + oc[None, :], out.to(tl.uint8), mask=rok & (oc < K)[None, :])
    else:
        m = rok & (cs < K)[None, :]
        c = tl.load(src_ptr + r64 * K + cs[None, :], mask=m, other=0).to(tl.int32)
        tl.store(dst_ptr + r64 * K + cs[None, :], _e2m1_to_e4m3_bits(c).to(tl.uint8), mask=m)


# =========================================================================================
# block-sequential GEMM (bit-exact): FP8 (E2M1-valued E4M3) or bf16 (decoded codes) operands
# =========================================================================================
@triton.jit
def _blockseq_loop(a_desc, b_desc, a_ptr, b_ptr, sa_ptr, sb_ptr, lut_a_ptr, lut_b_ptr, slut_ptr,
                   K, NBLK, pid_m, pid_n, rm64, rn64, m_ok, n_ok, OPS: tl.constexpr,
                   NV: tl.constexpr, BS: tl.constexpr, PLO: tl.constexpr, PHI: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
                   USE_TMA: tl.constexpr, SAFE: tl.constexpr, one):
    """The K loop of gemm_block_sequential_kernel (acc = +0; acc = fl(acc + c_j), j ascending).

    ``one`` is a run-time 1.0 (read from memory). NVFP4 adds the block sum itself, and Triton's
    combine pass rewrites ``acc + dot(a, b, 0)`` into ``dot(a, b, acc)``: the tensor core then
    accumulates across blocks with its own (truncating) alignment, which is not the contract
    (seen on an H200: 10 rotated-GEMM cases a few ulp off). ``dot * one`` is exact and keeps
    the add on the CUDA cores; tests/test_kernels_gemm.py checks the compiled IR."""
    kk = tl.arange(0, BS)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for j in range(NBLK):
        k = j * BS + kk
        k_ok = k < K
        if USE_TMA:
            a = a_desc.load([pid_m * BLOCK_M, j * BS]).to(tl.float8e4nv, bitcast=True)
            b = tl.trans(b_desc.load([pid_n * BLOCK_N, j * BS]).to(tl.float8e4nv,
                                                                   bitcast=True))
        else:
            a = tl.load(a_ptr + rm64[:, None] * K + k[None, :], mask=m_ok[:, None] & k_ok[None, :],
                        other=0)
            b = tl.load(b_ptr + rn64[None, :] * K + k[:, None], mask=k_ok[:, None] & n_ok[None, :],
                        other=0)
        sa = tl.load(sa_ptr + rm64 * NBLK + j, mask=m_ok, other=127).to(tl.int32)
        sb = tl.load(sb_ptr + rn64 * NBLK + j, mask=n_ok, other=127).to(tl.int32)
        if OPS == 0:
            if not USE_TMA:
                a = a.to(tl.float8e4nv, bitcast=True)
                b = b.to(tl.float8e4nv, bitcast=True)
            part = tl.dot(a, b)
        else:
            xa = tl.load(lut_a_ptr + a.to(tl.int32)).to(tl.int32) & 0xFFFF
            xb = tl.load(lut_b_ptr + b.to(tl.int32)).to(tl.int32) & 0xFFFF
            if NV:
                fa = (tl.load(slut_ptr + sa).to(tl.int32) << 16).to(tl.float32, bitcast=True)
                fb = (tl.load(slut_ptr + sb).to(tl.int32) << 16).to(tl.float32, bitcast=True)
                # e * S: <= 6 significant bits in [2^-10, 2688]: exact in fp32 and in bf16
                xa = ((xa << 16).to(tl.float32, bitcast=True) * fa[:, None]).to(
                    tl.int32, bitcast=True) >> 16
                xb = ((xb << 16).to(tl.float32, bitcast=True) * fb[None, :]).to(
                    tl.int32, bitcast=True) >> 16
            part = _dot(_bf16_operand(xa, DOT_F32), _bf16_operand(xb, DOT_F32), DOT_F32)
        if NV:
            acc = acc + part * one
        else:
            acc = acc + _scale_block(part, sa, sb, PLO, PHI, SAFE)
    return acc


@triton.jit
def gemm_block_sequential_kernel(
        a_ptr, b_ptr, sa_ptr, sb_ptr, lut_a_ptr, lut_b_ptr, slut_ptr, ts_ptr, out_ptr,
        ra_ptr, rb_ptr, M, N, K, NBLK,
        OPS: tl.constexpr, NV: tl.constexpr, BS: tl.constexpr, PLO: tl.constexpr,
        PHI: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        GROUP_M: tl.constexpr, DOT_F32: tl.constexpr, USE_TMA: tl.constexpr):
    """acc = +0; per K block j (ascending): acc = fl(acc + c_j); c_j the exact block sum times
    the scales rounded once. OPS 0: a/b are E4M3 bytes of E2M1 values (fp8 dot); OPS 1: a/b are
    element codes decoded through the bf16 bit tables lut_a/lut_b. NV: NVFP4 (E4M3 block scales
    through slut folded into the operands, Y = fl(acc * fl(ta * tb)), ts = [ta, tb])."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                           block_shape=[BLOCK_M, BS])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1],
                                           block_shape=[BLOCK_N, BS])
    else:
        a_desc = a_ptr
        b_desc = b_ptr
    # one scalar decision per tile, outside the K loop: every scale byte of these rows is in
    # the range where the two-multiply scaling is exact (flags computed by the launcher)
    fa = tl.load(ra_ptr + rm64, mask=m_ok, other=1).to(tl.int32)
    fb = tl.load(rb_ptr + rn64, mask=n_ok, other=1).to(tl.int32)
    unsafe = _max_along(tl.where(fa != 0, 0, 1), 0) + _max_along(tl.where(fb != 0, 0, 1), 0)
    if unsafe == 0:
        acc = _blockseq_loop(a_desc, b_desc, a_ptr, b_ptr, sa_ptr, sb_ptr, lut_a_ptr, lut_b_ptr,
                             slut_ptr, K, NBLK, pid_m, pid_n, rm64, rn64, m_ok, n_ok, OPS, NV,
                             BS, PLO, PHI, BLOCK_M, BLOCK_N, DOT_F32, USE_TMA, True,
                             tl.load(ts_ptr + 2))
    else:
        acc = _blockseq_loop(a_desc, b_desc, a_ptr, b_ptr, sa_ptr, sb_ptr, lut_a_ptr, lut_b_ptr,
                             slut_ptr, K, NBLK, pid_m, pid_n, rm64, rn64, m_ok, n_ok, OPS, NV,
                             BS, PLO, PHI, BLOCK_M, BLOCK_N, DOT_F32, USE_TMA, False,
                             tl.load(ts_ptr + 2))
    if NV:
        t = tl.load(ts_ptr) * tl.load(ts_ptr + 1)
        acc = acc * t
    tl.store(out_ptr + rm64[:, None] * N + rn64[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])


# =========================================================================================
# block-sequential GEMM (bit-exact) for pairs with FP8 elements: int8 planes, integer block sums
# =========================================================================================
@triton.jit
def _f32_scaled_int(P, E):
    """fl32(P * 2^E) for int64 P (|P| < 2^62) and int32 E: one RNE rounding with gradual
    underflow, +-Inf on overflow, -0 for a negative P that rounds to zero. Decided on the
    integers: the significand is rounded to 24 bits, or to the 2^-149 grid where the result
    is subnormal, and the fp32 bits are assembled."""
    neg = P < 0
    m = tl.where(neg, -P, P)
    L = _bitlen64(m)
    d = tl.minimum(tl.maximum(L - 24, -149 - E), 62)    # bits to drop (< 0: shift left)
    dr = tl.maximum(d, 1).to(tl.int64)
    qr = m >> dr
    rem = m - (qr << dr)
    half = tl.full(m.shape, 1, tl.int64) << (dr - 1)
    up = (rem > half) | ((rem == half) & ((qr & 1) == 1))
    qr = qr + up.to(tl.int64)
    q = tl.where(d > 0, qr, m << tl.maximum(-d, 0).to(tl.int64))
    e2 = E + d                                          # exponent of q's unit
    carry = q == (1 << 24)
    q = tl.where(carry, q >> 1, q)
    e2 = tl.where(carry, e2 + 1, e2)
    q32 = q.to(tl.int32)
    normal = q32 >= (1 << 23)
    bexp = e2 + 150
    bits = tl.where(normal, (tl.minimum(tl.maximum(bexp, 0), 255) << 23) | (q32 & 0x7FFFFF),
                    q32)
    bits = tl.where(normal & (bexp >= 255), 0x7F800000, bits)
    bits = bits | (neg.to(tl.int32) << 31)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _plane(e, v, G: tl.constexpr):
    """int8 plane G of looked-up entries e (plane index in bits 8..11) with values v."""
    return tl.where(((e >> 8) & 15) == G, v, 0).to(tl.int8)


@triton.jit
def _plane_dots(ea, va, eb, vb, S: tl.constexpr, GA: tl.constexpr, GB: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """sum over g + h = S of dot(A_g, B_h): int32, exact (|sum| <= GA * 32 * 127^2)."""
    C = tl.full((BLOCK_M, BLOCK_N), 0, tl.int32)
    for g in tl.static_range(GA):
        if S - g >= 0:
            if S - g < GB:
                C = tl.dot(_plane(ea, va, g), _plane(eb, vb, S - g), C, out_dtype=tl.int32)
    return C


@triton.jit
def _flag(e, BIT: tl.constexpr):
    return ((e >> BIT) & 1).to(tl.int8)


@triton.jit
def _inf_counts(ea, eb):
    """Per output: (#+Inf products, #-Inf products, #Inf x 0 products) of one block, as int8
    indicator dots (exact int32 counts). ea [BM, BS], eb [BS, BN] plane-table entries."""
    ia, ib = _flag(ea, 13), _flag(eb, 13)
    za, zb = _flag(ea, 14), _flag(eb, 14)
    na, nb = _flag(ea, 15), _flag(eb, 15)
    nza, nzb = 1 - za, 1 - zb                 # nonzero (Inf included; NaN entries: see caller)
    pa, pb = nza * (1 - na), nzb * (1 - nb)   # positive nonzero
    ma, mb = nza * na, nzb * nb               # negative nonzero
    fpa, fma = pa * (1 - ia), ma * (1 - ia)   # finite nonzero of A (its Inf counted once)
    ipa, ima = ia * (1 - na), ia * na
    ipb, imb = ib * (1 - nb), ib * nb
    pinf = tl.dot(ipa, pb, out_dtype=tl.int32)
    pinf = tl.dot(ima, mb, pinf, out_dtype=tl.int32)
    pinf = tl.dot(fpa, ipb, pinf, out_dtype=tl.int32)
    pinf = tl.dot(fma, imb, pinf, out_dtype=tl.int32)
    ninf = tl.dot(ipa, mb, out_dtype=tl.int32)
    ninf = tl.dot(ima, pb, ninf, out_dtype=tl.int32)
    ninf = tl.dot(fpa, imb, ninf, out_dtype=tl.int32)
    ninf = tl.dot(fma, ipb, ninf, out_dtype=tl.int32)
    zinf = tl.dot(ia, zb, out_dtype=tl.int32)
    zinf = tl.dot(za, ib, zinf, out_dtype=tl.int32)
    return pinf, ninf, zinf


@triton.jit
def gemm_planes_kernel(
        a_ptr, b_ptr, sa_ptr, sb_ptr, pl_a_ptr, pl_b_ptr, out_ptr, M, N, K, NBLK,
        GA: tl.constexpr, GB: tl.constexpr, W: tl.constexpr, BASE: tl.constexpr,
        SPECIAL: tl.constexpr, HAS_INF: tl.constexpr, F64: tl.constexpr, BS: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Bit-exact block_sequential for MX pairs whose block sums overflow a float accumulator
    (E4M3 / E5M2 elements). Each element integer q (value q * 2^base) is split by a table into
    int8 planes, q = v * 2^(W g) with |v| <= 127 and g < GA (GB); per K block the exact sum
    P_j = sum_s 2^(W s) sum_(g+h=s) dot(A_g, B_h) comes from int8 tensor-core dots (int32
    accumulation, exact) combined in int64; then c_j = fl32(P_j * 2^(BASE + sa + sb - 254)) is
    rounded once on the integers (:func:`_f32_scaled_int`) and acc = fl(acc + c_j).

    Plane-table entry: bits 0-7 v (two's complement), 8-11 g, 12 NaN, 13 Inf, 14 zero,
    15 negative. SPECIAL: the formats have NaN codes (a NaN element makes its block's c_j
    NaN); HAS_INF: E5M2 (per output +Inf / -Inf / Inf x 0 counts from indicator dots, only in
    tiles whose block holds an Inf). F64: every block sum of the pair is below 2^53 (all but
    E4M3 x E5M2), so the planes are combined and scaled in fp64, exactly, and the fp64 -> fp32
    conversion is the rounding: about 10 fp64 operations per output and block instead of the
    int64 rounding's ~100 emulated ones (measured 0.007x cuBLAS BF16 on an H100 with int64)."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    kk = tl.arange(0, BS)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for j in range(NBLK):
        k = j * BS + kk
        k_ok = k < K
        a = tl.load(a_ptr + rm64[:, None] * K + k[None, :], mask=m_ok[:, None] & k_ok[None, :],
                    other=0).to(tl.int32)
        b = tl.load(b_ptr + rn64[None, :] * K + k[:, None], mask=k_ok[:, None] & n_ok[None, :],
                    other=0).to(tl.int32)
        ea = tl.load(pl_a_ptr + a)
        eb = tl.load(pl_b_ptr + b)
        va = ((ea & 0xFF) ^ 0x80) - 0x80
        vb = ((eb & 0xFF) ^ 0x80) - 0x80
        sa = tl.load(sa_ptr + rm64 * NBLK + j, mask=m_ok, other=127).to(tl.int32)
        sb = tl.load(sb_ptr + rn64 * NBLK + j, mask=n_ok, other=127).to(tl.int32)
        if F64:
            # |P| < 2^53: the plane sums, P itself and P * 2^(BASE+sa-127) * 2^(sb-127)
            # (2^-290..2^309) are exact fp64 values; the fp64 -> fp32 conversion is the one
            # RNE rounding (gradual underflow, Inf on overflow, -0 kept)
            P64 = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float64)
            for s in tl.static_range(GA + GB - 1):
                C = _plane_dots(ea, va, eb, vb, s, GA, GB, BLOCK_M, BLOCK_N)
                P64 = P64 + C.to(tl.float64) * (1 << (W * s))
            fa = ((BASE + sa - 127 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
            fb = ((sb - 127 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
            c = ((P64 * fa[:, None]) * fb[None, :]).to(tl.float32)
        else:
            P = tl.full((BLOCK_M, BLOCK_N), 0, tl.int64)
            for s in tl.static_range(GA + GB - 1):
                C = _plane_dots(ea, va, eb, vb, s, GA, GB, BLOCK_M, BLOCK_N)
                P = P + (C.to(tl.int64) << (W * s))
            c = _f32_scaled_int(P, BASE + sa[:, None] + sb[None, :] - 254)
        nan = (sa == 255)[:, None] | (sb == 255)[None, :]
        if SPECIAL:
            nan_a = _max_along((ea >> 12) & 1, 1)
            nan_b = _max_along((eb >> 12) & 1, 0)
            nan = nan | (nan_a != 0)[:, None] | (nan_b != 0)[None, :]
            if HAS_INF:
                any_inf = _max_along(_max_along((ea >> 13) & 1, 1), 0) + \
                    _max_along(_max_along((eb >> 13) & 1, 1), 0)
                if any_inf > 0:
                    pinf, ninf, zinf = _inf_counts(ea, eb)
                    c = tl.where(pinf > 0, float("inf"), c)
                    c = tl.where(ninf > 0, float("-inf"), c)
                    nan = nan | ((pinf > 0) & (ninf > 0)) | (zinf > 0)
        c = tl.where(nan, tl.full(c.shape, _F32_QNAN, tl.int32).to(tl.float32, bitcast=True), c)
        acc = acc + c
    tl.store(out_ptr + rm64[:, None] * N + rn64[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])


# =========================================================================================
# fast GEMM (bound): decode + fold scales into bf16, one dot per BLOCK_K
# =========================================================================================
@triton.jit
def _fold_mx(x, s, ELO: tl.constexpr, EHI: tl.constexpr):
    """bf16 bits of element x (bf16 bits, int32) times 2^(s-127) for E8M0 bytes s (same
    shape): an exponent add when every result is a bf16 normal (ELO..EHI: the elements'
    exponent range), else RNE with gradual underflow on integers; 0xFF -> NaN."""
    mag = x & 0x7FFF
    neg = x & 0x8000
    special = mag >= _BF16_INF
    safe = ((s >= 1 - ELO) & (s <= 254 - EHI)) | (s == 255)
    bad = _max_along(_max_along(tl.where(safe, 0, 1), 1), 0)
    if bad == 0:
        y = tl.where((mag == 0) | special, x, x + ((s - 127) << 7))
    else:
        sig = (mag & 0x7F) | 0x80
        exp2 = (mag >> 7) - 134 + (s - 127)
        code, huge = _round_sig(sig, exp2, _false_like(sig), 7, -126, 127, False, 0, False)
        code = tl.where(huge | (code >= _BF16_INF), _BF16_INF, code)
        y = tl.where(mag == 0, x, neg | code)
        y = tl.where(special, x, y)
    return tl.where(s == 255, _BF16_QNAN, y)


@triton.jit
def _load_operand(c_ptr, s_ptr, lut_ptr, slut_ptr, r64, r_ok, k0, K, NBLK,
                  BR: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr, NV: tl.constexpr,
                  ELO: tl.constexpr, EHI: tl.constexpr, E2M1: tl.constexpr = False):
    """[BR, BK] bf16 bits of scaled elements of rows r64, columns k0.. (masked: zero).
    E2M1: the element's bf16 bits computed from the code (the same bits as the table, checked
    for all 256 bytes by the tests) instead of a per-element table gather."""
    k = k0 + tl.arange(0, BK)
    m = r_ok[:, None] & (k < K)[None, :]
    c = tl.load(c_ptr + r64[:, None] * K + k[None, :], mask=m, other=0).to(tl.int32)
    if E2M1:
        # |v| = 0, 0.5, 1, 1.5, 2, 3, 4, 6: mag >= 2 is (1 + (mag & 1) / 2) * 2^((mag >> 1) - 1),
        # bf16 exponent field 126 + (mag >> 1); mag == 1 is 0.5 (0x3F00); bytes >= 16 decode to 0
        mag = c & 7
        x = tl.where(mag >= 2, ((126 + (mag >> 1)) << 7) + ((mag & 1) << 6),
                     tl.where(mag == 1, 0x3F00, 0))
        x = tl.where(c < 16, x | ((c & 8) << 12), 0)
    else:
        x = tl.load(lut_ptr + c).to(tl.int32) & 0xFFFF
    kb = k0 // BS + tl.arange(0, BK // BS)
    s = tl.load(s_ptr + r64[:, None] * NBLK + kb[None, :],
                mask=r_ok[:, None] & (kb < NBLK)[None, :], other=127).to(tl.int32)
    if NV:
        fs = (tl.load(slut_ptr + s).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        fs = tl.reshape(tl.broadcast_to(fs[:, :, None], (BR, BK // BS, BS)), (BR, BK))
        x = ((x << 16).to(tl.float32, bitcast=True) * fs).to(tl.int32, bitcast=True) >> 16
    else:
        s = tl.reshape(tl.broadcast_to(s[:, :, None], (BR, BK // BS, BS)), (BR, BK))
        x = _fold_mx(x, s, ELO, EHI)
    return tl.where(m, x, 0)


@triton.jit
def gemm_fast_kernel(
        a_ptr, b_ptr, sa_ptr, sb_ptr, lut_a_ptr, lut_b_ptr, slut_ptr, ts_ptr, out_ptr,
        M, N, K, NBLK,
        NV: tl.constexpr, BS: tl.constexpr, ELO_A: tl.constexpr, EHI_A: tl.constexpr,
        ELO_B: tl.constexpr, EHI_B: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        DOT_F32: tl.constexpr):
    """Y = sum over K tiles of dot(bf16(A * scales), bf16(B * scales)) in fp32 (bound contract);
    NVFP4: Y = fl(acc * fl(ta * tb))."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        xa = _load_operand(a_ptr, sa_ptr, lut_a_ptr, slut_ptr, rm64, m_ok, k0, K, NBLK,
                           BLOCK_M, BLOCK_K, BS, NV, ELO_A, EHI_A)
        xb = _load_operand(b_ptr, sb_ptr, lut_b_ptr, slut_ptr, rn64, n_ok, k0, K, NBLK,
                           BLOCK_N, BLOCK_K, BS, NV, ELO_B, EHI_B)
        acc = acc + _dot(_bf16_operand(xa, DOT_F32), tl.trans(_bf16_operand(xb, DOT_F32)),
                         DOT_F32)
    if NV:
        acc = acc * (tl.load(ts_ptr) * tl.load(ts_ptr + 1))
    tl.store(out_ptr + rm64[:, None] * N + rn64[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])


# =========================================================================================
# fast GEMM, pre-decoded: operands decoded once to bf16 (scales folded), then a plain bf16 GEMM
# =========================================================================================
@triton.jit
def mx_to_bf16_kernel(c_ptr, s_ptr, lut_ptr, slut_ptr, out_ptr, R, K, NBLK,
                      BS: tl.constexpr, NV: tl.constexpr, ELO: tl.constexpr, EHI: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, E2M1: tl.constexpr):
    """bf16 bits of element x scale (the same decode and folding as gemm_fast_kernel's tiles:
    exact where the result is a bf16 normal, else RNE with gradual underflow; 0xFF -> NaN),
    written once per element instead of once per GEMM tile that reads it."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    k0 = tl.program_id(1) * BLOCK_K
    r_ok = r < R
    r64 = r.to(tl.int64)
    x = _load_operand(c_ptr, s_ptr, lut_ptr, slut_ptr, r64, r_ok, k0, K, NBLK, BLOCK_R, BLOCK_K,
                      BS, NV, ELO, EHI, E2M1)
    k = k0 + tl.arange(0, BLOCK_K)
    tl.store(out_ptr + r64[:, None] * K + k[None, :], x.to(tl.int16),
             mask=r_ok[:, None] & (k < K)[None, :])


@triton.jit
def gemm_bf16_kernel(a_ptr, b_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     DOT_F32: tl.constexpr):
    """Y = A . B^T, A [M, K] and B [N, K] bf16 bit patterns (int16), fp32 accumulation in any
    order (the bound contract allows any)."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    kk = tl.arange(0, BLOCK_K)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + kk
        k_ok = k < K
        a = tl.load(a_ptr + rm64[:, None] * K + k[None, :], mask=m_ok[:, None] & k_ok[None, :],
                    other=0).to(tl.int32) & 0xFFFF
        b = tl.load(b_ptr + rn64[None, :] * K + k[:, None], mask=k_ok[:, None] & n_ok[None, :],
                    other=0).to(tl.int32) & 0xFFFF
        acc = acc + _dot(_bf16_operand(a, DOT_F32), _bf16_operand(b, DOT_F32), DOT_F32)
    tl.store(out_ptr + rm64[:, None] * N + rn64[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])


# =========================================================================================
# tl.dot_scaled peer (benchmarks only)
# =========================================================================================
@triton.jit
def dot_scaled_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, out_ptr, M, N, K, NBLK,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """MXFP4 x MXFP4 through tl.dot_scaled: a/b packed E2M1 [rows, K/2] (K % BLOCK_K == 0),
    scales [rows, K/32]."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    KH = K // 2
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kh = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        kb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
        a = tl.load(a_ptr + rm64[:, None] * KH + kh[None, :], mask=m_ok[:, None], other=0)
        b = tl.load(b_ptr + rn64[None, :] * KH + kh[:, None], mask=n_ok[None, :], other=0)
        sa = tl.load(sa_ptr + rm64[:, None] * NBLK + kb[None, :], mask=m_ok[:, None], other=127)
        sb = tl.load(sb_ptr + rn64[:, None] * NBLK + kb[None, :], mask=n_ok[:, None], other=127)
        acc = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1", acc)
    tl.store(out_ptr + rm64[:, None] * N + rn64[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])


KERNELS = {
    "e2m1_to_e4m3": e2m1_to_e4m3_kernel,
    "gemm_block_sequential": gemm_block_sequential_kernel,
    "gemm_planes": gemm_planes_kernel,
    "gemm_fast": gemm_fast_kernel,
    "mx_to_bf16": mx_to_bf16_kernel,
    "gemm_bf16": gemm_bf16_kernel,
    "dot_scaled": dot_scaled_kernel,
}

INTERPRETED = type(gemm_fast_kernel).__name__ == "InterpretedFunction"

# =========================================================================================
# formats, tables, contracts
# =========================================================================================
_MX_FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8")
_EXACT_BF16 = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxint8")


def gemm_contract(fmt_a: str, fmt_b: str) -> str:
    """The guarantee of ``mx_gemm(mode="block_sequential")`` for a format pair:
    "block_sequential" (bit for bit) or "bound" (only mode="fast" exists; within
    gemm_error_bound). See the module docstring for the proofs."""
    fa, fb = _check_pair(fmt_a, fmt_b)
    if fa == "nvfp4" or (fa in _EXACT_BF16 and fb in _EXACT_BF16) or _planes_pair(fa, fb):
        return "block_sequential"
    return "bound"


# int8 planes (gemm_planes_kernel): q = v * 2^(4 g), |v| <= 127 -> int8 dots are exact
_PLANE_W = 4
_PLANE_NAN, _PLANE_INF, _PLANE_ZERO, _PLANE_NEG = 1 << 12, 1 << 13, 1 << 14, 1 << 15
_PLANE_CACHE: dict = {}


def _plane_table(el_name: str) -> tuple[np.ndarray, int]:
    """(int32 [256] plane-table entries of gemm_planes_kernel, number of planes G) of an
    element format: each finite code's signed integer v(c) * 2^(4 g(c)) is its exact q (value
    = q * 2^base); g is the smallest plane that holds it in int8."""
    if el_name in _PLANE_CACHE:
        return _PLANE_CACHE[el_name]
    from mxref.gemm import KIND_INF, KIND_NAN, element_table
    q, kind, neg, _, n = element_table(el_name)
    out = np.zeros(256, dtype=np.int32)
    G = 1
    for c in range(n):
        sign = _PLANE_NEG if neg[c] else 0
        if kind[c] == KIND_NAN:
            out[c] = _PLANE_NAN
            continue
        if kind[c] == KIND_INF:
            out[c] = _PLANE_INF | sign
            continue
        qv = int(q[c])
        if qv == 0:
            out[c] = _PLANE_ZERO | sign
            continue
        v = -qv if neg[c] else qv
        g = 0
        while v % (1 << (_PLANE_W * g)) or not -128 <= v >> (_PLANE_W * g) <= 127:
            g += 1
            if g > 15:
                raise ImportError(f"{el_name} code {c}: no int8 plane holds q={qv}")
        out[c] = ((v >> (_PLANE_W * g)) & 0xFF) | (g << 8) | sign
        G = max(G, g + 1)
    _PLANE_CACHE[el_name] = (out, G)
    return out, G


def _max_block_sum_bits(fa: str, fb: str) -> int:
    """Bits of the largest |P_j| = 32 max|qa| max|qb| of a pair."""
    from mxref.gemm import element_table
    qa = int(element_table(get_format(fa).element.name)[0].max())
    qb = int(element_table(get_format(fb).element.name)[0].max())
    return (32 * qa * qb).bit_length()


def _planes_pair(fa: str, fb: str) -> bool:
    """MX pairs with an FP8 operand whose exact block sums fit int64 (|P| < 2^62): every one
    but E5M2 x E5M2 (32 * (7 * 2^29)^2 needs 69 bits)."""
    if fa == "nvfp4" or (fa in _EXACT_BF16 and fb in _EXACT_BF16):
        return False
    return _max_block_sum_bits(fa, fb) <= 62


def _check_pair(fmt_a, fmt_b):
    names = []
    for side, f in (("A", fmt_a), ("B", fmt_b)):
        if not isinstance(f, str) or f not in _MX_FORMATS + ("nvfp4",):
            raise KernelUnsupported(f"operand {side} format {f!r} is not one of "
                                    f"{_MX_FORMATS + ('nvfp4',)}")
        names.append(f)
    if (names[0] == "nvfp4") != (names[1] == "nvfp4"):
        raise KernelUnsupported(f"A is {names[0]} and B is {names[1]}: NVFP4 x MX products "
                                "are not defined")
    return names


def _bf16_bits_table(el_name: str) -> np.ndarray:
    """bf16 bit pattern of every code of an element format (exact; NaN 0x7FC0, Inf kept)."""
    el = ELEMENT_FORMATS[el_name]
    n = 1 << el.bits
    out = np.zeros(256, dtype=np.uint16)
    for c in range(n):
        v = el.decode(c)
        if isinstance(v, float) and np.isnan(v):
            out[c] = 0x7FC0
            continue
        neg = bool(c & el.sign_mask) if el.kind == "float" else v < 0
        mag = abs(float(v))
        f = np.array(mag, dtype=np.float32)
        if float(f) != mag:
            raise ImportError(f"{el_name} code {c} is not an fp32 value")
        bits = int(f.view(np.uint32))
        if bits & 0xFFFF:
            raise ImportError(f"{el_name} code {c} is not exact in bf16")
        out[c] = (bits >> 16) | (0x8000 if neg else 0)
    return out


def _exp_range(el_name: str) -> tuple[int, int]:
    """(min, max) unbiased bf16 exponent of the nonzero finite values of an element format."""
    t = _bf16_bits_table(el_name)
    e = [((int(b) & 0x7FFF) >> 7) - 127 for b in t[:1 << ELEMENT_FORMATS[el_name].bits]
         if 0 < (int(b) & 0x7FFF) < 0x7F80]
    return min(e), max(e)


_LUT_CACHE: dict = {}


def _lut(name: str, device) -> torch.Tensor:
    key = (name, str(device))
    if key not in _LUT_CACHE:
        _LUT_CACHE[key] = torch.from_numpy(_bf16_bits_table(name).view(np.int16).copy()).to(device)
    return _LUT_CACHE[key]


def _part_range(fa: str, fb: str) -> tuple[int, int]:
    """(PLO, PHI): a nonzero exact block sum has 2^PLO <= |part| < 2^PHI."""
    from mxref.gemm import element_table
    qa, _, _, base_a, _ = element_table(get_format(fa).element.name)
    qb, _, _, base_b, _ = element_table(get_format(fb).element.name)
    bound = 32 * int(qa.max()) * int(qb.max())
    return base_a + base_b, base_a + base_b + bound.bit_length()


def gemm_kernel_params(fmt_a: str, fmt_b: str, mode: str = "block_sequential") -> dict:
    """The format constexprs of the GEMM kernel used for a pair and mode."""
    fa, fb = _check_pair(fmt_a, fmt_b)
    nv = fa == "nvfp4"
    bs = 16 if nv else 32
    if mode == "block_sequential":
        if gemm_contract(fa, fb) != "block_sequential":
            raise KernelUnsupported(
                f"{fa} x {fb}: no bit-exact block_sequential kernel (E5M2 x E5M2 block sums "
                "need 69 bits, beyond the int64 plane combination); use mode='fast' (contract "
                "'bound')")
        if _planes_pair(fa, fb):
            ela, elb = get_format(fa).element, get_format(fb).element
            from mxref.gemm import element_table
            base = element_table(ela.name)[3] + element_table(elb.name)[3]
            return {"OPS": 2, "GA": _plane_table(ela.name)[1], "GB": _plane_table(elb.name)[1],
                    "W": _PLANE_W, "BASE": base, "SPECIAL": True,
                    "HAS_INF": "mxfp8_e5m2" in (fa, fb), "F64": _max_block_sum_bits(fa, fb) <= 53,
                    "BS": bs}
        plo, phi = (0, 0) if nv else _part_range(fa, fb)
        return {"OPS": 0 if (fa, fb) == ("mxfp4", "mxfp4") else 1, "NV": nv, "BS": bs,
                "PLO": plo, "PHI": phi}
    if mode in ("fast", "fast_fused"):
        ela = _exp_range(get_format(fa).element.name)
        elb = _exp_range(get_format(fb).element.name)
        return {"NV": nv, "BS": bs, "ELO_A": ela[0], "EHI_A": ela[1], "ELO_B": elb[0],
                "EHI_B": elb[1]}
    raise KernelUnsupported(f"unknown mode {mode!r}; use 'block_sequential', 'fast' or "
                            "'fast_fused'")


# =========================================================================================
# launchers
# =========================================================================================
def _u8_2d(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise KernelUnsupported(f"{name} must be a torch uint8 tensor, got {type(x).__name__}")
    if x.dtype != torch.uint8:
        raise KernelUnsupported(f"{name} must be uint8, got {x.dtype}")
    if x.ndim != 2:
        raise KernelUnsupported(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    return x.contiguous()


def _nonempty(x: torch.Tensor) -> torch.Tensor:
    """Kernels may not get a null pointer: a 1-element stand-in for empty tensors."""
    return x if x.numel() else torch.zeros(1, dtype=x.dtype, device=x.device)


def _pow2(n: int, what: str) -> int:
    if n < 16 or n & (n - 1):
        raise KernelUnsupported(f"{what}={n} must be a power of two >= 16")
    return n


def _tiles(M: int, N: int, block_m, block_n):
    """Default 128 x 128; under the interpreter shrink to the problem (few, large programs)."""
    if block_m is None:
        block_m = 128 if not INTERPRETED else max(16, min(128, triton.next_power_of_2(max(M, 1))))
    if block_n is None:
        block_n = 128 if not INTERPRETED else max(16, min(128, triton.next_power_of_2(max(N, 1))))
    return _pow2(block_m, "block_m"), _pow2(block_n, "block_n")


def _launch_opts(num_warps, num_stages):
    if INTERPRETED:
        return {}
    return {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": False}


def mxfp4_to_e4m3(codes: torch.Tensor, *, packed: bool = False, k: int | None = None,
                  block_r: int = 32, block_c: int = 256) -> torch.Tensor:
    """Exact E2M1 -> E4M3 byte re-encoding: uint8 codes [R, K] (or packed FP4 bytes
    [R, ceil(K/2)] with ``packed=True``, element 0 in the low nibble; ``k`` defaults to twice
    the packed width) -> uint8 E4M3 bytes [R, K] (view as torch.float8_e4m3fn if wanted)."""
    c = _u8_2d("codes", codes)
    R, W = c.shape
    if packed:
        K = 2 * W if k is None else int(k)
        if not 2 * W - 1 <= K <= 2 * W:
            raise KernelUnsupported(f"packed width {W} holds {2 * W - 1} or {2 * W} elements, "
                                    f"not k={K}")
    else:
        K = W
        if k is not None and k != W:
            raise KernelUnsupported(f"k={k} does not match the codes' width {W}")
        if c.numel() and int(c.max()) > 15:
            raise KernelUnsupported(f"E2M1 code 0x{int(c.max()):02X} is wider than 4 bits "
                                    "(unpacked codes are one per byte; pass packed=True for "
                                    "two per byte)")
    out = torch.empty((R, K), dtype=torch.uint8, device=c.device)
    if R and K:
        br = _pow2(block_r, "block_r") if not INTERPRETED else max(
            16, min(1024, triton.next_power_of_2(R)))
        bc = _pow2(block_c, "block_c") if not INTERPRETED else max(
            16, min(4096, triton.next_power_of_2(W)))
        grid = (triton.cdiv(R, br), triton.cdiv(W, bc))
        e2m1_to_e4m3_kernel[grid](c, out, R, K, W, PACKED=bool(packed), BLOCK_R=br,
                                  BLOCK_C=bc)
    return out


def _tensor_scale(name: str, ts, device) -> torch.Tensor:
    if ts is None:
        return torch.ones(1, dtype=torch.float32, device=device)
    if isinstance(ts, bool):
        raise KernelUnsupported(f"{name} must be an fp32 value, got {ts!r}")
    if isinstance(ts, (float, int)):
        f = np.float32(ts)
        if float(f) != float(ts):
            raise KernelUnsupported(f"{name} {ts!r} is not an fp32 value")
        return torch.tensor([float(f)], dtype=torch.float32, device=device)
    if isinstance(ts, (np.floating, np.ndarray)):
        arr = np.asarray(ts)
        if arr.dtype != np.float32 or arr.size != 1:
            raise KernelUnsupported(f"{name} must be one float32 value, got {arr.dtype} "
                                    f"of size {arr.size}")
        return torch.from_numpy(arr.reshape(1).copy()).to(device)
    if isinstance(ts, torch.Tensor):
        if ts.dtype != torch.float32 or ts.numel() != 1:
            raise KernelUnsupported(f"{name} must be a float32 scalar / 1-element tensor, got "
                                    f"{ts.dtype} with {ts.numel()} elements")
        return ts.reshape(1).to(device).contiguous()
    raise KernelUnsupported(f"{name} must be an fp32 value or tensor, got {type(ts).__name__}")


def _unpack_fp4(p: torch.Tensor, K: int) -> torch.Tensor:
    lo, hi = p & 15, p >> 4
    return torch.stack([lo, hi], dim=-1).reshape(p.shape[0], -1)[:, :K].contiguous()


def _operand(side: str, codes, scales, fmt: str, packed: bool, k):
    codes = _u8_2d(f"{side}_codes", codes)
    scales = _u8_2d(f"{side}_scales", scales)
    el = get_format(fmt).element
    if packed:
        if el.bits != 4:
            raise KernelUnsupported(f"packed=True is for FP4 operands; {side} is {fmt} "
                                    f"({el.bits}-bit elements): pass unpacked codes")
        W = codes.shape[1]
        K = 2 * W if k is None else int(k)
        if not 2 * W - 1 <= K <= 2 * W:
            raise KernelUnsupported(f"{side}: packed width {W} does not hold k={K} elements")
    else:
        K = codes.shape[1]
        if codes.numel() and int(codes.max()) >= (1 << el.bits):
            raise KernelUnsupported(f"operand {side} has element code 0x{int(codes.max()):02X}"
                                    f", outside the {el.bits}-bit {el.name} codes")
    return codes, scales, K


def _check_scales(side, scales, rows, K, bs):
    nblk = -(-K // bs)
    if tuple(scales.shape) != (rows, nblk):
        raise KernelUnsupported(f"operand {side} scales shape {tuple(scales.shape)} does not "
                                f"match [{rows}, ceil({K}/{bs}) = {nblk}]")
    return nblk


def mx_gemm(a_scales, a_codes, b_scales, b_codes, fmt_a: str, fmt_b: str, *,
            a_tensor_scale=None, b_tensor_scale=None, mode: str = "block_sequential",
            packed: bool = False, k: int | None = None, block_m: int | None = None,
            block_n: int | None = None, block_k: int = 128, group_m: int = 8,
            num_warps: int | None = None, num_stages: int | None = None,
            use_tma: bool = False, matmul: str = "auto") -> torch.Tensor:
    """Y = A . B^T (float32 [M, N]) of MX / NVFP4 operands: codes uint8 [M, K] / [N, K]
    (``packed=True``: FP4 two per byte, [rows, ceil(K/2)], ``k`` the logical K), scales uint8
    [rows, ceil(K/bs)] (E8M0; NVFP4: E4M3, bs 16), NVFP4 tensor scales fp32 (None = 1).

    mode="block_sequential": bit-exact against mxref's block_sequential contract; refused
    (KernelUnsupported) for pairs whose :func:`gemm_contract` is "bound".
    mode="fast": both operands decoded once to bf16 with the scales folded in
    (:func:`mx_to_bf16`), then a plain bf16 tensor-core GEMM with fp32 accumulation and output;
    contract "bound". ``matmul`` picks that GEMM: "cublas" (``torch.mm(..., out_dtype=float32)``,
    cuBLAS / hipBLASLt), "triton" (:func:`gemm_bf16_kernel`), "auto" (cuBLAS on a GPU where torch
    has the op, else Triton; always Triton in the interpreter).
    mode="fast_fused": the same arithmetic with the decode inside the GEMM's K loop (every
    element decoded once per tile that reads it; measured 0.05x cuBLAS BF16 on an H100)."""
    fa, fb = _check_pair(fmt_a, fmt_b)
    ce = gemm_kernel_params(fa, fb, mode)
    if matmul not in ("auto", "cublas", "triton"):
        raise KernelUnsupported(f"matmul={matmul!r}: expected 'auto', 'cublas' or 'triton'")
    if matmul != "auto" and mode != "fast":
        raise KernelUnsupported(f"matmul={matmul!r} applies to mode='fast' only (mode={mode!r})")
    # defaults: the best of the H100 sweep for the MXFP4 FP8 kernel (bench/results/gpu_kernels.md:
    # 4 warps, 4 stages, 128 x 128); 8 warps, 3 stages elsewhere
    fp8_path = mode == "block_sequential" and (fa, fb) == ("mxfp4", "mxfp4")
    num_warps = num_warps or (4 if fp8_path else 8)
    num_stages = num_stages or (4 if fp8_path else 3)
    nv = fa == "nvfp4"
    bs = 16 if nv else 32
    ac, asc, Ka = _operand("a", a_codes, a_scales, fa, packed, k)
    bc, bsc, Kb = _operand("b", b_codes, b_scales, fb, packed, k)
    if Ka != Kb:
        raise KernelUnsupported(f"K mismatch: A has K={Ka}, B has K={Kb} (B is [N, K])")
    K = Ka
    M, N = ac.shape[0], bc.shape[0]
    nblk = _check_scales("a", asc, M, K, bs)
    _check_scales("b", bsc, N, K, bs)
    if not nv and (a_tensor_scale is not None or b_tensor_scale is not None):
        raise KernelUnsupported("tensor scales are only defined for nvfp4 operands")
    dev = ac.device
    if bc.device != dev or asc.device != dev or bsc.device != dev:
        raise KernelUnsupported("all operands must be on one device")
    # [ta, tb, 1.0]: the kernels read a run-time 1.0 at index 2 (see _blockseq_loop)
    ts = torch.cat([_tensor_scale("a_tensor_scale", a_tensor_scale, dev),
                    _tensor_scale("b_tensor_scale", b_tensor_scale, dev),
                    torch.ones(1, dtype=torch.float32, device=dev)])
    out = torch.empty((M, N), dtype=torch.float32, device=dev)
    if M == 0 or N == 0:
        return out
    if mode == "block_sequential" and ce["OPS"] == 2:
        if packed:
            raise KernelUnsupported("packed=True is for FP4 x FP4 operands; pass unpacked codes")
        return _planes_launch(ac, bc, asc, bsc, fa, fb, ce, M, N, K, nblk, out, block_m,
                              block_n, group_m, num_warps, num_stages)
    if mode == "block_sequential" and ce["OPS"] == 0:
        a8 = mxfp4_to_e4m3(ac, packed=packed, k=K)
        b8 = mxfp4_to_e4m3(bc, packed=packed, k=K)
        return _blockseq_launch(a8, b8, asc, bsc, ce, M, N, K, nblk, None, None, None, ts, out,
                                block_m, block_n, group_m, num_warps, num_stages, use_tma)
    if packed:
        ac, bc = _unpack_fp4(ac, K), _unpack_fp4(bc, K)
    lut_a = _lut(get_format(fa).element.name, dev)
    lut_b = _lut(get_format(fb).element.name, dev)
    slut = _lut("e4m3", dev)
    if mode == "block_sequential":
        return _blockseq_launch(ac, bc, asc, bsc, ce, M, N, K, nblk, lut_a, lut_b, slut, ts,
                                out, block_m, block_n, group_m, num_warps, num_stages, False)
    bm, bn = _tiles(M, N, block_m, block_n)
    bk = _pow2(block_k, "block_k")
    if bk < bs:
        raise KernelUnsupported(f"block_k={bk} must be at least the block size {bs}")
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    if mode == "fast":
        a16 = _to_bf16_bits(ac, asc, lut_a, slut, ce, "A", nblk, e2m1=fa in _E2M1_FORMATS)
        b16 = _to_bf16_bits(bc, bsc, lut_b, slut, ce, "B", nblk, e2m1=fb in _E2M1_FORMATS)
        vendor = None if matmul == "triton" else _vendor_bf16_mm(a16, b16)
        if vendor is not None:
            out = vendor
        elif matmul == "cublas":
            raise KernelUnsupported(
                "matmul='cublas' needs a GPU tensor, the compiled kernels (not the interpreter) "
                "and a torch with torch.mm(bf16, bf16, out_dtype=torch.float32)")
        else:
            gemm_bf16_kernel[grid](a16, b16, out, M, N, K, BLOCK_M=bm, BLOCK_N=bn,
                                   BLOCK_K=min(bk, 64), GROUP_M=group_m, DOT_F32=INTERPRETED,
                                   **_launch_opts(num_warps, num_stages))
        if nv:
            out = out * (ts[0] * ts[1])          # fl(acc * fl(ta * tb)), as gemm_fast_kernel
        return out
    gemm_fast_kernel[grid](_nonempty(ac), _nonempty(bc), _nonempty(asc), _nonempty(bsc),
                           lut_a, lut_b, slut, ts, out, M, N, K, nblk, **ce, BLOCK_M=bm,
                           BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, DOT_F32=INTERPRETED,
                           **_launch_opts(num_warps, num_stages))
    return out


_VENDOR_MM_BROKEN: list[str] = []


def _vendor_bf16_mm(a16, b16):
    """fp32 A . B^T of bf16 bit patterns through the vendor BLAS (bf16 inputs, fp32
    accumulation and output), or None where that is not available (CPU / interpreter, or a
    torch without ``torch.mm(..., out_dtype=)``; the first failure is remembered)."""
    if INTERPRETED or a16.device.type != "cuda" or _VENDOR_MM_BROKEN:
        return None
    try:
        return torch.mm(a16.view(torch.bfloat16), b16.view(torch.bfloat16).t(),
                        out_dtype=torch.float32)
    except (TypeError, RuntimeError, NotImplementedError) as e:
        _VENDOR_MM_BROKEN.append(f"{type(e).__name__}: {e}")
        return None


_E2M1_FORMATS = ("mxfp4", "nvfp4")


def _to_bf16_bits(codes, scales, lut, slut, ce, which, nblk, block_r=32, block_k=256, *,
                  e2m1=False):
    """[R, K] int16 bf16 bits of element x scale (mx_to_bf16_kernel); ``which`` picks the
    A or B exponent range of the fast-kernel constexprs; ``e2m1`` decodes E2M1 codes
    arithmetically instead of through the table."""
    R, K = codes.shape
    out = torch.empty((R, K), dtype=torch.int16, device=codes.device)
    if R and K:
        lo, hi = (ce["ELO_A"], ce["EHI_A"]) if which == "A" else (ce["ELO_B"], ce["EHI_B"])
        grid = (triton.cdiv(R, block_r), triton.cdiv(K, block_k))
        mx_to_bf16_kernel[grid](codes, scales, lut, slut, out, R, K, nblk, BS=ce["BS"],
                                NV=ce["NV"], ELO=lo, EHI=hi, BLOCK_R=block_r, BLOCK_K=block_k,
                                E2M1=e2m1)
    return out


def mx_to_bf16(scales, codes, fmt: str) -> torch.Tensor:
    """Decode MX / NVFP4 codes [R, K] (unpacked uint8) with their scales to bf16 [R, K]: the
    exact value rounded to bf16 (exact where it is a bf16 normal; RNE with gradual underflow
    otherwise; scale 0xFF -> NaN). NVFP4: element x E4M3 block scale (tensor scale not
    applied). The fast GEMM's operand pre-pass, usable on its own."""
    f = get_format(fmt).name
    ac, asc, K = _operand("a", codes, scales, f, False, None)
    bs = 16 if f == "nvfp4" else 32
    nblk = _check_scales("a", asc, ac.shape[0], K, bs)
    ce = gemm_kernel_params(f, f, "fast")
    lut, slut = _lut(get_format(f).element.name, ac.device), _lut("e4m3", ac.device)
    return _to_bf16_bits(ac, asc, lut, slut, ce, "A", nblk,
                         e2m1=f in _E2M1_FORMATS).view(torch.bfloat16)


def _safe_rows(sa, sb, ce, M, N):
    """int8 flags per row of A and of B: 1 where every scale byte of the row lets the kernel's
    two-multiply scaling be exact (see _scale_block); a tile with all flags set runs the
    cheaper K loop. One small torch reduction over the scale bytes (M + N rows of K/32)."""
    if ce["NV"] or sa.shape[1] == 0:
        return (torch.ones(max(M, 1), dtype=torch.int8, device=sa.device),
                torch.ones(max(N, 1), dtype=torch.int8, device=sa.device))
    s_a, s_b = sa.to(torch.int32), sb.to(torch.int32)
    ok_a = (((s_a >= 1 - ce["PLO"]) & (s_a <= 255 - ce["PHI"])) | (s_a == 255)).all(dim=1)
    ok_b = (s_b >= 1).all(dim=1)
    return ok_a.to(torch.int8).contiguous(), ok_b.to(torch.int8).contiguous()


def _blockseq_launch(a, b, sa, sb, ce, M, N, K, nblk, lut_a, lut_b, slut, ts, out, block_m,
                     block_n, group_m, num_warps, num_stages, use_tma):
    bm, bn = _tiles(M, N, block_m, block_n)
    if use_tma:
        if INTERPRETED or ce["OPS"] != 0:
            raise KernelUnsupported("use_tma needs a GPU and the MXFP4 x MXFP4 FP8 path")
        if K % 16:
            raise KernelUnsupported(f"use_tma needs K % 16 == 0 (16-byte row strides), K={K}")
        triton.set_allocator(lambda size, align, stream: torch.empty(
            size, dtype=torch.int8, device=a.device))
    dummy = torch.zeros(1, dtype=torch.int16, device=out.device)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    ra, rb = _safe_rows(sa, sb, ce, M, N)
    gemm_block_sequential_kernel[grid](
        _nonempty(a), _nonempty(b), _nonempty(sa), _nonempty(sb),
        dummy if lut_a is None else lut_a, dummy if lut_b is None else lut_b,
        dummy if slut is None else slut, ts, out, ra, rb, M, N, K, nblk, **ce, BLOCK_M=bm,
        BLOCK_N=bn, GROUP_M=group_m, DOT_F32=INTERPRETED, USE_TMA=bool(use_tma),
        **_launch_opts(num_warps, num_stages))
    return out


def _plane_lut(name: str, device) -> torch.Tensor:
    key = ("planes", name, str(device))
    if key not in _LUT_CACHE:
        _LUT_CACHE[key] = torch.from_numpy(_plane_table(name)[0].copy()).to(device)
    return _LUT_CACHE[key]


def _planes_launch(a, b, sa, sb, fa, fb, ce, M, N, K, nblk, out, block_m, block_n, group_m,
                   num_warps, num_stages):
    bm, bn = _tiles(M, N, block_m or (None if INTERPRETED else 64),
                    block_n or (None if INTERPRETED else 64))
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    kw = {k: v for k, v in ce.items() if k != "OPS"}
    gemm_planes_kernel[grid](
        _nonempty(a), _nonempty(b), _nonempty(sa), _nonempty(sb),
        _plane_lut(get_format(fa).element.name, out.device),
        _plane_lut(get_format(fb).element.name, out.device), out, M, N, K, nblk, **kw,
        BLOCK_M=bm, BLOCK_N=bn, GROUP_M=group_m, **_launch_opts(num_warps, num_stages))
    return out


def mx_gemm_prepared(a_scales, a_e4m3, b_scales, b_e4m3, *, block_m: int | None = None,
                     block_n: int | None = None, group_m: int = 8, num_warps: int = 4,
                     num_stages: int = 4, use_tma: bool = False) -> torch.Tensor:
    """The bit-exact MXFP4 x MXFP4 block_sequential GEMM alone, on operands already
    re-encoded by :func:`mxfp4_to_e4m3` (uint8 E4M3 bytes or torch.float8_e4m3fn, [M, K] and
    [N, K]; they must hold E2M1 values) and E8M0 scales [rows, ceil(K/32)]."""
    ops = []
    for name, x in (("a_e4m3", a_e4m3), ("b_e4m3", b_e4m3)):
        if isinstance(x, torch.Tensor) and x.dtype == getattr(torch, "float8_e4m3fn", None):
            x = x.view(torch.uint8)
        ops.append(_u8_2d(name, x))
    a8, b8 = ops
    asc, bsc = _u8_2d("a_scales", a_scales), _u8_2d("b_scales", b_scales)
    if a8.shape[1] != b8.shape[1]:
        raise KernelUnsupported(f"K mismatch: A is {tuple(a8.shape)}, B is {tuple(b8.shape)}")
    M, K = a8.shape
    N = b8.shape[0]
    nblk = _check_scales("a", asc, M, K, 32)
    _check_scales("b", bsc, N, K, 32)
    out = torch.empty((M, N), dtype=torch.float32, device=a8.device)
    if M == 0 or N == 0:
        return out
    ce = gemm_kernel_params("mxfp4", "mxfp4", "block_sequential")
    ts = torch.ones(3, dtype=torch.float32, device=a8.device)
    return _blockseq_launch(a8, b8, asc, bsc, ce, M, N, K, nblk, None, None, None, ts, out,
                            block_m, block_n, group_m, num_warps, num_stages, use_tma)


def dot_scaled_gemm(a_scales, a_packed, b_scales, b_packed, *, block_m: int | None = None,
                    block_n: int | None = None, block_k: int = 128, group_m: int = 8,
                    num_warps: int = 8, num_stages: int = 3) -> torch.Tensor:
    """MXFP4 x MXFP4 through ``tl.dot_scaled`` (packed FP4 [rows, K/2], E8M0 [rows, K/32]);
    benchmarks only, no contract: on Hopper it upcasts to bf16 and decodes scale 0x00 as 0."""
    if not hasattr(tl, "dot_scaled"):
        raise KernelUnsupported(f"triton {triton.__version__} has no tl.dot_scaled")
    a, b = _u8_2d("a_packed", a_packed), _u8_2d("b_packed", b_packed)
    asc, bsc = _u8_2d("a_scales", a_scales), _u8_2d("b_scales", b_scales)
    if a.shape[1] != b.shape[1]:
        raise KernelUnsupported(f"K mismatch: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    M, N, K = a.shape[0], b.shape[0], 2 * a.shape[1]
    bk = _pow2(block_k, "block_k")
    if bk < 64 or K % bk:
        raise KernelUnsupported(f"dot_scaled_gemm needs K % block_k == 0 and block_k >= 64 "
                                f"(K={K}, block_k={bk})")
    nblk = _check_scales("a", asc, M, K, 32)
    _check_scales("b", bsc, N, K, 32)
    out = torch.empty((M, N), dtype=torch.float32, device=a.device)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    bm, bn = _tiles(M, N, block_m, block_n)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    dot_scaled_kernel[grid](a, b, asc, bsc, out, M, N, K, nblk, BLOCK_M=bm, BLOCK_N=bn,
                            BLOCK_K=bk, GROUP_M=group_m, **_launch_opts(num_warps, num_stages))
    return out


# =========================================================================================
# ahead-of-time specs
# =========================================================================================
_GEMM_ARGS = {"a_ptr": "*u8", "b_ptr": "*u8", "sa_ptr": "*u8", "sb_ptr": "*u8",
              "lut_a_ptr": "*i16", "lut_b_ptr": "*i16", "slut_ptr": "*i16", "ts_ptr": "*fp32",
              "out_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "NBLK": "i32"}


def _sig(fn, runtime: dict, ce: dict) -> dict:
    types = dict(runtime)
    types.update({k: "constexpr" for k in ce})
    names = fn.arg_names
    if set(names) != set(types):
        raise KeyError(f"{fn.__name__}: arguments {sorted(set(names) ^ set(types))} are not "
                       "described")
    return {k: types[k] for k in names}


def aot_specs() -> list:
    """(id, jitfn, signature, constexprs) for ahead-of-time compilation of every kernel in
    representative constexpr combinations (GPU settings: bf16 dots, 128 x 128 tiles)."""
    specs = []
    for packed in (False, True):
        ce = {"PACKED": packed, "BLOCK_R": 32, "BLOCK_C": 256}
        specs.append((f"e2m1_to_e4m3-packed{int(packed)}", e2m1_to_e4m3_kernel,
                      _sig(e2m1_to_e4m3_kernel, {"src_ptr": "*u8", "dst_ptr": "*u8", "R": "i32",
                                                 "K": "i32", "KP": "i32"}, ce), ce))
    for fa, fb in (("mxfp4", "mxfp4"), ("mxfp6_e3m2", "mxint8"), ("nvfp4", "nvfp4")):
        ce = {**gemm_kernel_params(fa, fb, "block_sequential"), "BLOCK_M": 128, "BLOCK_N": 128,
              "GROUP_M": 8, "DOT_F32": False, "USE_TMA": False}
        specs.append((f"block_sequential-{fa}-{fb}", gemm_block_sequential_kernel,
                       _sig(gemm_block_sequential_kernel,
                            {**_GEMM_ARGS, "ra_ptr": "*i8", "rb_ptr": "*i8"}, ce), ce))
    for fa, fb in (("mxfp8_e4m3", "mxfp8_e4m3"), ("mxfp8_e5m2", "mxfp8_e4m3"),
                   ("mxint8", "mxfp8_e5m2")):
        ce = {k: v for k, v in gemm_kernel_params(fa, fb, "block_sequential").items()
              if k != "OPS"}
        ce.update({"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_M": 8})
        specs.append((f"planes-{fa}-{fb}", gemm_planes_kernel,
                      _sig(gemm_planes_kernel, {"a_ptr": "*u8", "b_ptr": "*u8", "sa_ptr": "*u8",
                                                "sb_ptr": "*u8", "pl_a_ptr": "*i32",
                                                "pl_b_ptr": "*i32", "out_ptr": "*fp32",
                                                "M": "i32", "N": "i32", "K": "i32",
                                                "NBLK": "i32"}, ce), ce))
    for fa, fb in (("mxfp8_e5m2", "mxfp4"), ("nvfp4", "nvfp4")):
        ce = {**gemm_kernel_params(fa, fb, "fast"), "BLOCK_M": 128, "BLOCK_N": 128,
              "BLOCK_K": 64, "GROUP_M": 8, "DOT_F32": False}
        specs.append((f"fast-{fa}-{fb}", gemm_fast_kernel,
                      _sig(gemm_fast_kernel, _GEMM_ARGS, ce), ce))
    for fa in ("mxfp4", "mxfp8_e4m3", "nvfp4"):
        p = gemm_kernel_params(fa, fa, "fast")
        ce = {"BS": p["BS"], "NV": p["NV"], "ELO": p["ELO_A"], "EHI": p["EHI_A"],
              "BLOCK_R": 32, "BLOCK_K": 256, "E2M1": fa in _E2M1_FORMATS}
        specs.append((f"mx_to_bf16-{fa}", mx_to_bf16_kernel,
                      _sig(mx_to_bf16_kernel, {"c_ptr": "*u8", "s_ptr": "*u8", "lut_ptr": "*i16",
                                               "slut_ptr": "*i16", "out_ptr": "*i16", "R": "i32",
                                               "K": "i32", "NBLK": "i32"}, ce), ce))
    ce = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "DOT_F32": False}
    specs.append(("gemm_bf16", gemm_bf16_kernel,
                  _sig(gemm_bf16_kernel, {"a_ptr": "*i16", "b_ptr": "*i16", "out_ptr": "*fp32",
                                          "M": "i32", "N": "i32", "K": "i32"}, ce), ce))
    ce = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8}
    specs.append(("dot_scaled-mxfp4", dot_scaled_kernel,
                  _sig(dot_scaled_kernel, {"a_ptr": "*u8", "b_ptr": "*u8", "sa_ptr": "*u8",
                                           "sb_ptr": "*u8", "out_ptr": "*fp32", "M": "i32",
                                           "N": "i32", "K": "i32", "NBLK": "i32"}, ce), ce))
    return specs
