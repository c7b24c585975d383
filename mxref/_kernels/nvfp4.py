"""NVFP4 kernels: the per-tensor constants, block quantization and dequantization.

The block scale (nvfp4_order, nvfp4_scale_min) is :func:`.semantics.nvfp4_block_scale`; NaN /
Inf in a block is :func:`.semantics.block_poisoned`; elements go through encode_f32 /
round_magnitude / zero_code / finish_code as every other kernel.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..profiles import K_FLUSH, K_OVERFLOW, K_ROUNDING, K_SZERO
from ..formats import P_NAN
from .f32 import (_JIT, F32_2688, F32_INF, F32_MAXBITS, F32_ONE, F32_QNAN, F32_SIX, STOCHASTIC,
                  bit_length, element_quotient, f32_div, f32_min_pos, f32_mul, f32_parts, njit,
                  round_magnitude, to_f32_bits)
from .semantics import (NV_EXACT, NV_TE, NV_TORCHAO, NV_TRITON_KERNELS, block_amax, block_poisoned, code_to_f32,
                        element_parts, encode_f32, finish_code, nvfp4_block_scale, zero_code)


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


@njit(parallel=True, **_JIT)
def quantize_nvfp4(bits, block, t, s_enc, sc6, order, two_level, fp, e4p, f32p, pp, rbits,
                   codes, scales):
    rows, n = bits.shape
    nblk = (n + block - 1) // block
    flush = pp[K_FLUSH] != 0
    use_rbits = pp[K_ROUNDING] == STOCHASTIC
    for tb in nb.prange(rows * nblk):
        r = tb // nblk
        lo = (tb % nblk) * block
        hi = min(lo + block, n)
        amax, has_nan, has_inf = block_amax(bits, r, lo, hi, flush)
        if block_poisoned(has_nan, has_inf, pp):
            scales[r, tb % nblk] = e4p[P_NAN]
            for i in range(lo, hi):
                codes[r, i] = 0
            continue
        if has_inf:
            amax = F32_INF                 # an Inf that does not poison is the block amax
        sc = nvfp4_block_scale(amax, order, two_level, t, sc6, 6, e4p, f32p, pp)
        scales[r, tb % nblk] = sc
        sval = code_to_f32(sc, e4p, f32p)
        if order == NV_TE:
            inv = f32_min_pos(f32_div(F32_ONE, f32_mul(sval, t, f32p), f32p), F32_MAXBITS)
        elif order == NV_TORCHAO:
            # torchao 0.18 multiplies by the reciprocal of the combined scale (MSLK Triton order):
            # fl(fl(1 / T) / S) with two-level scaling, fl(1 / S) with one
            recip = f32_div(f32_div(F32_ONE, t, f32p) if two_level else F32_ONE, sval, f32p)
        elif order == NV_TRITON_KERNELS:
            # triton_kernels: quant_scale = where(S == 0, 0, fl(1 / S)); x * quant_scale
            recip = 0 if sc == 0 else f32_div(F32_ONE, sval, f32p)
        for i in range(lo, hi):
            b = np.int64(bits[r, i])
            rb = np.int64(rbits[r, i]) if use_rbits else np.int64(0)
            a = b & 0x7FFFFFFF
            if a >= F32_INF or order != NV_EXACT:
                if order == NV_TE:
                    b = f32_mul(b, inv, f32p)
                elif order == NV_TORCHAO or order == NV_TRITON_KERNELS:
                    # triton_kernels saturates the E2M1 cast (min(code, 7)): the same codes
                    # as torchao's clamp to +-6 followed by RNE
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

